"""Runs spread over a pool of GPUs or machines, on Dask distributed (``run --gpus 0,1 | all`` or ``--cluster``).

A task is one variant over the whole shape set (``run``), or both sides of a ``compare`` (so they share one GPU), on
one Dask worker holding one GPU (worker resource ``GPU=1``, so a worker runs one task at a time). It carries the
submission's files by content (harness.parent.bundle), the shape set and the RunOptions (settings, secret seed,
sandbox request); on the worker it runs ``runner.run`` (or ``compare.compare``) as a serial run does, so the case
seeds, the trusted parent and its untrusted worker process are the same, and the record names the worker's device
and host (``environment``).

While a task runs, its worker reports each hook (``on_start``, ``on_case``, ...) as a Dask event (topic ``TOPIC``);
tasks are submitted as GPUs free up (``gpu_slots``); the client stores every case as it arrives
(harness.results.store.StoreRecorder), so a worker that dies loses only the case in flight. The scheduler retries a
task whose worker died once on another worker (``allowed-failures`` = ``ALLOWED_FAILURES``): the dead attempt's run
stays in the store, incomplete, with the cases it measured. A task that fails again (or raises) is recorded with
every case it did not measure as ERROR. The record keeps the submission's path as the client named it (the worker's
copy is a cache).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import queue
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from collections.abc import Iterator

from harness.parent import runner
from harness.parent.bundle import Bundle, pack, unpack
from harness.parent.registry import Variant
from harness.parent.sandbox import cache_base
from harness.parent.seeds import secret_for
from harness.results.ranking import plural
from harness.results.record import (
    CaseResult,
    Environment,
    RunRecord,
    Status,
    SubmissionInfo,
    case_result_from_dict,
    run_from_dict,
)
from harness.results.store import ResultStore, StoreRecorder
from harness.shapes import ShapeSet

#: The Dask event topic a task's hooks travel on.
TOPIC = "fp4bench-run"
#: The worker resource a task needs one of; start each worker with ``--resources GPU=1``.
RESOURCE = "GPU"
#: How many times a task may lose its worker before it is recorded as an error (one retry elsewhere).
ALLOWED_FAILURES = 1
#: How often (s) the client looks for finished tasks between events.
POLL_S = 0.1


class PoolError(ValueError):
    """--gpus or --cluster cannot be used as given (one line, safe to show)."""


@dataclass(frozen=True)
class Task:
    """One variant over one shape set on one GPU, or two compared there; ``slots``: the index of each bundle's
    record among the pool run's records (the variants' order as given)."""

    slots: tuple[int, ...]
    bundles: tuple[Bundle, ...]
    shapes: ShapeSet
    opts: runner.RunOptions


def gpu_list(text: str, count: int | None = None) -> list[str]:
    """``--gpus`` (``all`` or comma-separated indices such as ``0,1``) -> CUDA device indices as strings, for
    ``count`` GPUs (None: as many as torch sees here). Raises PoolError with no GPU, for an index out of range,
    repeated, or not a number."""
    if count is None:
        import torch

        count = torch.cuda.device_count()
    if count == 0:
        raise PoolError("--gpus: this machine has no CUDA GPU (to spread runs over CPU workers, use "
                        "--cluster local:N)")
    if text.strip() == "all":
        return [str(i) for i in range(count)]
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise PoolError(f"--gpus: expected all or GPU indices separated by commas (e.g. 0,1), got {text!r}")
    if len(set(parts)) != len(parts) or max(int(p) for p in parts) >= count:
        raise PoolError(f"--gpus {text}: this machine has {count} GPU(s), indices 0 to {count - 1}, each once")
    return [str(int(p)) for p in parts]


def local_workers(cluster: str) -> int | None:
    """``local:N`` -> N (a LocalCluster of N workers); None for a scheduler address. Raises PoolError for a bad
    N or an address that is not ``tcp://HOST:PORT`` (or another Dask protocol)."""
    if cluster.startswith("local:"):
        n = cluster[len("local:"):]
        if not n.isdigit() or int(n) < 1:
            raise PoolError(f"--cluster {cluster}: expected local:N with N >= 1 workers")
        return int(n)
    if "://" not in cluster:
        raise PoolError(f"--cluster {cluster}: expected a scheduler address (tcp://HOST:8786) or local:N")
    return None


