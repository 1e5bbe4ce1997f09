"""Interleaved A-versus-B timing (``fp4bench compare A B``): which of two submissions is faster, shape by shape.

Two runs timed one after the other see different clocks, temperatures and neighbours; their difference can be
larger than either run's interval suggests (harness/results/ranking.py says so). ``compare`` removes that drift: each
variant gets its own worker (``session.Session``), and per shape (each side's shape is one
``case_attempt.CaseAttempt``)

1. A: correctness call, warm-up; B: correctness call, warm-up (as ``run`` does for one variant);
2. timed samples in pairs, A first in even pairs and B first in odd ones (A B, B A, A B, ...: what running
   second costs or gains cancels; on the H200 an export against its own folder variant came out 0.3 % "slower"
   with A always first); pair ``i`` of both sides draws its inputs from the same seeds
   (``seeds.sample_seeds(case seed, i, calls_per_sample)``, exactly what ``CaseAttempt.timed`` uses), so each
   pair times identical inputs, and every output of every timed call is checked (``CaseRunner.sample``);
3. sampling stops when the settings' stopping rule (``Settings.stopping_rule("compare")``, budget per side)
   says stop for both sides, at the rule's max-runs or wall limit, and never before 2 pairs (unless max_runs
   is 1), so both sides always have equal sample counts.

Each shape's verdict is ``ranking.compare_samples(a, b, paired=True)``: the geometric mean of the per-pair
ratios A/B with a 95 % t interval (drift common to a pair cancels). The overall row is
``ranking.compare_geomeans`` on the per-shape Stats of the shapes that have a ratio.

What pairing does not remove: a difference that persists for one worker process for the whole shape (where
its memory or threads landed). On a small, shared CPU machine (e.g. 2 cores) torch_reference against itself can
come out "slower" at 95 %: the interval is the sampling noise between pairs, not the process-to-process spread.

Faults: a side that fails a shape (FAIL, ERROR, CRASH, TIMEOUT) ends that shape for both sides (pairing is
over); the failing side records its status and message, the other side keeps every sample it measured (status
PASS, with a note), and the shape has no ratio. The next shape runs as usual (a crashed worker is restarted).
A side that cannot be imported fails every shape and the other side is not run. A side whose ``requires`` is
not met here is skipped on every shape, as ``run`` skips it, and the other side is timed alone (its own
correctness call, warm-up and samples, by the same stopping rule): its times are still measured and stored,
and each shape's note says so; there is no ratio.

Processes: a process a side's submission leaves running fails that side's shape (``Session.end_case``), and it is
killed after every request (``_police``), before the other side is timed: a process below a worker is that side's;
an orphan adopted by the parent is the side's whose worker's tree it was seen in after an earlier request, else the
side's whose request was in flight when it appeared (both sides', for the imports, which overlap).

Both sides are recorded as ordinary RunRecords with mode ``compare`` (the results store takes any mode; its
observers, e.g. ``store.StoreRecorder``, get the usual hooks per side).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

import torch

from harness.parent import judge, proc_cleanup, proc_table
from harness.parent import seeds as seedlib
from harness.parent.case_attempt import CaseAttempt
from harness.parent.case_runner import CaseRunner, Observer, RunOptions
from harness.parent.environment import device_facts
from harness.parent.process import EXIT_WAIT_S
from harness.parent.registry import Variant
from harness.parent.session import Session, load_failure
from harness.parent.runner import LOADING, close_record, new_record, while_workers_start
from harness.shapes import DEFAULT_PROBLEM
from harness.protocol import ExitCode
from harness.results.ranking import CompareRow, Comparison, NoRatio, compare_geomeans, compare_samples, plural
from harness.results.record import CaseResult, RunRecord, Status, exit_code
from harness.results.stats import StoppingRule
from harness.hardware import default_device
from harness.problem import Case
from harness.shapes import ShapeSet

#: The mode compare runs are recorded with, and whose budget (Settings.budget_s) the stopping rule uses.
MODE = "compare"
#: Fewest sample pairs a shape gets (a paired interval needs 2), unless the settings' max_runs is smaller.
MIN_PAIRS = 2


@dataclass(frozen=True)
class ShapeComparison:
    """One shape: each side's CaseResult (per-call sample times in ns, pair i of ``a`` next to pair i of ``b``)
    and A over B from ``compare_samples(paired=True)``; ``comparison`` is None when the shape has no ratio
    (``note`` says why: a side failed or was skipped, or fewer than 2 pairs)."""

    index: int
    case: Case
    a: CaseResult
    b: CaseResult
    comparison: Comparison | None
    note: str = ""

    @property
    def row(self) -> CompareRow:
        """(case, Comparison or NoRatio): a row for ``report.compare_table`` / ``compare_rich_table``."""
        if self.comparison is not None:
            return self.case, self.comparison
        mean = lambda r: r.stats.mean_ns if r.stats else None  # noqa: E731
        return self.case, NoRatio(self.a.status.value, self.b.status.value, self.note, mean(self.a), mean(self.b))


@dataclass(frozen=True)
class CompareResult:
    """A comparison of ``a`` (A) with ``b`` (B): both finished RunRecords (mode ``compare``), per-shape
    comparisons in case order, and ``overall``: ``compare_geomeans`` over the shapes that have a ratio (None
    when none has), labelled ``overall_label`` (``geomean``, or ``geomean (k of n shapes)``). ``unmet`` is the
    reason a side cannot run here ("B (cute_grouped) needs sm_100a; ..."), else empty; ``timed_alone`` names
    the other side when it ran without a partner (``A (torch_reference)``), else empty."""

    a: RunRecord
    b: RunRecord
    shapes: tuple[ShapeComparison, ...]
    overall: Comparison | None
    overall_label: str = "geomean"
    unmet: str = ""
    timed_alone: str = ""

    @property
    def rows(self) -> list[CompareRow]:
        """Per-shape rows for ``report.compare_table`` / ``compare_rich_table`` (pass ``overall`` separately)."""
        return [s.row for s in self.shapes]

    @property
    def exit_code(self) -> ExitCode:
        """The worse of the two runs' exit codes (``record.exit_code``): nonzero when either side failed a
        shape; skipped shapes do not fail."""
        return max(exit_code(self.a), exit_code(self.b))


class _Side:
    """One variant's worker, case runner, observer and results, and its attempt at the current shape."""

    def __init__(self, letter: str, variant: Variant, opts: RunOptions, observer: Observer, device: torch.device,
                 problem: str = DEFAULT_PROBLEM):
        self.letter, self.variant, self.observer = letter, variant, observer
        self.session = Session(variant, opts.settings, sandbox=opts.sandbox, worker_log=opts.worker_log,
                               problem=problem)
        self.runner = CaseRunner(self.session, opts, observer, device, problem)
        self.results: list[CaseResult] = []
        self.attempt: CaseAttempt | None = None

    @property
    def name(self) -> str:
        return f"{self.letter} ({self.variant.name})"

    def begin(self, index: int, case: Case, seed: int) -> CaseAttempt:
        self.attempt = CaseAttempt(self.runner, index, case, seed)
        self.observer.on_case_start(index, case)
        return self.attempt

    def finish(self, result: CaseResult) -> None:
        self.observer.on_case(len(self.results), result)
        self.results.append(result)


