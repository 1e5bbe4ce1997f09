"""One case's lifecycle, shared by every schedule (runner.run: one variant; compare: two interleaved).

A ``Session`` is a worker with the submission loaded and the sample buffers it maps. A ``CaseRunner`` runs the
phases of a case on a session: correctness call, warm-up, timed samples, the kernel-time pass, the profile; every
reply is judged by harness.parent.judge. A ``CaseAttempt`` is one case from its first phase to its CaseResult:
the first failure ends it, and samples measured before it stay (they passed every check). Schedules decide only
the order of phases across cases and variants.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from harness import protocol as P
from harness.parent import judge, memory, procs, watch
from harness.parent import seeds as seedlib
from harness.parent.bracket import CALIBRATION_WINDOWS, Bracket, Measured
from harness.parent.environment import device_facts
from harness.parent.judge import CaseFailed, Verdict
from harness.parent.process import EXIT_WAIT_S, WorkerDied, WorkerProcess, WorkerTimeout
from harness.parent.registry import Variant
from harness.parent.samples import Sample, SharedSet
from harness.parent.sandbox import Sandbox, plan_for
from harness.parent.settings import Settings
from harness.results.record import CaseResult, RunRecord, Status
from harness.results.stats import summarize
import problems
from harness.hardware import peaks_for
from harness.parent.plain import PlainSample
from harness.shapes import DEFAULT_PROBLEM
from harness.hardware import default_device
from harness.problem import Case


@dataclass(frozen=True)
class RunOptions:
    """What to run: ``mode`` (one of MODES), ``data`` (official | full-range), ``secret`` (None: no secret),
    ``sandbox`` (how workers are confined: harness.parent.sandbox), ``worker_log`` (a file the parent appends each
    worker's stdout and stderr to when it ends: the submission's prints; None: kept only for crash messages)."""

    mode: str
    data: str = "official"
    secret: int | None = None
    settings: Settings = Settings()
    sandbox: Sandbox = Sandbox()
    worker_log: Path | None = None


class Observer:
    """Hooks for progress display and the results store; every method is optional to override."""

    def on_start(self, record: RunRecord) -> None: ...
    def on_phase(self, index: int | None, phase: str) -> None: ...  # of shape ``index``, or the run's (None)
    def on_case_start(self, index: int, case: Case) -> None: ...
    def on_sample(self, index: int, runs: int) -> None: ...
    def on_case(self, index: int, result: CaseResult) -> None: ...
    def on_finish(self, record: RunRecord) -> None: ...


class Session:
    """A worker with the submission loaded, and the sample buffers it maps; the worker is started on demand and
    restarted after any fault (the buffers stay: a new worker maps them again)."""

    def __init__(self, variant: Variant, settings: Settings, device: torch.device | None = None,
                 sandbox: Sandbox = Sandbox(), worker_log: Path | None = None, profiler: bool = False,
                 problem: str = DEFAULT_PROBLEM):
        self.variant, self.settings, self.worker_log = variant, settings, worker_log
        self.device = device or default_device()
        self.profiler = profiler and self.device.type == "cuda"  # kernel-time passes will run (P.Load.profiler)
        self._loading: float | None = None  # when Load was sent, until its reply is in
        self.sandbox = plan_for(variant, sandbox, settings, self.device.type == "cuda")
        self.proc: WorkerProcess | None = None
        self.first_call = True
        self.stray_bytes = 0
        self.shared = SharedSet(self.device)
        clear, self.clear_note = (memory.l2_clear_bytes(problem, memory.device_total_bytes())
                                  if self.device.type == "cuda" else (None, ""))
        self.bracket = Bracket(self.device, clear)  # the L2 clear of ``problem``'s official loop
        self.trusted: frozenset = frozenset()   # (pid, tid) of the worker's tasks before the import (watch)
        self._since: watch.Snapshot | None = None  # the worker tree at the last timed window's close
        self._mapped = -1

    def start(self) -> None:
        """Start a worker and send its first calibration window, without waiting (``load`` waits); no-op while
        one is up."""
        if self.proc is not None:
            return
        self.proc = WorkerProcess(sandbox=self.sandbox, log=self.worker_log, label=self.variant.name)
        procs.LEDGER.enter(self, self.proc.tree.start_ticks)
        self.first_call = True
        self._mapped, self._since = -1, None
        self._gaps: list[float] = []
        self.proc.send(P.Calibrate(0, self.bracket.flags_ref(), self.profiler))  # no bracket: nothing waits on it
        self._loading = time.monotonic()

    def _calibrate(self, profiler: bool = False, idle: bool = False) -> None:
        """Send one empty window through the bracket (bracket.open + P.Calibrate; ``idle``: its end queued on an
        idle GPU); ``_calibrated`` reads it."""
        seq = self.bracket.open()
        self.proc.send(P.Calibrate(seq, self.bracket.flags_ref(), profiler, idle))

    def _calibrated(self, timeout_s: float) -> None:
        """The calibration window's answer: its gap (bracket - window) joins ``_gaps``."""
        try:
            closed = self._receive(timeout_s, (P.Closed,))
        except CaseFailed:
            self.bracket.settle()  # the worker is gone: end the parent's waits now
            raise
        self.bracket.closed()
        self._gaps.append(self.bracket.measured().bracket_ns - closed.elapsed_ns)

    def load(self) -> None:
        """Start a worker (``start``), measure the bracket's honest gap on empty windows, take the worker's trusted
        tasks, then import the submission and wait for it. ``import_s`` bounds the worker's start-up (counted from
        its first request) and, afresh, the import (from the Load request): neither is the submission's call, so
        --timeout (the calls' limits) leaves both alone. Raises CaseFailed(ERROR) if the import fails (TIMEOUT,
        CRASH as ``_receive``)."""
        self.start()
        if self._loading is None:
            return
        limit = self.settings.import_s
        started = f"the worker (Python, torch, CUDA; no submission code yet) did not start in import_s = {limit:g} s"
        with judge.timeout_named(started):
            self._receive(max(limit - (time.monotonic() - self._loading), 0.001), (P.Closed,))
            for i in range(CALIBRATION_WINDOWS):  # both kinds of end: queued ahead of the GPU, and on an idle GPU
                self._calibrate(idle=i % 2 == 1)
                self._calibrated(limit)  # empty windows: only a stalled machine makes them slow
        self.bracket.calibrate(self._gaps)
        self.trusted = frozenset(watch.snapshot(self.proc.proc.pid).tasks)
        self.proc.send(P.Load(str(self.variant.path)))
        self._loading = None
        with judge.timeout_named(f"importing the submission took over import_s = {limit:g} s"):
            reply = self._receive(limit, (P.Loaded, P.Failed))
        if isinstance(reply, P.Failed):
            self.close()
            raise judge.load_failed(reply, str(self.variant.path))

    def _receive(self, timeout_s: float, expect: tuple):
        try:
            header, _payload = self.proc.receive(timeout_s)
            if header.get("msg") == "Oversized":
                self.close()
                raise CaseFailed(Status.FAIL, f"the worker's reply was {header.get('bytes')} bytes, over the "
                                              f"channel's limit; it was cut (a submission's message that large "
                                              f"cannot be shown)")
            return P.from_dict(header, expect)
        except WorkerTimeout as exc:
            self.close()
            raise CaseFailed(Status.TIMEOUT, str(exc)) from None
        except WorkerDied as exc:
            self.close()
            raise CaseFailed(Status.CRASH, str(exc), cuda=exc.code == P.ExitCode.CUDA_FAILURE) from None
        except P.ProtocolError as exc:
            self.close()
            raise judge.protocol_broken(exc) from None

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
                raise judge.map_failed(reply)
            try:
                self.shared.attach_device(reply.device)
            except (ValueError, RuntimeError) as exc:
                self.close()
                raise CaseFailed(Status.ERROR, f"harness error: the worker's device buffer: {exc}") from None
            self._mapped = self.shared.generation
            self.shared.free_retired()
        return self.shared

    def run(self, req: P.Run, sample: Sample, on_closed=None) -> tuple[P.RunReply, Measured | None, str | None]:
        """One run request on ``sample``'s inputs, already in the buffers but for its canaries. A timed request
        (kind ``time``) runs inside the parent's bracket (harness.parent.bracket): the canaries are fixed and the
        outputs copied into the parent's snapshot there; other kinds get the canaries fixed first and the outputs
        copied after the reply. The first request after a (re)start gets the first-call time limit (compiles
        happen there). Once a timed window has closed, ``on_closed()`` runs (its time does not count against the
        call's limit, and what it raises is raised after the reply).

        Returns (the worker's reply, the bracket's measurement or None, the watch's verdict on CPU used outside
        the window since the last timed window or None). Raises CaseFailed for the submission's faults."""
        timeout = self.settings.first_call_s if self.first_call else self.settings.call_s
        self.first_call = False
        timed = req.kind == "time"
        pid = self.proc.proc.pid
        outside = None
        if timed:
            now = watch.snapshot(pid)
            if req.watch and self._since is not None:
                outside = watch.verdict(watch.foreign(self._since, now, self.trusted))
            req = replace(req, seq=self.bracket.open(sample.fix, sample.take_snapshot))
        else:
            before = watch.snapshot(pid)
            sample.fix()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        self._since = None
        self.proc.send(req)
        expect = (P.RunReply, P.Failed, P.Closed) if timed else (P.RunReply, P.Failed)
        started, raised, measured = time.monotonic(), None, None
        try:
            while True:
                reply = self._receive(max(timeout - (time.monotonic() - started), 0.001), expect)
                if not isinstance(reply, P.Closed):
                    break
                expect = (P.RunReply, P.Failed)  # one Closed per request
                paused = time.monotonic()
                self.bracket.closed()
                measured = self.bracket.measured()
                self._since = watch.snapshot(pid)
                try:
                    if on_closed is not None:
                        on_closed()
                except Exception as exc:  # noqa: BLE001 - raised once the worker's reply is in
                    raised = exc
                started += time.monotonic() - paused
        finally:
            if timed:
                self.bracket.settle(0.0 if measured is None else 5.0)
        if raised is not None:
            raise raised
        if isinstance(reply, P.Failed):
            failed = judge.call_failed(reply, self.variant.path.parent)
            if failed.cuda:  # the worker exits: its context is gone
                self.close()
            raise failed
        if timed and measured is None:
            raise CaseFailed(Status.FAIL, "the worker answered a timed sample without saying its window had closed")
        if not timed:
            sample.take_snapshot()
            if req.kind in ("kernels", "profile"):  # the profiler's own threads, born in this pass
                self.trusted |= frozenset(watch.snapshot(pid).tasks) - frozenset(before.tasks)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return reply, measured, outside

    def close(self, wait_s: float = EXIT_WAIT_S) -> None:
        """End the worker (WorkerProcess.close: asked to exit, killed after ``wait_s``)."""
        self.bracket.settle()
        if self.proc is not None:
            self.stray_bytes += self.proc.stray_bytes
            self.proc.close(wait_s)
            self.proc = None
            self._mapped, self._since = -1, None
            self._loading = None
        self.shared.detach_device()
        self.shared.free_retired()
        procs.LEDGER.attribute([self])  # orphans of the worker just ended: killed, no verdict (the case has one)
        orphans = procs.LEDGER.take(self)
        if orphans:
            procs.kill(orphans)

    def release(self, wait_s: float = EXIT_WAIT_S) -> None:
        """Close the worker and free the shared buffers; ``wait_s`` as for close (0 after Ctrl-C)."""
        self.close(wait_s)
        self.shared.close()
        self.bracket.close()
        procs.LEDGER.leave(self)

    def end_case(self) -> str | None:
        """Kill what the submission left running at the end of a case: every process below the worker's launcher
        but the launcher's own and the worker, and the orphans this process adopted that are charged to this
        session (harness.parent.procs.LEDGER; those charged to nobody are this session's). Returns the case's
        failure message ("left a process behind: ..."), or None when there was nothing."""
        tab = procs.table()
        tree = self.proc.tree if self.proc is not None else None
        found = tree.leftovers(tab) if tree is not None else []
        procs.LEDGER.attribute([self], tab)
        found += procs.LEDGER.take(self)
        if found:
            procs.kill(found, more=tree.leftovers if tree is not None else None)
        return procs.left_behind(found)


