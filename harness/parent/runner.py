"""Run one submission over a shape set in one mode: the trusted parent's side of every measurement.

Data flows one way: case -> seeds -> expected outputs (computed here, never in the worker) -> worker request ->
raw times and outputs back -> judged here -> CaseResult. A fault (exception, crash, timeout, CUDA error) fails
only its own case; the next case gets a fresh worker.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import torch

from harness import protocol as P
from harness.parent import seeds as seedlib
from harness.parent.environment import device_facts, environment
from harness.parent.process import WorkerDied, WorkerProcess, WorkerTimeout, native_window
from harness.parent.registry import ROOT, Variant
from harness.parent.samples import ReferenceError, Sample, SharedSet
from harness.parent.sandbox import Sandbox, plan_for
from harness.parent.settings import MODES, Settings
from harness.results.record import CaseResult, RunRecord, Status, SubmissionInfo, new_run_id
from harness.results.stats import geomean, summarize
from task.arena import Layout
from task.cost import peaks_for, sol_ns
from task.inputs import default_device
from task.spec import Case, ShapeSet


@dataclass(frozen=True)
class RunOptions:
    """What to run: ``mode`` (one of MODES), ``data`` (official | full-range), ``secret`` (None: no secret),
    ``sandbox`` (how workers are confined: harness.parent.sandbox)."""

    mode: str
    data: str = "official"
    secret: int | None = None
    settings: Settings = Settings()
    sandbox: Sandbox = Sandbox()


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
    """A worker with the submission loaded, and the sample buffers it maps; the worker is started on demand and
    restarted after any fault (the buffers stay: a new worker maps them again)."""

    def __init__(self, variant: Variant, settings: Settings, device: torch.device | None = None,
                 sandbox: Sandbox = Sandbox()):
        self.variant, self.settings = variant, settings
        self.device = device or default_device()
        self.sandbox = plan_for(variant, sandbox, settings, self.device.type == "cuda")
        self.proc: WorkerProcess | None = None
        self.first_call = True
        self.stray_bytes = 0
        self.shared = SharedSet(self.device)
        self._mapped = -1

    def load(self) -> None:
        """Start a worker and import the submission. Raises CaseFailed(ERROR) if the import fails."""
        if self.proc is not None:
            return
        self.proc = WorkerProcess(sandbox=self.sandbox)
        self.first_call = True
        self._mapped = -1
        self.proc.send(P.Load(str(self.variant.path)))
        reply = self._receive(self.settings.import_s, (P.Loaded, P.Failed))
        if isinstance(reply, P.Failed):
            self.close()
            where = "import failed" if reply.kind == "import" else "no entry point"
            raise CaseFailed(Status.ERROR, f"{where}: {reply.type}: {reply.message}\n{reply.traceback}".strip())

    def _receive(self, timeout_s: float, expect: tuple):
        try:
            header, _payload = self.proc.receive(timeout_s)
            return P.from_dict(header, expect)
        except WorkerTimeout as exc:
            self.close()
            raise CaseFailed(Status.TIMEOUT, str(exc)) from None
        except WorkerDied as exc:
            self.close()
            raise CaseFailed(Status.CRASH, str(exc)) from None
        except P.ProtocolError as exc:
            self.close()
            raise CaseFailed(Status.ERROR, f"harness error: the worker answered out of protocol: {exc}") from None

    def reserve(self, layouts) -> None:
        """Size the shared buffers for the largest of ``layouts`` up front, so no case has to grow them."""
        if layouts and not self.shared.fits(*layouts):
            self.shared.grow(*layouts)

    def buffers_for(self, layout) -> SharedSet:
        """The shared buffers, grown for ``layout`` if needed, mapped by the current worker (started if needed);
        buffers the worker mapped before a grow are freed once it has mapped the new ones."""
        self.load()
        if not self.shared.fits(layout):
            self.shared.grow(layout)
        if self._mapped != self.shared.generation:
            msg, fds = self.shared.map_request()
            self.proc.send(msg, fds)
            reply = self._receive(self.settings.import_s, (P.Mapped, P.Failed))
            if isinstance(reply, P.Failed):
                self.close()
                raise CaseFailed(Status.ERROR, f"harness error: the worker could not map the sample buffers: "
                                               f"{reply.type}: {reply.message}")
            self._mapped = self.shared.generation
            self.shared.free_retired()
        return self.shared

    def run(self, req: P.Run) -> P.RunReply:
        """One run request on inputs already in the buffers. The first request after a (re)start gets the
        first-call time limit (compiles happen there). Raises CaseFailed for the submission's faults."""
        timeout = self.settings.first_call_s if self.first_call else self.settings.call_s
        self.first_call = False
        self.proc.send(req)
        reply = self._receive(timeout, (P.RunReply, P.Failed))
        if isinstance(reply, P.Failed):
            kind = "CUDA error" if reply.kind == "cuda" else "raised"
            if reply.kind == "cuda":
                self.close()
            raise CaseFailed(Status.ERROR, f"{kind}: {reply.type}: {reply.message}\n{reply.traceback}".strip())
        return reply

    def close(self) -> None:
        if self.proc is not None:
            self.stray_bytes += self.proc.stray_bytes
            self.proc.close()
            self.proc = None
            self._mapped = -1
        self.shared.free_retired()

    def release(self) -> None:
        """Close the worker and free the shared buffers."""
        self.close()
        self.shared.close()


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