def gpu_slots(client) -> int:
    """How many tasks ``client``'s cluster runs at once: the sum of its workers' GPU resources. Tasks are
    submitted only as slots free up, so a worker that dies held only the task it was running (a task assigned
    to a busy worker would count that worker's death as its own failure). Raises PoolError when there are none."""
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    slots = sum(int(w.get("resources", {}).get(RESOURCE, 0)) for w in workers)
    if slots == 0:
        raise PoolError(f"the Dask cluster has no worker with the resource {RESOURCE} (start each worker with "
                        f"--nthreads 1 --resources {RESOURCE}=1)")
    return slots


@contextlib.contextmanager
def open_client(gpus: list[str] | None = None, cluster: str | None = None) -> Iterator:
    """A dask.distributed Client: on a local cluster of one worker per GPU in ``gpus`` (each pinned by
    CUDA_VISIBLE_DEVICES), on ``local:N`` CPU workers, or on the scheduler at ``cluster``. Local schedulers get
    ``allowed-failures`` = ALLOWED_FAILURES; a remote one must be started with it (docs/usage.md, "More than one GPU")."""
    import dask
    from distributed import Client, LocalCluster, Nanny, Scheduler, SpecCluster

    # memory_limit 0: the nanny must not restart a trusted parent mid-run for the memory its samples take.
    worker = {"nthreads": 1, "resources": {RESOURCE: 1}, "memory_limit": 0}
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        if gpus:
            specs = {f"gpu{g}": {"cls": Nanny, "options": {**worker, "env": {"CUDA_VISIBLE_DEVICES": g}}}
                     for g in gpus}
            local = SpecCluster(workers=specs, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}})
        elif cluster is not None and local_workers(cluster) is not None:
            local = LocalCluster(n_workers=local_workers(cluster), threads_per_worker=1, processes=True,
                                 resources={RESOURCE: 1}, memory_limit=0, dashboard_address=None)
        else:
            local = None
        with local or contextlib.nullcontext():
            try:
                client = Client(local or cluster)
            except OSError as exc:
                raise PoolError(f"--cluster {cluster}: cannot reach the scheduler ({exc})") from None
            with client:
                yield client


def run_task(task: Task):
    """Runs in a Dask worker: unpack the submissions and run them as a serial run would; returns the RunRecord,
    or for two bundles the CompareResult. Each hook is also sent to the client as an event as it happens."""
    variants = [unpack(b, cache_base() / "bundles") for b in task.bundles]
    observers = tuple(_Events(slot) for slot in task.slots)
    if len(variants) == 1:
        return runner.run(variants[0], task.shapes, task.opts, observers[0])
    from harness.parent import compare

    return compare.compare(*variants, task.shapes, task.opts, observers)


class _Events(runner.Observer):
    """Worker side: the runner's hooks as Dask events on TOPIC; records travel as JSON text (an event must be
    msgpack of exact built-in types, and a record's fields may be str subclasses such as torch's version)."""

    def __init__(self, slot: int):
        from distributed import get_worker

        self.worker, self.slot, self.run_id = get_worker(), slot, ""

    def _send(self, kind: str, **fields) -> None:
        self.worker.log_event(TOPIC, {"slot": self.slot, "run_id": self.run_id, "kind": kind, **fields})

    def on_start(self, record: RunRecord) -> None:
        self.run_id = record.run_id
        self._send("start", record=record.to_json())

    def on_phase(self, index: int | None, phase: str) -> None:
        self._send("phase", index=index, phase=phase)

    def on_case_start(self, index: int, case) -> None:
        self._send("case_start", index=index)

    def on_sample(self, index: int, runs: int) -> None:
        self._send("sample", index=index, runs=runs)

    def on_case(self, index: int, result: CaseResult) -> None:
        self._send("case", index=index, result=json.dumps(result.to_dict()))


@dataclass
class _Attempt:
    """The client's view of one record slot (a variant): the run its task's current attempt began, the cases
    stored for it, and the case indices the progress display has counted (over all attempts)."""

    variant: Variant
    record: RunRecord | None = None
    cases: dict[int, CaseResult] = dataclasses.field(default_factory=dict)
    recorder: StoreRecorder | None = None
    counted: set[int] = dataclasses.field(default_factory=set)
    final: RunRecord | None = None
    view: object = None  # the progress display's hooks for this slot (its side, named after the variant)