class CaseRunner:
    """Runs the phases of one case: correctness call, warm-up, timed samples with every output checked.
    ``notes``: what passing replies were noted for (judge.notes), each once, in order."""

    def __init__(self, session: Session, opts: RunOptions, observer: Observer, device: torch.device,
                 problem: str = DEFAULT_PROBLEM):
        self.session, self.opts, self.observer, self.device = session, opts, observer, device
        self.problem, self.plug = problem, problems.get(problem)
        facts = device_facts()
        self.peaks = peaks_for(facts.name) if facts.cuda else None
        self.notes: list[str] = [session.clear_note] if session.clear_note else []
        self._samples: dict[tuple, Sample] = {}
        self._checked: dict[Case, int] = {}
        self._ahead: tuple[tuple, Sample] | None = None  # (what it was prepared for, the sample)

    def checked(self, case: Case) -> int:
        """How many of ``case``'s outputs passed the check so far (every call of every request)."""
        return self._checked.get(case, 0)

    def _sample(self, case: Case, calls: int, slot: int) -> Sample:
        """The sample buffers of ``calls`` inputs of ``case`` in host slot ``slot``: nvfp4_group_gemm's arena
        (samples.Sample), any other problem's plan (plain.PlainSample)."""
        arena = self.problem == DEFAULT_PROBLEM
        key = (case.m, case.n, case.k, calls, slot) if arena else (case, calls, slot)
        if key not in self._samples:
            if len(self._samples) >= 4:  # keep the device memory of two shapes (two slots each) at most
                self._samples.pop(next(iter(self._samples)))
            shared = self.session.shared
            self._samples[key] = (Sample(case, calls, self.opts.data, self.device, shared, slot) if arena else
                                  PlainSample(self.plug, case, calls, self.opts.data, self.device, shared, slot))
        return self._samples[key]

    def _ready(self, case: Case, seeds: list[int], official_order: bool) -> Sample:
        """The sample for ``seeds``, prepared: the one prepared ahead for exactly these, or one prepared now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == (case, tuple(seeds), official_order):
            return ahead[1]
        sample = self._sample(case, len(seeds), 0)
        self.session.buffers_for(sample.layout)
        sample.prepare(seeds, official_order)
        return sample

    def _prepare_ahead(self, case: Case, seeds: list[int], slot: int) -> None:
        """Prepare the sample for ``seeds`` in host slot ``slot`` while the worker finishes the current request
        (its window closed; it no longer reads that slot or the device buffer). Skipped when the buffers would
        have to grow: the worker maps them again only between requests."""
        sample = self._sample(case, len(seeds), slot)
        if self.session.shared.fits(sample.layout):
            sample.prepare(seeds, False)
            self._ahead = ((case, tuple(seeds), False), sample)

    def _call(self, case: Case, seeds: list[int], kind: str, official_order: bool = False,
              watch: bool = True, then: list[int] | None = None) -> P.RunReply:
        """One request on fresh inputs for ``seeds``, judged. ``then``: the seeds of the request expected next
        (a timed one), prepared ahead in the other host slot once this request's window has closed."""
        sample = self._ready(case, seeds, official_order)
        ahead = then is not None and kind == "time"
        on_closed = (lambda: self._prepare_ahead(case, then, 1 - sample.slot)) if ahead else None
        try:
            reply, measured, outside = self.session.run(sample.request(kind, watch=watch, ahead=ahead), sample,
                                                        on_closed)
            judge.reply(sample, reply, outside)
            if measured is not None:
                judge.bracket(self.session.bracket, case, reply, measured, sample)
        except CaseFailed:
            self._ahead = None
            raise
        self._checked[case] = self.checked(case) + len(seeds)
        self.notes += [n for n in judge.notes(reply) if n not in self.notes]
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
            then = (seedlib.sample_seeds(seed, len(times) + 1, st.calls_per_sample, warmup=True)
                    if len(times) + 1 < st.warmup_max else None)
            times.append(self._call(case, seeds, "time", then=then).elapsed_ns)
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
        output, work outside the window, tampering, or a time below this GPU's physical floor (the plug's FLOPs
        and bytes, CUDA only); ERROR, CRASH or TIMEOUT for the submission's faults."""
        calls = self.opts.settings.calls_per_sample
        # the next request is sample i + 1, or the kernel-time pass on the same seeds
        reply = self._call(case, seedlib.sample_seeds(seed, i, calls), "time",
                           then=seedlib.sample_seeds(seed, i + 1, calls))
        per_call = reply.elapsed_ns / reply.calls
        judge.floor(case, per_call, self.peaks, self.plug)
        self.observer.on_sample(index, i + 1)
        return per_call

    def kernel_time(self, case: Case, seed: int, after: int) -> float | None:
        """Kernels' device time per call (ns, CUPTI through torch.profiler) on fresh inputs (the seeds of timed
        sample ``after``, never timed), every output checked; None without CUDA."""
        if self.device.type != "cuda":
            return None
        reply = self._call(case, seedlib.sample_seeds(seed, after, self.opts.settings.calls_per_sample), "kernels",
                           watch=False)
        return reply.kernel_ns

    def bracket_verdict(self, case: Case) -> None:
        """Once ``case``'s timed samples are done: the bracket's strikes over all of them (judge.bracket_verdict;
        Raises CaseFailed(FAIL)."""
        judge.bracket_verdict(self.session.bracket, case)

    def profile(self, case: Case, seed: int) -> str:
        reply = self._call(case, seedlib.sample_seeds(seed, 0, 1), "profile", watch=False)
        return reply.profile