def compare(a: Variant, b: Variant, shapes: ShapeSet, opts: RunOptions = RunOptions(MODE),
            observers: tuple[Observer, Observer] | None = None) -> CompareResult:
    """Time ``a`` (A) against ``b`` (B) interleaved on every case of ``shapes`` (module docstring).

    ``opts``: mode must be ``compare``; data, secret seed and settings as for ``runner.run``. ``observers``:
    one Observer per side (A's, B's), each told on_start / on_phase / on_case_start / on_sample / on_case /
    on_finish for its own run. Times are ns throughout (per call: sample duration / calls).

    Never raises for a submission's fault: each side's case ends pass/fail/error/crash/timeout/skipped. Raises
    ValueError when ``opts.mode`` is not ``compare``, or a case seed combined with the secret does not fit.
    """
    if opts.mode != MODE:
        raise ValueError(f"compare records runs with mode {MODE!r}; got RunOptions(mode={opts.mode!r})")
    opts = replace(opts, secret=seedlib.secret_for(opts.secret, MODE, [c.seed for c in shapes.cases]))
    case_seeds = [seedlib.case_seed(c.seed, opts.secret) for c in shapes.cases]
    obs_a, obs_b = observers or (Observer(), Observer())
    device = default_device()
    torch.set_num_threads(1)  # as runner.run: the parent's draws and checks must not compete with the workers
    sides = (_Side("A", a, opts, obs_a, device, shapes.problem), _Side("B", b, opts, obs_b, device, shapes.problem))
    records = [new_record(s.variant, shapes, opts) for s in sides]
    for side, record in zip(sides, records):
        side.observer.on_start(record)
    facts = device_facts()
    unmet = {s.letter: r for s in sides if (r := s.variant.requires.unmet_reason(facts))}
    active = tuple(s for s in sides if s.letter not in unmet)
    wait_s = EXIT_WAIT_S
    try:
        for s in sides:
            if s.letter in unmet:
                for case in shapes.cases:
                    s.finish(CaseResult(case, Status.SKIPPED, unmet[s.letter]))
        if active:
            _run_cases(shapes.cases, case_seeds, active, opts.settings.stopping_rule(MODE))
    except KeyboardInterrupt:
        wait_s = 0.0  # as runner.run: a worker stuck in a submission is killed at once
        raise
    finally:
        for s in sides:
            s.session.release(wait_s)
    rec_a, rec_b = (close_record(r, s.results, s.observer, s.session, s.runner) for s, r in zip(sides, records))
    alone = active[0].name if len(active) == 1 else ""
    per_shape = tuple(_shape(i, ra, rb, *sides, alone) for i, (ra, rb) in enumerate(zip(rec_a.cases, rec_b.cases)))
    compared = [s for s in per_shape if s.comparison is not None]
    overall = compare_geomeans([s.a.stats for s in compared], [s.b.stats for s in compared]) if compared else None
    label = ("geomean" if len(compared) == len(per_shape)
             else f"geomean ({len(compared)} of {plural(len(per_shape), 'shape')})")
    reason = "; ".join(f"{s.name} {unmet[s.letter]}" for s in sides if s.letter in unmet)
    return CompareResult(rec_a, rec_b, per_shape, overall, label, reason, alone)