class PoolRun:
    """Client side of a pool run: submit the Tasks (``run``: one per variant; ``compare``: one for both), store
    what the events and results say, return the records. ``store`` None: nothing stored (--no-store);
    ``display``: an Observer-like progress display over every task's cases (or None)."""

    def __init__(self, variants: list[Variant], shapes: ShapeSet, opts: runner.RunOptions,
                 store: ResultStore | None = None, display=None):
        # one secret for every submission of the pool (a timed run given none draws it here, not once per worker)
        opts = dataclasses.replace(opts, secret=secret_for(opts.secret, opts.mode, [c.seed for c in shapes.cases]))
        self.variants, self.shapes, self.opts, self.store = variants, shapes, opts, store
        self.display = display or runner.Observer()
        self.attempts = [_Attempt(v, view=self.display.side(v.name) if hasattr(self.display, "side") else
                                  self.display) for v in variants]
        self._events: queue.Queue = queue.Queue()

    def run(self, client) -> list[RunRecord]:
        """Run every variant on ``client``'s workers; returns their records in the order given. Raises
        KeyboardInterrupt as it came (call ``abandon`` then)."""
        self._execute(client, [Task((i,), (pack(v),), self.shapes, self.opts) for i, v in enumerate(self.variants)])
        return [a.final for a in self.attempts]

    def compare(self, client):
        """Compare the two variants (A, B) on one worker of ``client``; returns the CompareResult (its records as
        stored). A task that failed gives one with no ratios, each shape's note saying why."""
        from harness.parent import compare

        a, b = self.variants
        result = self._execute(client, [Task((0, 1), (pack(a), pack(b)), self.shapes, self.opts)])[0]
        ra, rb = (x.final for x in self.attempts)
        if result is None:
            shapes = tuple(compare.ShapeComparison(i, c.case, c, rb.cases[i], None, c.message)
                           for i, c in enumerate(ra.cases))
            return compare.CompareResult(ra, rb, shapes, None, f"geomean (0 of {plural(len(shapes), 'shape')})")
        return dataclasses.replace(result, a=ra, b=rb)

    def _execute(self, client, tasks: list[Task]) -> list:
        """Submit ``tasks``, store their events and results as they come; returns each task's result (None for a
        task that failed)."""
        from distributed import as_completed

        results: list = [None] * len(tasks)
        waiting, futures, done = list(range(len(tasks))), {}, as_completed()

        def submit() -> None:
            i = waiting.pop(0)
            key = f"fp4bench-{self.variants[tasks[i].slots[0]].name}-{uuid.uuid4().hex[:8]}"
            future = client.submit(run_task, tasks[i], resources={RESOURCE: 1}, pure=False, key=key)
            futures[future] = i
            done.add(future)

        client.subscribe_topic(TOPIC, lambda event: self._events.put(event[1]))
        try:
            for _ in range(min(gpu_slots(client), len(tasks))):
                submit()
            while not done.is_empty():
                self._drain(POLL_S)
                for future in done.next_batch(block=False):
                    self._drain(0)  # every event sent before the result, before the result
                    i = futures.pop(future)
                    results[i] = self._settle(tasks[i].slots, future)
                    future.release()  # a worker that dies later must not make the scheduler run it again
                    if waiting:
                        submit()
        finally:
            client.unsubscribe_topic(TOPIC)
        return results

    def _settle(self, slots: tuple[int, ...], future):
        """Record a finished task's future: its records, or its failure on every slot. Returns its result or None."""
        if future.status != "finished":
            for slot in slots:
                self._failed(slot, future.exception())
            return None
        result = future.result()
        for slot, record in zip(slots, (result,) if len(slots) == 1 else (result.a, result.b)):
            self._finished(slot, record)
        return result

    def abandon(self) -> list[str]:
        """After an interruption: every run begun and not finished is marked finished and incomplete, keeping
        its cases. Returns their run ids."""
        return [run_id for a in self.attempts if a.recorder and (run_id := a.recorder.abandon())]

    def store_failure(self):
        """The first write to the store that failed (a StoreError; the runs went on unstored), or None."""
        return next((a.recorder.failure for a in self.attempts if a.recorder and a.recorder.failure), None)

    def _drain(self, wait_s: float) -> None:
        try:
            self._event(self._events.get(timeout=wait_s) if wait_s else self._events.get_nowait())
            while True:
                self._event(self._events.get_nowait())
        except queue.Empty:
            pass

    def _event(self, msg: dict) -> None:
        attempt = self.attempts[msg["slot"]]
        if attempt.final is not None:
            return  # late news of a task already recorded
        if msg["kind"] == "start":
            self._begin(attempt, run_from_dict(json.loads(msg["record"])))
        elif attempt.record is None or attempt.record.run_id != msg["run_id"]:
            return  # an attempt that has since been replaced
        elif msg["kind"] == "case":
            self._case(attempt, msg["index"], case_result_from_dict(json.loads(msg["result"])))
        elif msg["kind"] == "case_start":
            attempt.view.on_case_start(msg["index"], self.shapes.cases[msg["index"]])
        elif msg["kind"] == "sample":
            attempt.view.on_sample(msg["index"], msg["runs"])
        elif msg["kind"] == "phase":
            attempt.view.on_phase(msg["index"], msg["phase"])

    def _begin(self, attempt: _Attempt, record: RunRecord) -> None:
        """A (new) attempt began: the one before it, if any, lost its worker and stays incomplete."""
        if attempt.recorder is not None:
            attempt.recorder.abandon()
        record = dataclasses.replace(record, cases=(), submission=dataclasses.replace(
            record.submission, path=str(attempt.variant.path)))
        attempt.record, attempt.cases = record, {}
        attempt.recorder = StoreRecorder(self.store) if self.store else None
        if attempt.recorder:
            attempt.recorder.on_start(record)

    def _case(self, attempt: _Attempt, index: int, result: CaseResult) -> None:
        if index in attempt.cases:
            return
        attempt.cases[index] = result
        if attempt.recorder:
            attempt.recorder.on_case(index, result)
        if index not in attempt.counted:
            attempt.counted.add(index)
            attempt.view.on_case(index, result)

    def _finished(self, index: int, record: RunRecord) -> None:
        attempt = self.attempts[index]
        if attempt.record is None or attempt.record.run_id != record.run_id:
            self._begin(attempt, record)  # its start event was missed
        for i, result in enumerate(record.cases):
            self._case(attempt, i, result)
        self._close(attempt, dataclasses.replace(record, submission=attempt.record.submission))

    def _failed(self, index: int, exc: BaseException) -> None:
        """The task lost its worker ALLOWED_FAILURES + 1 times, or raised: every case not measured is an ERROR."""
        from distributed import KilledWorker

        attempt = self.attempts[index]
        if isinstance(exc, KilledWorker):
            why = f"the machine running it died {ALLOWED_FAILURES + 1} times ({exc})"
        else:
            why = f"harness error on the Dask worker: {type(exc).__name__}: {exc}"
        if attempt.record is None:
            self._begin(attempt, self._unstarted(attempt.variant))
        for i, case in enumerate(self.shapes.cases):
            if i not in attempt.cases:
                self._case(attempt, i, CaseResult(case, Status.ERROR, f"not measured: {why}"))
        self._close(attempt, dataclasses.replace(attempt.record, cases=tuple(attempt.cases[i] for i in
                                                                          range(len(self.shapes.cases))),
                                                 complete=True))

    def _close(self, attempt: _Attempt, record: RunRecord) -> None:
        if attempt.recorder:
            attempt.recorder.on_finish(record)
        attempt.final = record
        self.display.on_finish(record)

    def _unstarted(self, variant: Variant) -> RunRecord:
        """The record of a task that never reported its start: where it would have run is unknown."""
        unknown = Environment(*["unknown"] * len(dataclasses.fields(Environment)))
        return RunRecord(uuid.uuid4().hex[:12], datetime.now(timezone.utc).isoformat(timespec="seconds"),
                         self.opts.mode, self.opts.data, self.shapes.name, self.opts.secret,
                         SubmissionInfo(variant.name, str(variant.path), variant.sha256, dict(variant.popcorn)),
                         unknown, (), False, shape_set_id=self.shapes.id)