class CaseAttempt:
    """Case number ``index`` (case seed ``seed``) on ``runner``'s variant, from its first phase to its CaseResult.

    Each phase method returns True when it passed; the first failure is kept as ``failure`` (a judge.Verdict)
    and every later phase is a no-op returning False. ``samples``: per-call ns of each timed sample so far;
    ``wall_s``: the time spent in this case's phases (generation and checks included)."""

    def __init__(self, runner: CaseRunner, index: int, case: Case, seed: int):
        self.runner, self.index, self.case, self.seed = runner, index, case, seed
        self.samples: list[float] = []
        self.failure: Verdict | None = None
        self.checked = self.ready = False
        self.wall_s = 0.0
        self.kernel_ns: float | None = None
        self.overhead_ms: float | None = None
        self.profile = ""

    def _step(self, phase) -> bool:
        if self.failure is not None:
            return False
        t0 = time.monotonic()
        try:
            phase()
            return True
        except CaseFailed as exc:
            self.failure = exc.verdict
            return False
        finally:
            self.wall_s += time.monotonic() - t0

    def _phase(self, phase: str) -> None:
        if self.failure is None:
            self.runner.observer.on_phase(self.index, phase)

    def check(self) -> bool:
        """The correctness call on the official draw (compiles happen here). Runs once; later calls return
        whether it passed."""
        if not self.checked:
            self._phase("correctness call")
            self.checked = self._step(lambda: self.runner.correctness(self.case, self.seed))
        return self.checked

    def prepare(self) -> bool:
        """Correctness call, then warm-up: the case is ready to be timed. Runs once; later calls return whether
        it passed."""
        if not self.ready and self.check():
            self._phase("warm-up")
            self.ready = self._step(lambda: self.runner.warmup(self.case, self.seed))
        return self.ready

    def sample(self) -> bool:
        """One more timed sample (``CaseRunner.sample``), appended to ``samples``."""
        return self._step(lambda: self.samples.append(
            self.runner.sample(self.index, self.case, self.seed, len(self.samples))))

    def judged(self) -> bool:
        """The bracket's verdict over the case's timed samples (``CaseRunner.bracket_verdict``)."""
        return self._step(lambda: self.runner.bracket_verdict(self.case))

    def timed(self, mode: str) -> bool:
        """Timed samples until the settings' stopping rule for ``mode`` says stop, then the kernel-time pass
        (CUDA); sets ``overhead_ms`` (the loop's wall time outside the windows, per sample) and ``kernel_ns``."""
        settings = self.runner.opts.settings
        rule = settings.stopping_rule(mode)
        self._phase("timing")
        t0 = time.monotonic_ns()
        while self.sample():
            if rule.is_finished(self.samples, time.monotonic_ns() - t0):
                wall_s = (time.monotonic_ns() - t0) / 1e9
                self.overhead_ms = overhead_per_sample_ms(wall_s, self.samples, settings.calls_per_sample)
                return self.judged() and self._step(lambda: setattr(self, "kernel_ns", self.runner.kernel_time(
                    self.case, self.seed, len(self.samples))))
        return False

    def profiled(self) -> bool:
        """The profiler's kernel table for one call (``profile``)."""
        self._phase("profile")
        return self._step(lambda: setattr(self, "profile", self.runner.profile(self.case, self.seed)))

    def result(self, note: str = "") -> CaseResult:
        """The CaseResult: the failure's status and message, or PASS with ``note`` as its message. Ends the case
        on the worker's side first (``Session.end_case``): a process the submission left running fails a case
        that had not failed yet."""
        left = self.runner.session.end_case()
        if left and self.failure is None:
            self.failure = Verdict(Status.FAIL, left)
        stats = summarize(self.samples) if self.samples else None
        calls = self.runner.checked(self.case)
        f = self.failure
        if f is not None:
            return CaseResult(self.case, f.status, f.message, tuple(self.samples), stats, calls, self.wall_s,
                              cuda_failure=f.cuda)
        return CaseResult(self.case, Status.PASS, note, tuple(self.samples), stats, calls, self.wall_s,
                          self.profile, self.kernel_ns, self.overhead_ms)


def load(session: Session) -> CaseFailed | None:
    """Start ``session``'s worker and import the submission: None, or why it could not be loaded."""
    try:
        session.load()
    except CaseFailed as exc:
        return exc
    return None


def overhead_per_sample_ms(wall_s: float, samples_ns: list[float], calls: int) -> float | None:
    """The timed phase's wall time outside the timed windows, per sample, in ms (``samples_ns``: per-call
    times, so a window is ``calls`` times one)."""
    if not samples_ns:
        return None
    return (wall_s * 1e9 - sum(samples_ns) * calls) / len(samples_ns) / 1e6
