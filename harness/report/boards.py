"""Leaderboards: runs grouped by problem, GPU model, shape set (its case list), data and mode, ranked by geomean with
ties."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable

from harness.report.figures import run_peaks
from harness.results.ranking import Interval, geomean_ci, rank_with_ties
from harness.results.record import RunRecord
from harness.results.stats import geomean
from harness import plugs
from harness.hardware import GpuPeaks, gpu_model, sol_ns_of
from harness.shapes import DEFAULT_PROBLEM

#: Under every ranking: how ranks and ties are decided.
RANK_NOTE = "rank = 1 + number of variants detectably faster; overlapping 95% intervals are ties (shown =N)"


@dataclass(frozen=True)
class BoardEntry:
    """One variant on a board: its latest passing run, the 95 % interval on its geomean (ns), its rank
    (shared with overlapping entries) and the geomean of per-shape SOL over its geomean time, in percent."""

    rank: int
    tied_with: tuple[str, ...]
    variant: str
    run: RunRecord
    interval: Interval
    pct_sol: float | None


@dataclass(frozen=True)
class Board:
    """Runs that can be ranked together: same problem, GPU model, shape set (same case list), data mode and
    mode."""

    gpu_model: str
    shape_set: str
    data: str
    mode: str
    cases: tuple
    entries: tuple[BoardEntry, ...]
    peaks: GpuPeaks | None
    cases_digest: str
    problem: str = DEFAULT_PROBLEM

    @property
    def title(self) -> str:
        """``nvfp4_group_gemm benchmarks on H200 (leaderboard, official data)``: the problem first, always (a store
        may hold several)."""
        return f"{self.problem} {self.shape_set} on {self.gpu_model} ({self.mode}, {self.data} data)"


def rankable(run: RunRecord) -> bool:
    """Whether ``run`` can stand on a board: complete, every case passed, and every case timed."""
    return run.passed and bool(run.cases) and all(c.stats and c.stats.mean_ns > 0 for c in run.cases)


def leaderboards(runs: Iterable[RunRecord]) -> list[Board]:
    """Group rankable runs (complete, every case passed and timed) by GPU model, shape set, case list, data and
    mode; keep each variant's latest such run (by ``started_at``); rank variants by geomean with ties
    (harness.results.ranking.rank_with_ties). Boards sorted by problem, GPU model, shape set, data, mode."""
    groups: dict[tuple, dict[str, RunRecord]] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        if not rankable(run):
            continue
        plug = plugs.get(run.problem)
        sig = tuple(plug.case_text(c.case) for c in run.cases)
        key = (run.problem, gpu_model(run.environment.device), run.shape_set, run.data, run.mode, sig)
        groups.setdefault(key, {})[run.submission.name] = run
    boards = []
    for (problem, model, shape_set, data, mode, sig), latest in groups.items():
        plug = plugs.get(problem)
        intervals = {v: geomean_ci([c.stats for c in r.cases]) for v, r in latest.items()}
        any_run = next(iter(latest.values()))
        peaks = run_peaks(any_run)
        entries = []
        for ranked in rank_with_ties(intervals):
            run = latest[ranked.name]
            pct = None
            if peaks:
                sol = [sol_ns_of(plug.flops(c.case), plug.bytes_moved(c.case), peaks) for c in run.cases]
                pct = 100.0 * geomean(sol) / ranked.interval.estimate
            entries.append(BoardEntry(ranked.rank, ranked.tied_with, ranked.name, run, ranked.interval, pct))
        boards.append(Board(model, shape_set, data, mode, tuple(c.case for c in any_run.cases), tuple(entries),
                            peaks, hashlib.sha256("\n".join(sig).encode()).hexdigest()[:8], problem))
    boards.sort(key=lambda b: (b.problem, b.gpu_model, b.shape_set, b.data, b.mode, b.cases_digest))
    return boards


def rank_text(entry: BoardEntry, board: Board) -> str:
    """``1``, or ``=1`` when another entry shares the rank."""
    shared = sum(1 for e in board.entries if e.rank == entry.rank) > 1
    return f"={entry.rank}" if shared else str(entry.rank)

