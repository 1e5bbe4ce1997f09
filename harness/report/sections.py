"""The sections of a report on runs and of a leaderboard report, as a document model (harness.report.document).

HTML pictures (per-shape bars with 95 % intervals, a roofline) are drawn by harness.report.plots; the roofline is
drawn only under the roofs of the GPUs the runs were timed on (none for a CPU run)."""
from __future__ import annotations

import datetime as _dt
from typing import Sequence

from harness.report import plots
from harness.report.boards import Board, leaderboards
from harness.report.document import Details, Image, Para, Section
from harness.report.figures import (
    case_figures,
    device_text,
    plug_of,
    run_labels,
    run_peaks,
    shape_label,
    sol_ns,
    timer_text,
)
from harness.report.tables import (
    across_table,
    board_shapes_table,
    board_table,
    case_table,
    runs_table,
    sol_items,
)
from harness.results.ranking import mean_ci
from harness.results.record import RunRecord
from harness.hardware import GPU_PEAKS


def distinct_cases(runs: Sequence[RunRecord]) -> list:
    """Every case any of ``runs`` has, once (by its problem's official line), in first-seen order; the cases of
    the first run's problem (a report's runs are of one problem; another's cases are left out)."""
    specs: dict[str, object] = {}
    for run in runs:
        if run.problem == runs[0].problem:
            for c in run.cases:
                specs.setdefault(plug_of(run).case_text(c.case), c.case)
    return list(specs.values())


def _bars_image(timed: Sequence[tuple[RunRecord, str]], cases: Sequence) -> Image:
    plug = plug_of(timed[0][0])
    bars = []
    for case in cases:
        row = []
        for run, _ in timed:
            r = next((c for c in run.cases if run.problem == timed[0][0].problem
                      and plug.case_text(c.case) == plug.case_text(case)), None)
            if r is not None and r.passed and r.stats:
                iv = mean_ci(r.stats)
                row.append(plots.Bar(r.stats.mean_ns / 1e3, iv.low / 1e3, iv.high / 1e3))
            else:
                row.append(plots.Bar(None, note=r.status.value if r else "not run"))
        bars.append(row)
    models = {run_peaks(run).model if run_peaks(run) else None for run, _ in timed}
    sol_us = None
    sol_label = "SOL"
    if len(models) == 1 and None not in models:
        peaks = run_peaks(timed[0][0])
        sol_us = [sol_ns(c, peaks, plug) / 1e3 for c in cases]
        sol_label = f"{peaks.model} SOL"
    png = plots.shape_bars_png([shape_label(c, plug) for c in cases], [lb for _, lb in timed], bars, sol_us, sol_label)
    return Image(png, "Per-shape mean time for each run, with 95% confidence intervals")


def _roofline_image(on_gpu: Sequence[tuple[RunRecord, str]], cases: Sequence) -> Image:
    points = [plots.RoofPoint(lb, f.label, f.intensity, f.tflops) for run, lb in on_gpu for f in case_figures(run)
              if f.result.passed and f.tflops]
    models = {run_peaks(run).model for run, _ in on_gpu}
    roofs = [p for p in GPU_PEAKS if p.model in models]
    plug = plug_of(on_gpu[0][0])
    shape_ai = [(shape_label(c, plug), plug.flops(c) / plug.bytes_moved(c)) for c in cases]
    return Image(plots.roofline_png(roofs, points, shape_ai),
                 f"Roofline of {', '.join(p.model for p in roofs)}, the GPU the runs were timed on, with "
                 f"each shape's arithmetic intensity and the measured TFLOP/s")


def picture_items(runs: Sequence[RunRecord], labels: Sequence[str]) -> list:
    """The Pictures section's items: per-shape bars of every timed run, then a roofline of the GPU-timed ones
    (or a note on why a run is not on it); a warning instead when matplotlib is missing."""
    if not plots.available():
        return [Para("matplotlib is not installed: no pictures (pip install matplotlib).", "warn")]
    cases = distinct_cases(runs)
    timed = [(run, lb) for run, lb in zip(runs, labels) if any(c.stats for c in run.cases)]
    items: list = [_bars_image(timed, cases)] if timed and cases else []
    on_gpu = [(run, lb) for run, lb in timed if run_peaks(run)]
    on_cpu = [lb for run, lb in timed if not run_peaks(run)]
    if on_cpu:
        items.append(Para(f"Not on the roofline: {', '.join(on_cpu)}, timed on the CPU (or a GPU without known "
                          f"peaks), which has no roof to draw against."))
    if on_gpu:
        items.append(_roofline_image(on_gpu, cases))
    return items


