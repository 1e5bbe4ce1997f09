"""The phases of one case on a session: correctness call, warm-up, timed samples, the kernel-time pass, the profile.

``CaseRunner`` draws each request's inputs (harness.parent.samples for a problem with sample buffers of its own,
nvfp4_group_gemm; harness.parent.plain_samples for any other), sends it through its ``Session`` and judges every reply
(harness.parent.judge). ``RunOptions`` says what to run; ``Observer`` is the progress and store hooks. Schedules
(runner.run: one variant; compare: two interleaved) drive it through harness.parent.case_attempt.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from harness import plugs
from harness import protocol as P
from harness.hardware import peaks_for
from harness.parent import judge
from harness.parent import seeds as seedlib
from harness.parent.environment import device_facts
from harness.parent.judge import CaseFailed
from harness.parent.plain_samples import PlainSample
from harness.parent.samples import ArenaSample
from harness.parent.sandbox import Sandbox
from harness.parent.session import Session
from harness.parent.settings import Settings
from harness.problem import Case
from harness.results.record import CaseResult, RunRecord
from harness.shapes import DEFAULT_PROBLEM


#: The largest kernel time per call the worker may report, as a multiple of the case's measured mean: the
#: kernel-time pass runs the same calls on fresh inputs, so its kernels cannot take much longer than the windows.
KERNEL_TIME_MAX = 1.5


@dataclass(frozen=True)
class RunOptions:
    """What to run: ``mode`` (one of MODES), ``data`` (official | full-range), ``secret`` (None: a random one in a
    timed mode, harness.parent.seeds.secret_for; none in the others),
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


class CaseRunner:
    """Runs the phases of one case: correctness call, warm-up, timed samples with every output checked.
    ``notes``: what passing replies were noted for (judge.notes), each once, in order."""

    def __init__(self, session: Session, opts: RunOptions, observer: Observer, device: torch.device,
                 problem: str = DEFAULT_PROBLEM):
        self.session, self.opts, self.observer, self.device = session, opts, observer, device
        self.problem, self.plug = problem, plugs.get(problem)
        facts = device_facts()
        self.peaks = peaks_for(facts.name) if facts.cuda else None
        self.notes: list[str] = [session.clear_note] if session.clear_note else []
        self.charged_ns = 0.0  # the last timed request's time to keep, all its calls (judge.bracket)
        self._samples: dict[tuple, ArenaSample] = {}
        self._checked: dict[Case, int] = {}
        self._ahead: tuple[tuple, ArenaSample] | None = None  # (what it was prepared for, the sample)

    def checked(self, case: Case) -> int:
        """How many of ``case``'s outputs passed the check so far (every call of every request)."""
        return self._checked.get(case, 0)

    def _sample(self, case: Case, calls: int, slot: int) -> ArenaSample:
        """The sample buffers of ``calls`` inputs of ``case`` in host slot ``slot``: the problem's own
        (samples.ArenaSample; nvfp4_group_gemm), else a plan (plain_samples.PlainSample)."""
        kit = self.plug.sample_buffers
        arena = kit is not None
        key = (kit.sizes_of(case), calls, slot) if arena else (case, calls, slot)
        if key not in self._samples:
            if len(self._samples) >= 4:  # keep the device memory of two shapes (two slots each) at most
                self._samples.pop(next(iter(self._samples)))
            shared = self.session.shared
            self._samples[key] = (ArenaSample(case, calls, self.opts.data, self.device, shared, slot, self.problem)
                                  if arena else
                                  PlainSample(self.plug, case, calls, self.opts.data, self.device, shared, slot))
        return self._samples[key]

    def _ready(self, case: Case, seeds: list[int], official_order: bool) -> ArenaSample:
        """The sample for ``seeds``, prepared but not yet in the worker's buffer (Session.run publishes it): the one
        prepared ahead for exactly these, or one prepared now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == (case, tuple(seeds), official_order):
            return ahead[1]
        sample = self._sample(case, len(seeds), 0)
        self.session.buffers_for(sample.layout)
        sample.prepare(seeds, official_order, publish=False)
        return sample

    def _prepare_ahead(self, case: Case, seeds: list[int], slot: int) -> None:
        """Prepare the sample for ``seeds`` for host slot ``slot`` while the worker finishes the current request:
        drawn and its reference computed, its inputs kept in the parent's memory (on CUDA its plain scales go into
        that slot) until Session.run publishes them. Skipped when the buffers would have to grow: the worker maps
        them again only between requests."""
        sample = self._sample(case, len(seeds), slot)
        if self.session.shared.fits(sample.layout):
            sample.prepare(seeds, False, publish=False)
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
            self.charged_ns = reply.elapsed_ns
            if measured is not None:
                self.charged_ns = judge.bracket(self.session.bracket, case, reply, measured, sample)
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
        seeds = seedlib.sample_seeds(seed, i, calls)
        self._call(case, seeds, "time", then=seedlib.sample_seeds(seed, i + 1, calls))
        per_call = self.charged_ns / len(seeds)  # the calls asked for (judge.reply refuses another claim)
        judge.floor(case, per_call, self.peaks, self.plug)
        self.observer.on_sample(index, i + 1)
        return per_call

    def kernel_time(self, case: Case, seed: int, after: int, mean_ns: float) -> float | None:
        """Kernels' device time per call (ns, CUPTI through torch.profiler) on fresh inputs (the seeds of timed
        sample ``after``, never timed), every output checked; None without CUDA. The figure is the worker's own
        report, so it is kept only between this GPU's physical floor and KERNEL_TIME_MAX x ``mean_ns`` (the
        case's mean per-call time from the parent's windows); outside, None and a note say it was not kept. It
        never ranks anything."""
        if self.device.type != "cuda":
            return None
        reply = self._call(case, seedlib.sample_seeds(seed, after, self.opts.settings.calls_per_sample), "kernels",
                           watch=False)
        ns = reply.kernel_ns
        if ns is None:
            return None
        low = judge.floor_ns(case, self.peaks, self.plug) or 0.0
        if not (math.isfinite(ns) and low <= ns <= KERNEL_TIME_MAX * mean_ns):
            note = (f"a kernel time the worker reported ({ns:.0f} ns per call) lies outside this GPU's floor "
                    f"({low:.0f} ns) to {KERNEL_TIME_MAX:g} x the measured mean: not kept")
            if note not in self.notes:
                self.notes.append(note)
            return None
        return ns

    def bracket_verdict(self, case: Case) -> None:
        """Once ``case``'s timed samples are done: the bracket's strikes over all of them (judge.bracket_verdict;
        Raises CaseFailed(FAIL)."""
        judge.bracket_verdict(self.session.bracket, case)

    def profile(self, case: Case, seed: int) -> str:
        reply = self._call(case, seedlib.sample_seeds(seed, 0, 1), "profile", watch=False)
        return reply.profile
