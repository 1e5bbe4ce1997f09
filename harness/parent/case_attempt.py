"""One case from its first phase to its CaseResult, on a CaseRunner: the first failure ends it, and samples
measured before it stay (they passed every check). Schedules (runner.run, compare) decide only the order of
phases across cases and variants.
"""
from __future__ import annotations

import time

from harness.parent.case_runner import CaseRunner
from harness.parent.judge import CaseFailed, CaseVerdict
from harness.problem import Case
from harness.results.record import CaseResult, Status
from harness.results.stats import summarize


class CaseAttempt:
    """Case number ``index`` (case seed ``seed``) on ``runner``'s variant, from its first phase to its CaseResult.

    Each phase method returns True when it passed; the first failure is kept as ``failure`` (a judge.CaseVerdict)
    and every later phase is a no-op returning False. ``samples``: per-call ns of each timed sample so far;
    ``wall_s``: the time spent in this case's phases (generation and checks included)."""

    def __init__(self, runner: CaseRunner, index: int, case: Case, seed: int):
        self.runner, self.index, self.case, self.seed = runner, index, case, seed
        self.samples: list[float] = []
        self.failure: CaseVerdict | None = None
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
                mean_ns = sum(self.samples) / len(self.samples)
                return self.judged() and self._step(lambda: setattr(self, "kernel_ns", self.runner.kernel_time(
                    self.case, self.seed, len(self.samples), mean_ns)))
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
            self.failure = CaseVerdict(Status.FAIL, left)
        stats = summarize(self.samples) if self.samples else None
        calls = self.runner.checked(self.case)
        f = self.failure
        if f is not None:
            return CaseResult(self.case, f.status, f.message, tuple(self.samples), stats, calls, self.wall_s,
                              cuda_failure=f.cuda)
        return CaseResult(self.case, Status.PASS, note, tuple(self.samples), stats, calls, self.wall_s,
                          self.profile, self.kernel_ns, self.overhead_ms)


def overhead_per_sample_ms(wall_s: float, samples_ns: list[float], calls: int) -> float | None:
    """The timed phase's wall time outside the timed windows, per sample, in ms (``samples_ns``: per-call
    times, so a window is ``calls`` times one)."""
    if not samples_ns:
        return None
    return (wall_s * 1e9 - sum(samples_ns) * calls) / len(samples_ns) / 1e6