def _run_cases(cases, case_seeds, sides: tuple[_Side, ...], rule: StoppingRule) -> None:
    """The ``compare`` schedule: load the workers of ``sides`` (both, or the one that can run here), then every
    case: correctness and warm-up per side, then interleaved timed samples (pairs, or one side's samples alone)."""
    for s in sides:
        s.observer.on_phase(None, LOADING)
        s.session.start()
    while_workers_start(cases, sides[0].runner.opts, sides[0].runner.device, sides[0].runner.problem)
    failed = {s.letter: exc for s in sides if (exc := load_failure(s.session))}
    _police(sides, sides)  # the imports overlap: an orphan that appears now is charged to both
    if failed:  # import error or no entry point: that side fails every case
        why = judge.partner_not_loaded([s.name for s in sides if s.letter in failed])
        for case in cases:
            for s in sides:
                exc = failed.get(s.letter)
                s.finish(CaseResult(case, exc.status, exc.message) if exc else CaseResult(case, Status.SKIPPED, why))
        return
    for index, (case, seed) in enumerate(zip(cases, case_seeds)):
        attempts = [s.begin(index, case, seed) for s in sides]
        for s, a in zip(sides, attempts):
            if _policed(sides, s, a.check) and not any(x.failure for x in attempts):
                _policed(sides, s, a.prepare)
        if not any(a.failure for a in attempts):
            for s in sides:
                s.observer.on_phase(index, "timing, the sides interleaved" if len(sides) == 2 else "timing alone")
            _interleave(sides, attempts, rule)
            if not any(a.failure for a in attempts):
                for s, a in zip(sides, attempts):
                    _policed(sides, s, a.judged)
        for s, other in zip(sides, sides[::-1]):
            partner = other.attempt.failure
            note = judge.partner_failed(len(s.attempt.samples), other.name, partner.status) if partner else ""
            s.finish(s.attempt.result(note))