#: The guard's word for a hook it refused to install (sys.addaudithook): it never ran, so it is only noted.
REFUSED = " refused"


def outside_window(reply: P.RunReply) -> str | None:
    """The verdict on what the worker saw around the window, or None: threads that used CPU outside it, hooks
    and modes that run submission code inside ours, work left on other streams, outputs changed after it."""
    if reply.threads:
        shown = [f"thread '{t.name}' (tid {t.tid}) used {_ms(t.cpu_ns)}" if t.tid
                 else f"threads that have since exited used {_ms(t.cpu_ns)}" for t in reply.threads[:3]]
        more = f" and {len(reply.threads) - 3} more thread(s) did too" if len(reply.threads) > 3 else ""
        return (f"work outside the timed window: {'; '.join(shown)}{more} of CPU between samples or around the "
                f"window; a submission's threads must be idle outside its custom_kernel calls")
    active = [h for h in reply.hooks if not h.endswith(REFUSED)] + list(reply.modes)
    if active:
        return ("the submission left code that runs outside its calls: " + ", ".join(active)
                + "; fp4bench removed it, and the case fails because it could act outside the timed window")
    if reply.late_streams:
        return (f"{reply.late_streams} other CUDA stream(s) still had work queued when the timed window closed; "
                f"the call must be complete when its end event fires (join side streams to the current one)")
    if reply.changed:
        return (f"call {reply.changed[0]}: outputs changed after the timed window closed (work on another stream "
                f"or finished after the end event); the call must be complete when its end event fires")
    return None