def _env_text(run: RunRecord) -> str:
    e = run.environment
    return (f"{device_text(e)}, torch {e.torch}, triton {e.triton}, CUTLASS DSL {e.cutlass_dsl}, "
            f"Python {e.python}, host {e.hostname}, times from {timer_text(e)}")


def _run_section(run: RunRecord, label: str) -> Section:
    sec = Section(f"{label}: run {run.run_id}", 2)
    if not run.complete:
        sec.items.append(Para("INCOMPLETE: this run never finished (killed or interrupted); the cases below "
                              "are what it measured before it stopped.", "warn"))
    sec.items.append(Para(f"{run.problem}, {run.mode} mode, {run.data} data, shape set {run.shape_set}, secret seed "
                          f"{'none' if run.secret_seed is None else run.secret_seed}, commit "
                          f"{run.git_commit or 'unknown'}, started {run.started_at}."))
    sec.items.append(Para(f"Submission {run.submission.path} (sha256 {run.submission.sha256[:16]}...). "
                          f"Environment: {_env_text(run)}."))
    sec.items.append(Para(f"Worker confinement: {run.sandbox or 'not recorded (a run from before it was)'}."))
    sec.items += [Para(f"Note: {note}", "warn") for note in run.notes]
    sec.items.append(case_table(run))
    for r in run.cases:
        if r.message and (not r.passed or "\n" in r.message):
            sec.items.append(Details(f"{shape_label(r.case, plug_of(run))}: {r.status.value}", r.message))
    return sec


def report_sections(runs: Sequence[RunRecord], pictures: bool) -> list[Section]:
    """A report on ``runs`` (at least one): the runs table; per problem, across runs (with rankings) when it has
    several and the pictures when ``pictures``; one section per run; per problem, the speed-of-light analysis of
    every case."""
    labels = run_labels(runs)
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    secs = [Section("fp4bench report", 1, [
        Para(f"{len(runs)} run{'s' if len(runs) != 1 else ''}, generated {now}. Times are mean time per call in "
             f"microseconds (us); 95% CI from the per-shape standard error with a t quantile "
             f"(harness/results/ranking.py)."),
        runs_table(runs, labels)])]
    problems = list(dict.fromkeys(r.problem for r in runs))
    for problem in problems:  # the runs of one problem are compared, ranked and drawn together; never two problems'
        ours = [(r, label) for r, label in zip(runs, labels) if r.problem == problem]
        of = f": {problem}" if len(problems) > 1 else ""
        if len(ours) > 1:
            across = Section(f"Across runs{of}", 2, [across_table(*map(list, zip(*ours)))])
            for board in leaderboards([r for r, _ in ours]):
                if len(board.entries) > 1:
                    across.items += [Para(f"Ranking: {board.title}", "strong"), board_table(board, ids=False)]
            secs.append(across)
        if pictures:
            secs.append(Section(f"Pictures{of}", 2, picture_items(*map(list, zip(*ours)))))
    secs += [_run_section(run, label) for run, label in zip(runs, labels)]
    for problem in problems:
        ours = [r for r in runs if r.problem == problem]
        secs.append(Section(f"Speed of light by GPU model{': ' + problem if len(problems) > 1 else ''}", 2,
                            sol_items(distinct_cases(ours), plug_of(ours[0]))))
    return secs


def leaderboard_sections(boards: Sequence[Board]) -> list[Section]:
    """A leaderboard report: what the ranking means, then per board its ranking and its per-shape times."""
    secs = [Section("fp4bench leaderboard", 1, [Para(
        "Each variant's latest passing run per GPU model and shape set, ranked by the geometric mean of per-shape "
        "mean times (us); 95% CI by the log-space delta method; overlapping intervals are ties.")])]
    if not boards:
        secs[0].items.append(Para("No passing runs to rank yet.", "warn"))
    for b in boards:
        secs.append(Section(b.title, 2, [board_table(b), board_shapes_table(b)]))
    return secs
