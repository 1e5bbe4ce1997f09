"""Run one submission over a shape set in one mode: the trusted parent's side of every measurement.

Data flows one way: case -> seeds -> expected outputs (computed here, never in the worker) -> worker request ->
raw times and outputs back -> judged here -> CaseResult. A fault (exception, crash, timeout, CUDA error) fails
only its own case; the next case gets a fresh worker.
"""
from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import torch

from harness import seeds as seedlib
from harness.environment import device_facts, environment
from harness.popcorn import MODES
from harness.process import WorkerDied, WorkerProcess, WorkerTimeout
from harness.record import CaseResult, RunRecord, Status, SubmissionInfo
from harness.registry import ROOT, Variant
from harness.settings import Settings
from harness.stats import geomean, summarize
from task.check import OutputMeta, ReferenceError, check_outputs, validate_container
from task.cost import peaks_for, sol_ns
from task.inputs import default_device, generate_many
from task.reference import ref_kernel
from task.spec import Case, ShapeSet


@dataclass(frozen=True)
class RunOptions:
    """What to run: ``mode`` (one of MODES), ``data`` (official | full-range), ``secret`` (None: no secret)."""

    mode: str
    data: str = "official"
    secret: int | None = None
    settings: Settings = Settings()


class Observer:
    """Hooks for progress display and the results store; every method is optional to override."""

    def on_start(self, record: RunRecord) -> None: ...
    def on_case_start(self, index: int, case: Case) -> None: ...
    def on_sample(self, index: int, runs: int) -> None: ...
    def on_case(self, index: int, result: CaseResult) -> None: ...
    def on_finish(self, record: RunRecord) -> None: ...


class CaseFailed(Exception):
    """Ends a case early with a status and a message (raised inside the case loop only)."""

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Session:
    """A worker with the submission loaded; started on demand, restarted after any fault."""

    def __init__(self, variant: Variant, settings: Settings):
        self.variant, self.settings = variant, settings
        self.proc: WorkerProcess | None = None
        self.first_call = True
        self.stray_bytes = 0

    def load(self) -> None:
        """Start a worker and import the submission. Raises CaseFailed(ERROR) if the import fails."""
        if self.proc is not None:
            return
        self.proc = WorkerProcess()
        self.first_call = True
        reply, _ = self._ask({"op": "load", "path": str(self.variant.path)}, self.settings.import_s)
        if not reply["ok"]:
            self.close()
            where = "import failed" if reply["kind"] == "import" else "no entry point"
            raise CaseFailed(Status.ERROR, f"{where}: {reply['type']}: {reply['message']}\n{reply['traceback']}".strip())

    def _ask(self, req: dict | None, timeout_s: float) -> tuple[dict, bytes]:
        try:
            if req is not None:
                self.proc.send(req)
            return self.proc.receive(timeout_s)
        except WorkerTimeout as exc:
            self.close()
            raise CaseFailed(Status.TIMEOUT, str(exc)) from None
        except WorkerDied as exc:
            self.close()
            raise CaseFailed(Status.CRASH, str(exc)) from None

    def run(self, req: dict, prepare=lambda: None):
        """One run request; returns (reply, payload, what ``prepare()`` returned).

        The worker draws its inputs, says it is ready and waits; meanwhile the parent runs ``prepare`` (the
        expected outputs) and finishes its own GPU work, then says go, so nothing of ours overlaps the timed
        window. The first request after a (re)start gets the first-call time limit (compiles happen there).
        """
        self.load()
        timeout = self.settings.first_call_s if self.first_call else self.settings.call_s
        self.first_call = False
        self.proc.send(dict(req, op="run"))
        prepared = prepare()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        reply, payload = self._ask(None, timeout)
        if reply.get("ready"):
            reply, payload = self._ask({"op": "go"}, timeout)
        if not reply["ok"]:
            kind = "CUDA error" if reply["kind"] == "cuda" else "raised"
            if reply["kind"] == "cuda":
                self.close()
            raise CaseFailed(Status.ERROR, f"{kind}: {reply['type']}: {reply['message']}\n{reply['traceback']}".strip())
        return reply, payload, prepared

    def close(self) -> None:
        if self.proc is not None:
            self.stray_bytes += self.proc.stray_bytes
            self.proc.close()
            self.proc = None