def _police(sides: tuple[_Side, ...], in_flight: tuple[_Side, ...]) -> None:
    """After the requests of ``in_flight`` have ended: charge every process left below a side's worker to that side
    (a background thread of an idle worker can start one too), note which processes are in each worker's tree,
    charge the orphans the parent adopted meanwhile to their sides (proc_cleanup.LEDGER), and kill them all now, so
    none runs while the other side is timed (each fails its case in ``Session.end_case``)."""
    tab, doomed = proc_table.subtree(os.getpid()), []  # this process's tree only: cheap enough for every request
    for s in sides:
        if s.session.proc is not None:
            proc_cleanup.LEDGER.observe(s.session, s.session.proc.tree.members(tab))
            left = s.session.proc.tree.leftovers(tab)
            proc_cleanup.LEDGER.charge(s.session, left)
            doomed += left
    doomed += proc_cleanup.LEDGER.attribute([s.session for s in in_flight], tab)
    if doomed:
        proc_cleanup.kill(doomed)


def _policed(sides: tuple[_Side, ...], side: _Side, phase) -> bool:
    """``phase()`` (a CaseAttempt phase of ``side``), then ``_police`` for it; returns what the phase returned."""
    passed = phase()
    _police(sides, (side,))
    return passed


def _interleave(sides: tuple[_Side, ...], attempts: list[CaseAttempt], rule: StoppingRule) -> None:
    """Timed pairs A_i, B_i (same seeds; B first in odd pairs) until both sides' rule says stop (or max runs); a
    failure ends it."""
    t0 = time.monotonic_ns()
    pairs = 0
    while True:
        order = list(zip(sides, attempts))
        for s, a in order if pairs % 2 == 0 else order[::-1]:
            if not _policed(sides, s, a.sample):
                return
        pairs += 1
        if pairs >= rule.max_runs:
            return
        wall = time.monotonic_ns() - t0
        if pairs >= MIN_PAIRS and all(rule.is_finished(a.samples, wall) for a in attempts):
            return


def _shape(index: int, ra: CaseResult, rb: CaseResult, side_a: _Side, side_b: _Side, alone: str = ""
           ) -> ShapeComparison:
    """The per-shape verdict from the two recorded results (compare_samples, paired), or why there is none
    (``alone``: the side that was timed without a partner, named in the note)."""
    if not (ra.passed and rb.passed):
        bad = [(s, r) for s, r in ((side_a, ra), (side_b, rb)) if not r.passed]
        bad = [(s, r) for s, r in bad if not r.message.startswith("not run: ")] or bad  # the cause, not the echo
        note = "; ".join(f"{s.letter} {r.status.value}: {r.message.splitlines()[0] if r.message else ''}"
                         for s, r in bad)
        if alone:
            note += f"; {alone} timed alone"
        return ShapeComparison(index, ra.case, ra, rb, None, note)
    if len(ra.samples_ns) < 2 or len(ra.samples_ns) != len(rb.samples_ns):
        return ShapeComparison(index, ra.case, ra, rb, None, f"no ratio: {len(ra.samples_ns)} sample pair(s) "
                                                             f"(a ratio needs at least 2)")
    try:
        return ShapeComparison(index, ra.case, ra, rb, compare_samples(ra.samples_ns, rb.samples_ns, paired=True))
    except ValueError as exc:  # e.g. a zero time from a coarse clock
        return ShapeComparison(index, ra.case, ra, rb, None, f"no ratio: {exc}")
