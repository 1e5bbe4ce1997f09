"""A variant's runs over time, each compared with the previous comparable run (the ``history`` command)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from harness import plugs
from harness.report.boards import rankable
from harness.report.figures import run_geomean_ci, run_status
from harness.results.ranking import Comparison, Interval, compare_geomeans
from harness.results.record import RunRecord
from harness.hardware import gpu_model


@dataclass(frozen=True)
class HistoryRow:
    """One run of a variant over time: its 95 % geomean interval (ns; None unless it passed with timings) and,
    when an earlier passing run on the same GPU model, shape set (same cases), data and mode exists, the
    Comparison of this run over that one (ratio below 1: this run is faster)."""

    run: RunRecord
    status: str
    interval: Interval | None
    previous_run_id: str | None = None
    change: Comparison | None = None


def history_rows(runs: Iterable[RunRecord]) -> list[HistoryRow]:
    """Runs (of one variant) oldest first, each compared with the previous comparable passing run by
    harness.results.ranking.compare_geomeans."""
    last: dict[tuple, RunRecord] = {}
    out = []
    for run in sorted(runs, key=lambda r: r.started_at):
        iv = run_geomean_ci(run)
        plug = plugs.get(run.problem)
        key = (run.problem, gpu_model(run.environment.device), run.shape_set, run.data, run.mode,
               tuple(plug.case_text(c.case) for c in run.cases))
        prev, change = None, None
        if iv is not None and rankable(run):
            prev = last.get(key)
            if prev is not None:
                change = compare_geomeans([c.stats for c in run.cases], [c.stats for c in prev.cases])
            last[key] = run
        out.append(HistoryRow(run, run_status(run), iv, prev.run_id if prev else None, change))
    return out