class CaseRunner:
    """Runs the phases of one case: correctness call, warm-up, timed samples with every output checked."""

    def __init__(self, session: Session, opts: RunOptions, observer: Observer, device: torch.device):
        self.session, self.opts, self.observer, self.device = session, opts, observer, device
        facts = device_facts()
        self.peaks = peaks_for(facts.name) if facts.cuda else None
        self.notes: list[str] = []
        self._samples: dict[tuple, Sample] = {}
        self._checked: dict[Case, int] = {}

    def checked(self, case: Case) -> int:
        """How many of ``case``'s outputs passed the check so far (every call of every request)."""
        return self._checked.get(case, 0)

    def _sample(self, case: Case, calls: int) -> Sample:
        key = (case.m, case.n, case.k, calls)
        if key not in self._samples:
            if len(self._samples) >= 2:  # keep the device memory of two shapes at most
                self._samples.pop(next(iter(self._samples)))
            self._samples[key] = Sample(case, calls, self.opts.data, self.device, self.session.shared)
        return self._samples[key]

    def _call(self, case: Case, seeds: list[int], kind: str, official_order: bool = False,
              watch: bool = True) -> P.RunReply:
        sample = self._sample(case, len(seeds))
        self.session.buffers_for(sample.layout)
        try:
            sample.prepare(seeds, official_order)
        except ReferenceError as exc:
            raise CaseFailed(Status.ERROR, f"harness error: {exc}") from None
        reply = self.session.run(P.Run(case.m, case.n, case.k, len(seeds), kind, watch=watch))
        if reply.tampered:
            raise CaseFailed(Status.FAIL, "the submission modified fp4bench's measurement code or objects: "
                                          + ", ".join(reply.tampered))
        complaint = outside_window(reply)
        if complaint:
            raise CaseFailed(Status.FAIL, complaint)
        try:
            mismatch = sample.judge(reply)
        except ReferenceError as exc:
            raise CaseFailed(Status.ERROR, f"harness error: {exc}") from None
        if mismatch:
            raise CaseFailed(Status.FAIL, mismatch)
        self._checked[case] = self.checked(case) + len(seeds)
        notes = [f"the submission replaced {name}; fp4bench measures with its own captured copy" for name in reply.guard]
        notes += [f"{h} (it never ran)" for h in reply.hooks if h.endswith(REFUSED)]
        self.notes += [n for n in notes if n not in self.notes]
        return reply

    def correctness(self, case: Case, seed: int) -> None:
        self._call(case, [seed], "check", official_order=True, watch=False)  # compiles run here, on threads too

    def warmup(self, case: Case, seed: int) -> int:
        """Warm-up samples (timed like the others, outputs checked, times not kept): at least ``warmup_samples``
        (and two, to see a trend), then more until two in a row differ by at most ``warmup_settle`` (relative) or
        ``warmup_max`` have run. Returns how many ran.
        Raises CaseFailed as ``sample`` does."""
        st = self.opts.settings
        times: list[float] = []
        while True:
            seeds = seedlib.sample_seeds(seed, len(times), st.calls_per_sample, warmup=True)
            times.append(self._call(case, seeds, "time").elapsed_ns)
            if len(times) >= st.warmup_max:
                break
            if len(times) >= max(st.warmup_samples, 2) and abs(times[-1] - times[-2]) <= st.warmup_settle * times[-1]:
                break
        return len(times)

    def sample(self, index: int, case: Case, seed: int, i: int) -> float:
        """Timed sample ``i`` (0-based) of case number ``index`` (case seed ``seed``): ``calls_per_sample`` calls on
        fresh inputs drawn for ``seeds.sample_seeds(seed, i, calls_per_sample)``, every output checked against
        the reference. Reports ``on_sample(index, i + 1)`` to the observer.

        Returns the per-call time in ns (the sample's duration / its calls). Raises CaseFailed: FAIL for a wrong
        output, work outside the window, tampering, or a time below this GPU's physical floor (task.cost, CUDA
        only); ERROR, CRASH or TIMEOUT for the submission's faults."""
        seeds = seedlib.sample_seeds(seed, i, self.opts.settings.calls_per_sample)
        reply = self._call(case, seeds, "time")
        per_call = reply.elapsed_ns / reply.calls
        floor = sol_ns(case, self.peaks, floor=True) if self.peaks else None
        if floor is not None and per_call < floor:
            raise CaseFailed(Status.FAIL, f"impossible time: {per_call:.0f} ns per call is below this GPU's "
                                          f"physical floor of {floor:.0f} ns ({self.peaks.model}: FLOPs at "
                                          f"{self.peaks.floor_tflops:g} TFLOP/s, bytes at {self.peaks.hbm_tbps:g} TB/s)")
        self.observer.on_sample(index, i + 1)
        return per_call

    def timed(self, index: int, case: Case, seed: int, samples: list[float]) -> float:
        """Timed samples (``sample``) until the stopping rule says stop, each appended to ``samples`` (per-call
        ns) as it is measured, so a later sample's failure keeps the earlier ones. Returns the wall time of the
        loop in s. Raises CaseFailed as ``sample`` does."""
        rule = self.opts.settings.stopping_rule(self.opts.mode)
        t0 = time.monotonic_ns()
        while True:
            samples.append(self.sample(index, case, seed, len(samples)))
            if rule.is_finished(samples, time.monotonic_ns() - t0):
                return (time.monotonic_ns() - t0) / 1e9

    def kernel_time(self, case: Case, seed: int, after: int) -> float | None:
        """Kernels' device time per call (ns, CUPTI through torch.profiler) on fresh inputs (the seeds of timed
        sample ``after``, never timed), every output checked; None without CUDA."""
        if self.device.type != "cuda":
            return None
        reply = self._call(case, seedlib.sample_seeds(seed, after, self.opts.settings.calls_per_sample), "kernels",
                           watch=False)
        return reply.kernel_ns

    def profile(self, case: Case, seed: int) -> str:
        reply = self._call(case, seedlib.sample_seeds(seed, 0, 1), "profile", watch=False)
        return reply.profile


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
    Raises ValueError for an unknown mode or data mode, SandboxError when ``opts.sandbox`` is strict and a
    protection is missing here.
    """
    if opts.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {opts.mode!r}")
    observer = observer or Observer()
    started = time.monotonic()
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
        return close_record(record, results, observer, started=started)

    session = Session(variant, opts.settings, device, opts.sandbox)
    runner = CaseRunner(session, opts, observer, device)
    try:
        session.reserve(sample_layouts(shapes.cases, opts))
        _run_cases(shapes.cases, opts, session, runner, observer, finish)
    finally:
        session.release()
    return close_record(record, results, observer, session, runner, started)


def window_held() -> str:
    """Where the workers will hold the timed window's marks: "native" (C), or "python: <why not C>"."""
    why = native_window()
    return "native" if not why else f"python: {why}"