def expected_outputs(case: Case, seeds: list[int], data: str, device: torch.device) -> list[list[torch.Tensor]]:
    """The reference outputs for the inputs drawn from ``seeds``; inputs are dropped, only outputs kept."""
    return [ref_kernel(x) for x in generate_many(case.m, case.n, case.k, case.g, seeds, data, device)]


def judge(case: Case, reply: dict, payload: bytes, expected: list[list[torch.Tensor]], device: torch.device) -> None:
    """Check every call's outputs (container, type, dtype, shape, device, values). Raises CaseFailed(FAIL)."""
    if reply.get("complaint"):  # work outside the window explains any wrong value, so it is named first
        raise CaseFailed(Status.FAIL, reply["complaint"])
    offsets = iter(reply["offsets"])
    calls = len(reply["containers"])
    for i, (container, metas) in enumerate(zip(reply["containers"], reply["metas"])):
        prefix = f"call {i + 1} of {calls}: " if calls > 1 else ""
        problem = validate_container(container, [OutputMeta(**{**m, "shape": tuple(m["shape"])}) for m in metas],
                                     case.problem_sizes, str(device))
        got = []
        for meta, (m, n, _k, _l) in zip(metas, case.problem_sizes):
            where = next(offsets)
            if where is not None and problem is None:
                start, length = where
                got.append(torch.frombuffer(payload, dtype=torch.float16, count=length // 2, offset=start)
                           .view(m, n, 1).to(device))
        if problem:
            raise CaseFailed(Status.FAIL, prefix + problem)
        try:
            mismatch = check_outputs(got, expected[i])
        except ReferenceError as exc:
            raise CaseFailed(Status.ERROR, f"harness error: {exc}") from None
        if mismatch:
            raise CaseFailed(Status.FAIL, prefix + mismatch)


class CaseRunner:
    """Runs the phases of one case: correctness call, warm-up, timed samples with every output checked."""

    def __init__(self, session: Session, opts: RunOptions, observer: Observer, device: torch.device):
        self.session, self.opts, self.observer, self.device = session, opts, observer, device
        facts = device_facts()
        self.peaks = peaks_for(facts.name) if facts.cuda else None
        self.notes: list[str] = []

    def _call(self, case: Case, seeds: list[int], check: bool = True, profile: bool = False) -> dict:
        prepare = (lambda: expected_outputs(case, seeds, self.opts.data, self.device)) if check else (lambda: None)
        reply, payload, expected = self.session.run(
            {"case": _case_dict(case), "seeds": seeds, "data": self.opts.data, "profile": profile}, prepare)
        if reply.get("tampered"):
            raise CaseFailed(Status.FAIL, "the submission modified fp4bench's measurement code or objects: "
                                          + ", ".join(reply["tampered"]))
        if check:
            judge(case, reply, payload, expected, self.device)
        for name in reply.get("guard", []):
            note = f"the submission replaced {name}; fp4bench measures with its own captured copy"
            if note not in self.notes:
                self.notes.append(note)
        return reply

    def correctness(self, case: Case, seed: int) -> None:
        self._call(case, [seed])

    def warmup(self, case: Case, seed: int) -> None:
        calls = self.opts.settings.calls_per_sample
        for w in range(self.opts.settings.warmup_samples):
            self._call(case, seedlib.sample_seeds(seed, w, calls, warmup=True), check=False)

    def sample(self, index: int, case: Case, seed: int, i: int) -> float:
        """Timed sample ``i`` (0-based) of case number ``index`` (case seed ``seed``): ``calls_per_sample`` calls on
        fresh inputs drawn from ``seeds.sample_seeds(seed, i, calls_per_sample)``, every output checked against
        the reference. Reports ``on_sample(index, i + 1)`` to the observer.

        Returns the per-call time in ns (the sample's duration / its calls). Raises CaseFailed: FAIL for a wrong
        output, tampering, or a time below this GPU's physical floor (task.cost, CUDA only); ERROR, CRASH or
        TIMEOUT for the submission's faults."""
        seeds = seedlib.sample_seeds(seed, i, self.opts.settings.calls_per_sample)
        reply = self._call(case, seeds)
        per_call = reply["elapsed_ns"] / reply["calls"]
        floor = sol_ns(case, self.peaks, floor=True) if self.peaks else None
        if floor is not None and per_call < floor:
            raise CaseFailed(Status.FAIL, f"impossible time: {per_call:.0f} ns per call is below this GPU's "
                                          f"physical floor of {floor:.0f} ns ({self.peaks.model}: FLOPs at "
                                          f"{self.peaks.floor_tflops:g} TFLOP/s, bytes at {self.peaks.hbm_tbps:g} TB/s)")
        self.observer.on_sample(index, i + 1)
        return per_call

    def timed(self, index: int, case: Case, seed: int, samples: list[float]) -> None:
        """Timed samples (``sample``) until the stopping rule says stop, each appended to ``samples`` (per-call
        ns) as it is measured, so a later sample's failure keeps the earlier ones. Raises CaseFailed as
        ``sample`` does."""
        rule = self.opts.settings.stopping_rule(self.opts.mode)
        t0 = time.monotonic_ns()
        while True:
            samples.append(self.sample(index, case, seed, len(samples)))
            if rule.is_finished(samples, time.monotonic_ns() - t0):
                return

    def profile(self, case: Case, seed: int) -> str:
        reply = self._call(case, seedlib.sample_seeds(seed, 0, 1), profile=True)
        return reply.get("profile", "")


def _case_dict(case: Case) -> dict:
    return {"m": list(case.m), "n": list(case.n), "k": list(case.k), "g": case.g, "seed": case.seed}


def git_commit(root=ROOT) -> str:
    """HEAD of the repo at ``root``, with ``-dirty`` appended when tracked files differ from it (the code that
    ran is then not that commit; the record's submission sha256 still names the submission exactly); "" when
    there is no git or no repo."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return ""
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=30)
        dirty = status.returncode != 0 or bool(status.stdout.strip())
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def run(variant: Variant, shapes: ShapeSet, opts: RunOptions, observer: Observer | None = None) -> RunRecord:
    """Run ``variant`` on every case of ``shapes`` in ``opts.mode``; returns the whole RunRecord.

    Never raises for a submission's fault: each case ends as pass/fail/error/crash/timeout/skipped.
    Raises ValueError for an unknown mode or data mode.
    """
    if opts.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {opts.mode!r}")
    observer = observer or Observer()
    device = default_device()
    # The parent's CPU work (drawing inputs on a thread pool, checks) must not leave spinning thread teams that
    # compete with the worker while it is being timed: one intra-op thread per pool thread.
    torch.set_num_threads(1)
    record = new_record(variant, shapes, opts)
    observer.on_start(record)
    results: list[CaseResult] = []

    def finish(result: CaseResult) -> None:
        observer.on_case(len(results), result)
        results.append(result)

    reason = variant.requires.unmet_reason(device_facts())
    if reason:
        for case in shapes.cases:
            finish(CaseResult(case, Status.SKIPPED, reason))
        return close_record(record, results, observer)

    session = Session(variant, opts.settings)
    runner = CaseRunner(session, opts, observer, device)
    try:
        _run_cases(shapes.cases, opts, session, runner, observer, finish)
    finally:
        session.close()
    return close_record(record, results, observer, session, runner)


def new_record(variant: Variant, shapes: ShapeSet, opts: RunOptions) -> RunRecord:
    """A fresh RunRecord for ``variant`` on ``shapes`` in ``opts.mode``: no cases yet, not complete; a new run id,
    the start time (UTC), this machine's environment and the repository's commit."""
    return RunRecord(
        run_id=uuid.uuid4().hex[:12], started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        mode=opts.mode, data=opts.data, shape_set=shapes.name, secret_seed=opts.secret,
        submission=SubmissionInfo(variant.name, str(variant.path), variant.sha256, dict(variant.popcorn)),
        environment=environment(), cases=(), complete=False, git_commit=git_commit(), shape_set_id=shapes.id)


def close_record(record: RunRecord, results: list[CaseResult], observer: Observer,
                 session: Session | None = None, runner: CaseRunner | None = None) -> RunRecord:
    """The finished record: ``results`` as its cases (with the ``runner``'s notes and the ``session``'s stray
    channel bytes appended to every case's message), complete, and the geomean (ns) of per-case means when
    every case passed with timings. Tells the observer ``on_finish``."""
    notes = list(runner.notes) if runner is not None else []
    if session is not None and session.stray_bytes:
        notes.append(f"ignored {session.stray_bytes} stray bytes the submission wrote to the result channel")
    if notes:
        results = [_with_note(r, notes) for r in results]
    return _close(record, results, observer)


def _with_note(result: CaseResult, notes: list[str]) -> CaseResult:
    text = "; ".join(notes)
    return replace(result, message=f"{result.message}; {text}" if result.message else f"note: {text}")


def _run_cases(cases, opts, session, runner, observer, finish) -> None:
    try:
        session.load()
    except CaseFailed as exc:  # import error or no entry point: fail before generating any data
        for case in cases:
            finish(CaseResult(case, exc.status, exc.message))
        return
    seeds = [seedlib.case_seed(c.seed, opts.secret) for c in cases]
    warmed: set[int] = set()
    if opts.mode == "leaderboard":  # official: warm up every shape first, then time
        for i, case in enumerate(cases):
            try:
                runner.correctness(case, seeds[i])
                runner.warmup(case, seeds[i])
                warmed.add(i)
            except CaseFailed:
                break  # the timed phase below reports this case's failure
    stop_reason = ""
    for i, case in enumerate(cases):
        if stop_reason:
            finish(CaseResult(case, Status.SKIPPED, stop_reason))
            continue
        observer.on_case_start(i, case)
        t0 = time.monotonic()
        samples: list[float] = []
        checked = 0
        profile_table = ""
        try:
            if i not in warmed:
                runner.correctness(case, seeds[i])
            checked += 1
            if opts.mode in ("benchmark", "leaderboard"):
                if i not in warmed:
                    runner.warmup(case, seeds[i])
                runner.timed(i, case, seeds[i], samples)
            elif opts.mode == "profile":
                profile_table = runner.profile(case, seeds[i])
            checked += len(samples) * opts.settings.calls_per_sample
            result = CaseResult(case, Status.PASS, "", tuple(samples), summarize(samples) if samples else None,
                                checked, time.monotonic() - t0, profile_table)
        except CaseFailed as exc:  # samples measured before the failure are kept (they passed every check)
            checked += len(samples) * opts.settings.calls_per_sample
            result = CaseResult(case, exc.status, exc.message, tuple(samples),
                                summarize(samples) if samples else None, checked, time.monotonic() - t0)
            if opts.mode == "leaderboard":
                stop_reason = f"not run: an earlier shape did not pass ({exc.status.value})"
        finish(result)


def _close(record: RunRecord, results: list[CaseResult], observer: Observer) -> RunRecord:
    means = [r.stats.mean_ns for r in results if r.passed and r.stats]
    timed_all = means and len(means) == len(results)
    final = replace(record, cases=tuple(results), complete=True, geomean_ns=geomean(means) if timed_all else None)
    observer.on_finish(final)
    return final
