"""Runs spread over a pool of GPUs or machines, on Dask distributed (``run --gpus 0,1 | all`` or ``--cluster``).

A task is one variant over the whole shape set, on one Dask worker holding one GPU (worker resource ``GPU=1``,
so a worker runs one task at a time). The task carries the submission's files by content
(harness.parent.bundle), the shape set and the RunOptions (settings, secret seed, sandbox request); on the
worker it runs ``runner.run`` as a serial run does, so the case seeds, the trusted parent and its untrusted
worker process are the same, and the record names the worker's device and host (``environment``).

While a task runs, its worker reports each hook (``on_start``, ``on_case``, ...) as a Dask event (topic
``TOPIC``); the client stores every case as it arrives (harness.results.store.StoreRecorder), so a worker
that dies loses only the case in flight. The scheduler retries a task whose worker died once on another worker
(``allowed-failures`` = ``ALLOWED_FAILURES``): the dead attempt's run stays in the store, incomplete, with the
cases it measured. A task that fails again (or raises) is recorded with every case it did not measure as
ERROR. The record keeps the submission's path as the client named it (the worker's copy is a cache).
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
from task.spec import ShapeSet

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
    """One variant over one shape set on one GPU; ``index`` orders the records as the variants were given."""

    index: int
    bundle: Bundle
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


@contextlib.contextmanager
def open_client(gpus: list[str] | None = None, cluster: str | None = None) -> Iterator:
    """A dask.distributed Client: on a local cluster of one worker per GPU in ``gpus`` (each pinned by
    CUDA_VISIBLE_DEVICES), on ``local:N`` CPU workers, or on the scheduler at ``cluster``. Local schedulers get
    ``allowed-failures`` = ALLOWED_FAILURES; a remote one must be started with it (README)."""
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


def run_task(task: Task) -> dict:
    """Runs in a Dask worker: unpack the submission, run it as a serial run would, return ``to_dict()`` of its
    record. Each hook is also sent to the client as an event as it happens."""
    variant = unpack(task.bundle, cache_base() / "bundles")
    return runner.run(variant, task.shapes, task.opts, _Events(task.index)).to_dict()


class _Events(runner.Observer):
    """Worker side: the runner's hooks as Dask events on TOPIC; records travel as JSON text (an event must be
    msgpack of exact built-in types, and a record's fields may be str subclasses such as torch's version)."""

    def __init__(self, task: int):
        from distributed import get_worker

        self.worker, self.task, self.run_id = get_worker(), task, ""

    def _send(self, kind: str, **fields) -> None:
        self.worker.log_event(TOPIC, {"task": self.task, "run_id": self.run_id, "kind": kind, **fields})

    def on_start(self, record: RunRecord) -> None:
        self.run_id = record.run_id
        self._send("start", record=record.to_json())

    def on_case_start(self, index: int, case) -> None:
        self._send("case_start", index=index)

    def on_sample(self, index: int, runs: int) -> None:
        self._send("sample", index=index, runs=runs)

    def on_case(self, index: int, result: CaseResult) -> None:
        self._send("case", index=index, result=json.dumps(result.to_dict()))


@dataclass
class _Attempt:
    """The client's view of one task: the run its current attempt began, the cases stored for it, and the case
    indices the progress display has counted (over all attempts)."""

    variant: Variant
    record: RunRecord | None = None
    cases: dict[int, CaseResult] = dataclasses.field(default_factory=dict)
    recorder: StoreRecorder | None = None
    counted: set[int] = dataclasses.field(default_factory=set)
    final: RunRecord | None = None


class PoolRun:
    """Client side of a pool run: submit one Task per variant, store what the events and results say, return the
    records. ``store`` None: nothing stored (--no-store); ``display``: an Observer-like progress display over
    every task's cases (or None)."""

    def __init__(self, variants: list[Variant], shapes: ShapeSet, opts: runner.RunOptions,
                 store: ResultStore | None = None, display=None):
        self.variants, self.shapes, self.opts, self.store = variants, shapes, opts, store
        self.display = display or runner.Observer()
        self.attempts = [_Attempt(v) for v in variants]
        self._events: queue.Queue = queue.Queue()

    def run(self, client) -> list[RunRecord]:
        """Run every variant on ``client``'s workers; returns their records in the order given. Raises
        KeyboardInterrupt as it came (call ``abandon`` then)."""
        from distributed import as_completed

        client.subscribe_topic(TOPIC, lambda event: self._events.put(event[1]))
        try:
            futures = {client.submit(run_task, Task(i, pack(v), self.shapes, self.opts), resources={RESOURCE: 1},
                                     pure=False, key=f"fp4bench-{v.name}-{uuid.uuid4().hex[:8]}"): i
                       for i, v in enumerate(self.variants)}
            done = as_completed(futures)
            while not done.is_empty():
                self._drain(POLL_S)
                for future in done.next_batch(block=False):
                    self._drain(0)  # every event sent before the result, before the result
                    if future.status == "finished":
                        self._finished(futures[future], run_from_dict(future.result()))
                    else:
                        self._failed(futures[future], future.exception())
        finally:
            client.unsubscribe_topic(TOPIC)
        return [a.final for a in self.attempts]

    def abandon(self) -> list[str]:
        """After an interruption: every run begun and not finished is marked finished and incomplete, keeping
        its cases. Returns their run ids."""
        return [run_id for a in self.attempts if a.recorder and (run_id := a.recorder.abandon())]

    def _drain(self, wait_s: float) -> None:
        try:
            self._event(self._events.get(timeout=wait_s) if wait_s else self._events.get_nowait())
            while True:
                self._event(self._events.get_nowait())
        except queue.Empty:
            pass

    def _event(self, msg: dict) -> None:
        attempt = self.attempts[msg["task"]]
        if attempt.final is not None:
            return  # late news of a task already recorded
        if msg["kind"] == "start":
            self._begin(attempt, run_from_dict(json.loads(msg["record"])))
        elif attempt.record is None or attempt.record.run_id != msg["run_id"]:
            return  # an attempt that has since been replaced
        elif msg["kind"] == "case":
            self._case(attempt, msg["index"], case_result_from_dict(json.loads(msg["result"])))
        elif msg["kind"] == "case_start":
            self.display.on_case_start(msg["index"], self.shapes.cases[msg["index"]])
        elif msg["kind"] == "sample":
            self.display.on_sample(msg["index"], msg["runs"])

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
            self.display.on_case(index, result)

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