def new_record(variant: Variant, shapes: ShapeSet, opts: RunOptions) -> RunRecord:
    """A fresh RunRecord for ``variant`` on ``shapes`` in ``opts.mode``: no cases yet, not complete; a new run id,
    the start time (UTC), this machine's environment, the repository's commit and the sandbox's summary.
    Raises SandboxError when ``opts.sandbox`` is strict and a protection is missing here."""
    plan = plan_for(variant, opts.sandbox, opts.settings, default_device().type == "cuda")
    return RunRecord(
        run_id=new_run_id(), started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        mode=opts.mode, data=opts.data, shape_set=shapes.name, secret_seed=opts.secret,
        submission=SubmissionInfo(variant.name, str(variant.path), variant.sha256, dict(variant.popcorn)),
        environment=environment(), cases=(), complete=False, git_commit=git_commit(), shape_set_id=shapes.id,
        sandbox=plan.summary, window=window_held())


def close_record(record: RunRecord, results: list[CaseResult], observer: Observer,
                 session: Session | None = None, runner: CaseRunner | None = None,
                 started: float | None = None) -> RunRecord:
    """The finished record: ``results`` as its cases (with the ``runner``'s notes and the ``session``'s stray
    channel bytes appended to every case's message), complete, and the geomean (ns) of per-case means when
    every case passed with timings; ``started``: time.monotonic() at the start, for the run's wall time. Tells the
    observer ``on_finish``."""
    notes = list(runner.notes) if runner is not None else []
    if session is not None and session.stray_bytes:
        notes.append(f"ignored {session.stray_bytes} stray bytes the submission wrote to the result channel")
    if notes:
        results = [_with_note(r, notes) for r in results]
    wall = time.monotonic() - started if started is not None else 0.0
    return _close(record, results, observer, wall)


def _with_note(result: CaseResult, notes: list[str]) -> CaseResult:
    text = "; ".join(notes)
    return replace(result, message=f"{result.message}; {text}" if result.message else f"note: {text}")


def _run_cases(cases, opts, session, runner, observer, finish) -> None:
    try:
        session.load()
    except CaseFailed as exc:  # import error or no entry point: fail before generating any data
        for i, case in enumerate(cases):  # the error (a traceback) once, on the first shape
            finish(CaseResult(case, exc.status, exc.message if i == 0 else
                              f"not run: the submission could not be loaded ({exc.message.splitlines()[0]}; "
                              f"the whole message is on shape 1)"))
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
        profile_table = ""
        try:
            if i not in warmed:
                runner.correctness(case, seeds[i])
            kernel_ns = overhead_ms = None
            if opts.mode in ("benchmark", "leaderboard"):
                if i not in warmed:
                    runner.warmup(case, seeds[i])
                timed_s = runner.timed(i, case, seeds[i], samples)
                overhead_ms = overhead_per_sample_ms(timed_s, samples, opts.settings.calls_per_sample)
                kernel_ns = runner.kernel_time(case, seeds[i], len(samples))
            elif opts.mode == "profile":
                profile_table = runner.profile(case, seeds[i])
            result = CaseResult(case, Status.PASS, "", tuple(samples), summarize(samples) if samples else None,
                                runner.checked(case), time.monotonic() - t0, profile_table, kernel_ns, overhead_ms)
        except CaseFailed as exc:  # samples measured before the failure are kept (they passed every check)
            result = CaseResult(case, exc.status, exc.message, tuple(samples),
                                summarize(samples) if samples else None, runner.checked(case), time.monotonic() - t0)
            if opts.mode == "leaderboard":
                stop_reason = f"not run: an earlier shape did not pass ({exc.status.value})"
        finish(result)


def sample_layouts(cases, opts: RunOptions) -> list[Layout]:
    """The buffer layouts a run of ``cases`` in ``opts.mode`` uses (one call per correctness check, and
    ``calls_per_sample`` per warm-up or timed sample)."""
    calls = 1 if opts.mode in ("test", "profile") else opts.settings.calls_per_sample
    return [Layout.of(c, calls) for c in cases]


def overhead_per_sample_ms(wall_s: float, samples_ns: list[float], calls: int) -> float | None:
    """The timed phase's wall time outside the timed windows, per sample, in ms (``samples_ns``: per-call
    times, so a window is ``calls`` times one)."""
    if not samples_ns:
        return None
    return (wall_s * 1e9 - sum(samples_ns) * calls) / len(samples_ns) / 1e6


def _close(record: RunRecord, results: list[CaseResult], observer: Observer, wall_s: float = 0.0) -> RunRecord:
    means = [r.stats.mean_ns for r in results if r.passed and r.stats]
    timed_all = means and len(means) == len(results)
    final = replace(record, cases=tuple(results), complete=True, geomean_ns=geomean(means) if timed_all else None,
                    wall_s=round(wall_s, 3))
    observer.on_finish(final)
    return final
