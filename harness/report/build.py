"""Reports on stored runs: per-shape tables, speed-of-light analysis, rankings, pictures; md, html, csv, json.

``report(runs, fmt)`` is the entry point; ``leaderboards(runs)`` groups runs into ranked boards (used by the
``leaderboard`` command and by reports on several runs); ``compare_table`` renders an A-versus-B comparison
that ``harness.results.ranking.compare_samples`` produced (its terminal form is harness.report.console.compare_rich_table).

Units: times are stored in ns and shown in us; throughput in TFLOP/s (10^12 FLOP/s); "% SOL" is the
speed-of-light time over the measured mean time (100 % = at the roofline), for the GPU model the run used
(task.cost.peaks_for), and only for runs timed with CUDA events. The task's own B200 SOL (1.5 GHz FP4, 7.68 TB/s)
is always shown beside it. Shapes are numbered from 1 in every table, legend and picture (``shape_number``);
the machine formats keep 0-based positions (CSV ``case_index``, JSON ``index``, the official POPCORN keys).
Markdown, CSV and JSON are text only; HTML is one self-contained file with its pictures embedded as base64 PNG
(no external URL), so it opens offline. The roofline is drawn only under the roofs of the GPUs the runs were
timed on (none for a CPU run).
"""
from __future__ import annotations

import base64
import csv
import dataclasses
import datetime as _dt
import hashlib
import html
import io
import json
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence, Union

from harness.report import plots
from harness.results.ranking import (
    CompareRow,
    Comparison,
    Interval,
    NoRatio,
    Verdict,
    geomean_ci,
    mean_ci,
    plural,
    rank_with_ties,
)
from harness.results.record import CaseResult, Environment, RunRecord, Status
from harness.results.stats import geomean
from task.cost import GPU_PEAKS, GpuPeaks, bytes_moved, flops, gpu_model, peaks_for, sol_ns, tflops_at
from task.spec import Case

FORMATS = ("md", "html", "csv", "json")
#: The task's own reference GPU: its SOL column appears in every report.
TASK_GPU = "B200"
#: JSON report layout version (bump when keys change meaning).
JSON_VERSION = 1
#: CSV columns, one row per (run, case); units in the names.
CSV_COLUMNS = (
    "run_id", "variant", "mode", "data", "shape_set", "gpu_model", "device", "git_commit", "started_at",
    "complete", "case_index", "case_name", "spec", "status", "runs", "mean_us", "std_us", "err_us", "best_us",
    "worst_us", "ci95_low_us", "ci95_high_us", "tflops", "sol_here_us", "pct_of_sol_here", "sol_b200_us",
    "gflop", "mbytes", "flop_per_byte", "message",
)


class ReportError(ValueError):
    """A report cannot be made as asked (unknown format, no runs); the message says why."""


def task_peaks() -> GpuPeaks:
    """The task's reference GPU peaks (B200 at 1.5 GHz) from task.cost.GPU_PEAKS."""
    return next(p for p in GPU_PEAKS if p.model == TASK_GPU)


# ------------------------------------------------------------------------------------------ per-case figures
def shape_number(index: int) -> str:
    """How the shape at 0-based position ``index`` of a set is numbered wherever people read it: from 1."""
    return str(index + 1)


def shape_label(case: Case) -> str:
    """The case's name, or ``G=2 M=[..] N=[..] K=[..]`` when it has none."""
    if case.name:
        return case.name
    short = lambda xs: str(xs[0]) if len(set(xs)) == 1 else "[" + ",".join(map(str, xs)) + "]"  # noqa: E731
    return f"G={case.g} M={short(case.m)} N={short(case.n)} K={short(case.k)}"


def run_peaks(run: RunRecord) -> GpuPeaks | None:
    """Peaks of the GPU model the run was timed on; None for CPU-timed runs or unknown models."""
    if run.environment.timer == "cpu-monotonic":
        return None
    return peaks_for(run.environment.device)


@dataclass(frozen=True)
class CaseFigures:
    """Derived numbers for one case of one run. Times in ns; ``tflops`` TFLOP/s; ``pct_sol_here`` percent of
    the run's GPU model's speed of light (None when unknown or not measured); ``ci`` the 95 % interval of the
    mean (ns)."""

    index: int
    result: CaseResult
    label: str
    ci: Interval | None
    tflops: float | None
    sol_here_ns: float | None
    pct_sol_here: float | None
    sol_task_ns: float
    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        """FLOP per byte moved once."""
        return self.flops / self.bytes


def case_figures(run: RunRecord) -> list[CaseFigures]:
    """Per-case derived figures (TFLOP/s, SOL, interval) for every case of ``run``, in order."""
    peaks = run_peaks(run)
    out = []
    for i, r in enumerate(run.cases):
        s = r.stats
        timed = s is not None and s.mean_ns > 0
        sol_here = sol_ns(r.case, peaks) if peaks else None
        out.append(CaseFigures(
            i, r, shape_label(r.case),
            mean_ci(s) if timed else None,
            tflops_at(r.case, s.mean_ns) if timed else None,
            sol_here,
            100.0 * sol_here / s.mean_ns if timed and sol_here else None,
            sol_ns(r.case, task_peaks()),
            flops(r.case), bytes_moved(r.case)))
    return out


def run_geomean_ci(run: RunRecord) -> Interval | None:
    """95 % interval (ns) on the run's geomean of per-case means, when the run is complete and every case passed
    with timings; else None (a geomean over part of a shape set is not comparable)."""
    if not run.complete or not run.cases or not all(c.passed and c.stats and c.stats.mean_ns > 0
                                                        for c in run.cases):
        return None
    return geomean_ci([c.stats for c in run.cases])


def run_status(run: RunRecord) -> str:
    """``passed``, ``skipped`` (every case, e.g. a GPU the variant cannot use), ``passed (s of n skipped)``,
    ``incomplete (n cases recorded[, k not passed])`` or ``failed (k of n cases[, s skipped])``."""
    n = len(run.cases)
    skipped = sum(1 for c in run.cases if c.status is Status.SKIPPED)
    failed = sum(1 for c in run.cases if not c.passed) - skipped
    if not run.complete:
        return (f"incomplete ({n} case{'s' if n != 1 else ''} recorded"
                + (f", {failed + skipped} not passed)" if failed + skipped else ")"))
    if failed:
        return f"failed ({failed} of {n} cases" + (f", {skipped} skipped)" if skipped else ")")
    if skipped == n and n:
        return "skipped"
    return f"passed ({skipped} of {n} skipped)" if skipped else "passed"


def run_labels(runs: Sequence[RunRecord]) -> list[str]:
    """A short label per run: the variant name, with the run id's start when a variant appears twice."""
    names = [r.submission.name for r in runs]
    return [n if names.count(n) == 1 else f"{n} ({r.run_id[:15]})" for n, r in zip(names, runs)]


# ------------------------------------------------------------------------------------------------ boards
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
    """Runs that can be ranked together: same GPU model, shape set (same case list), data mode and mode."""

    gpu_model: str
    shape_set: str
    data: str
    mode: str
    cases: tuple[Case, ...]
    entries: tuple[BoardEntry, ...]
    peaks: GpuPeaks | None
    cases_digest: str

    @property
    def title(self) -> str:
        return f"{self.shape_set} on {self.gpu_model} ({self.mode}, {self.data} data)"


def _rankable(run: RunRecord) -> bool:
    return run.passed and bool(run.cases) and all(c.stats and c.stats.mean_ns > 0 for c in run.cases)


def leaderboards(runs: Iterable[RunRecord]) -> list[Board]:
    """Group rankable runs (complete, every case passed and timed) by GPU model, shape set, case list, data and
    mode; keep each variant's latest such run (by ``started_at``); rank variants by geomean with ties
    (harness.results.ranking.rank_with_ties). Boards sorted by GPU model, shape set, data, mode."""
    groups: dict[tuple, dict[str, RunRecord]] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        if not _rankable(run):
            continue
        sig = tuple(c.case.text() for c in run.cases)
        key = (gpu_model(run.environment.device), run.shape_set, run.data, run.mode, sig)
        groups.setdefault(key, {})[run.submission.name] = run
    boards = []
    for (model, shape_set, data, mode, sig), latest in groups.items():
        intervals = {v: geomean_ci([c.stats for c in r.cases]) for v, r in latest.items()}
        any_run = next(iter(latest.values()))
        peaks = run_peaks(any_run)
        entries = []
        for ranked in rank_with_ties(intervals):
            run = latest[ranked.name]
            pct = None
            if peaks:
                pct = 100.0 * geomean([sol_ns(c.case, peaks) for c in run.cases]) / ranked.interval.estimate
            entries.append(BoardEntry(ranked.rank, ranked.tied_with, ranked.name, run, ranked.interval, pct))
        boards.append(Board(model, shape_set, data, mode, tuple(c.case for c in any_run.cases), tuple(entries),
                            peaks, hashlib.sha256("\n".join(sig).encode()).hexdigest()[:8]))
    boards.sort(key=lambda b: (b.gpu_model, b.shape_set, b.data, b.mode, b.cases_digest))
    return boards


def rank_text(entry: BoardEntry, board: Board) -> str:
    """``1``, or ``=1`` when another entry shares the rank."""
    shared = sum(1 for e in board.entries if e.rank == entry.rank) > 1
    return f"={entry.rank}" if shared else str(entry.rank)


# ------------------------------------------------------------------------------------------------ numbers
def short_commit(commit: str) -> str:
    """The first 10 hex digits of a commit, keeping a ``-dirty`` mark (harness.parent.runner.git_commit)."""
    return commit[:10] + ("-dirty" if commit.endswith("-dirty") else "")


def fmt_us(ns: float | None) -> str:
    """ns -> a us string with 3-4 significant digits (``""`` for None)."""
    if ns is None or not math.isfinite(ns):
        return "" if ns is None else "inf"
    us = ns / 1e3
    if us >= 1000:
        return f"{us:.0f}"
    if us >= 100:
        return f"{us:.1f}"
    if us >= 10:
        return f"{us:.2f}"
    return f"{us:.3f}"


def fmt_tflops(x: float | None) -> str:
    """TFLOP/s with one decimal, or three significant digits below 1 (CPU rates are fractions of one, and
    ``0.0`` would read as nothing); ``""`` for None."""
    if x is None:
        return ""
    return f"{x:.1f}" if x >= 1 else f"{x:.3g}"


def fmt_pct(x: float | None) -> str:
    """A percentage (of SOL) with one decimal, or two significant digits below 1 (not ``0.0``); ``""`` for
    None."""
    if x is None:
        return ""
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def fmt_interval_us(iv: Interval | None) -> str:
    """``[low, high]`` in us, or ``unbounded (1 sample)``."""
    if iv is None:
        return ""
    if not math.isfinite(iv.high):
        return "unbounded (1 sample)"
    return f"[{fmt_us(iv.low)}, {fmt_us(iv.high)}]"


#: A 95 % interval wider than this, relative to its estimate (1.0: +-100 %), says only that there were too few
#: samples for their noise; it is shown as ``too few samples``, not as a percentage.
MAX_SHOWN_REL_HALF_WIDTH = 1.0
TOO_FEW = "too few samples"


def fmt_pm(iv: Interval | None) -> str:
    """The interval's relative half-width, e.g. ``±0.42 %``; ``too few samples`` when it is unbounded (one
    sample) or wider than MAX_SHOWN_REL_HALF_WIDTH."""
    if iv is None:
        return ""
    if not math.isfinite(iv.high) or iv.rel_half_width > MAX_SHOWN_REL_HALF_WIDTH:
        return TOO_FEW
    pct = 100 * iv.rel_half_width
    return f"±{pct:.2f} %" if pct < 1 else f"±{pct:.1f} %" if pct < 10 else f"±{pct:.0f} %"


def fmt_change(c: Comparison) -> str:
    """A run-over-run change in percent with its 95 % half-width, e.g. ``-20.0 % ±0.4``; the half-width is
    ``too few samples`` past MAX_SHOWN_REL_HALF_WIDTH."""
    text = f"{100 * (c.ratio - 1):+.1f} %"
    if not math.isfinite(c.high):
        return f"{text} ({TOO_FEW})"
    half = max(c.high - c.ratio, c.ratio - c.low)
    return f"{text} ({TOO_FEW})" if half / c.ratio > MAX_SHOWN_REL_HALF_WIDTH else f"{text} ±{100 * half:.1f}"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


# --------------------------------------------------------------------------------------- document model
@dataclass
class Cell:
    """A table cell with an optional style class (html: ``pass``/``fail``/``warn``/``muted``)."""

    text: str
    cls: str = ""


CellLike = Union[str, Cell]


@dataclass
class Table:
    columns: list[str]
    rows: list[list[CellLike]]
    numeric: set[int] = field(default_factory=set)   # right-aligned column indices
    caption: str = ""


@dataclass
class Image:
    png: bytes
    alt: str


@dataclass
class Para:
    text: str
    cls: str = ""


@dataclass
class Details:
    summary: str
    body: str


@dataclass
class Section:
    title: str
    level: int
    items: list = field(default_factory=list)


def _status_cell(status: Status) -> Cell:
    return Cell(status.value, "pass" if status is Status.PASS else "warn" if status is Status.SKIPPED else "fail")


def device_text(env: Environment) -> str:
    """The device once: ``NVIDIA H200 (sm_90, driver 580.159)``, or ``CPU (x86_64)`` when there is no GPU."""
    known = [x for x in (env.compute_capability, f"driver {env.driver}" if env.driver != "none" else "")
             if x and x != "none"]
    return f"{env.device} ({', '.join(known)})" if known else env.device


def timer_text(env: Environment) -> str:
    """How the run's times were taken, in words: ``CUDA events`` or ``a monotonic CPU clock``."""
    return "CUDA events" if env.timer == "cuda-events" else "a monotonic CPU clock"


def _env_text(run: RunRecord) -> str:
    e = run.environment
    return (f"{device_text(e)}, torch {e.torch}, triton {e.triton}, CUTLASS DSL {e.cutlass_dsl}, "
            f"Python {e.python}, host {e.hostname}, times from {timer_text(e)}")


def _runs_table(runs: Sequence[RunRecord], labels: Sequence[str]) -> Table:
    rows = []
    for run, label in zip(runs, labels):
        iv = run_geomean_ci(run)
        status = run_status(run)
        rows.append([label, Cell(run.run_id, "id"), run.mode, run.data, run.shape_set,
                     gpu_model(run.environment.device),
                     short_commit(run.git_commit), run.started_at.replace("T", " ")[:19],
                     Cell(status, "pass" if status == "passed" else "fail"),
                     fmt_us(run.geomean_ns), fmt_interval_us(iv)])
    return Table(["variant", "run", "mode", "data", "shapes", "GPU", "commit", "started (UTC)", "result",
                  "geomean us", "95% CI us"], rows, numeric={9, 10})


def _case_table(run: RunRecord) -> Table:
    peaks = run_peaks(run)
    figs = case_figures(run)
    cols = ["#", "shape", "status", "runs", "mean us", "std us", "95% CI", "best us", "TFLOP/s"]
    if peaks:
        cols += [f"SOL {peaks.model} us", f"% SOL {peaks.model}"]
    cols.append(f"SOL {TASK_GPU} us (task)")
    messages = any(f.result.message for f in figs)
    if messages:
        cols.append("message")
    rows = []
    for f in figs:
        s = f.result.stats
        row: list[CellLike] = [shape_number(f.index), f.label, _status_cell(f.result.status),
                               str(s.runs) if s else "", fmt_us(s.mean_ns) if s else "",
                               fmt_us(s.std_ns) if s else "", fmt_pm(f.ci), fmt_us(s.best_ns) if s else "",
                               fmt_tflops(f.tflops)]
        if peaks:
            row += [fmt_us(f.sol_here_ns), fmt_pct(f.pct_sol_here)]
        first = f.result.message.splitlines()[0] if f.result.message else ""
        row.append(fmt_us(f.sol_task_ns))
        if messages:
            row.append(Cell(first[:160] + ("..." if len(first) > 160 else ""), "muted"))
        rows.append(row)
    numeric = {0, 3, 4, 5, 6, 7, 8} | ({9, 10, 11} if peaks else {9})
    iv = run_geomean_ci(run)
    caption = ""
    if run.geomean_ns is not None:
        caption = (f"geomean of per-shape means over {plural(len(run.cases), 'shape')}: {fmt_us(run.geomean_ns)} us, "
                   f"95% CI {fmt_interval_us(iv)} us")
        if peaks:
            sol_g = geomean([sol_ns(c.case, peaks) for c in run.cases])
            caption += f"; {fmt_pct(100 * sol_g / run.geomean_ns)} % of {peaks.model} SOL (geomean)"
    return Table(cols, rows, numeric, caption)


#: Under every ranking: how ranks and ties are decided.
RANK_NOTE = "rank = 1 + number of variants detectably faster; overlapping 95% intervals are ties (shown =N)"


def _board_table(board: Board, ids: bool = True) -> Table:
    """The ranking: one row per variant (rank, geomean, interval, % SOL, ties, and with ``ids`` run and commit)."""
    cols = ["rank", "variant", "geomean us", "95% CI us"] + ([f"% SOL {board.peaks.model}"] if board.peaks else [])
    cols += ["tied with"] + (["run", "commit"] if ids else [])
    rows = []
    for e in board.entries:
        row: list[CellLike] = [rank_text(e, board), e.variant, fmt_us(e.interval.estimate),
                               fmt_interval_us(e.interval)]
        if board.peaks:
            row.append(fmt_pct(e.pct_sol))
        row.append(Cell(", ".join(e.tied_with) or "-", "muted"))
        if ids:
            row += [Cell(e.run.run_id, "id"), Cell(short_commit(e.run.git_commit), "id")]
        rows.append(row)
    return Table(cols, rows, {0, 2, 3} | ({4} if board.peaks else set()), RANK_NOTE)


def _board_shapes_table(board: Board) -> Table:
    """Per-shape mean times (us) on a board: shapes as rows, variants (in rank order) as columns."""
    rows = [[shape_number(i), shape_label(case)] + [fmt_us(e.run.cases[i].stats.mean_ns) for e in board.entries]
            for i, case in enumerate(board.cases)]
    return Table(["#", "shape"] + [f"{e.variant} us" for e in board.entries], rows,
                 {0} | set(range(2, 2 + len(board.entries))))


def _across_table(runs: Sequence[RunRecord], labels: Sequence[str]) -> Table:
    specs: dict[str, Case] = {}
    for run in runs:
        for c in run.cases:
            specs.setdefault(c.case.text(), c.case)
    rows = []
    for i, (spec, case) in enumerate(specs.items()):
        row: list[CellLike] = [shape_number(i), shape_label(case)]
        for run in runs:
            r = next((c for c in run.cases if c.case.text() == spec), None)
            if r is None:
                row.append(Cell("-", "muted"))
            elif r.passed and r.stats:
                row.append(f"{fmt_us(r.stats.mean_ns)} {fmt_pm(mean_ci(r.stats))}")
            else:
                row.append(_status_cell(r.status))
        rows.append(row)
    rows.append(["", Cell("geomean", "strong")] + [fmt_us(r.geomean_ns) for r in runs])
    return Table(["#", "shape"] + [f"{lb} mean us" for lb in labels], rows, {0} | set(range(2, len(runs) + 2)))


def _sol_sections(cases: Sequence[Case]) -> list:
    peak_rows = []
    for p in GPU_PEAKS:
        peak_rows.append([p.model, f"{p.exact_tflops:g}", f"{p.floor_tflops:g}", f"{p.hbm_tbps:g}",
                          f"{p.exact_tflops / p.hbm_tbps:.0f}", Cell(p.source, "muted")])
    items: list = [
        Para("Speed of light (SOL) = max(FLOPs / MMA peak, bytes / HBM bandwidth), bytes counted once: fp4 A and "
             "B, fp8 scales, fp16 C. The exact-MMA peak is the fastest tensor-core path that computes this "
             "problem exactly (FP4 on Blackwell; bf16/fp16 after dequantisation on Hopper, which has no FP4)."),
        Table(["GPU", "exact MMA TFLOP/s", "fastest MMA TFLOP/s", "HBM TB/s", "ridge FLOP/B", "source"],
              peak_rows, {1, 2, 3, 4}),
    ]
    rows = []
    for c in cases:
        f, b = flops(c), bytes_moved(c)
        row: list[CellLike] = [shape_label(c), f"{f / 1e9:.2f}", f"{b / 1e6:.2f}", f"{f / b:.0f}"]
        for p in GPU_PEAKS:
            compute, memory = f / (p.exact_tflops * 1e12), b / (p.hbm_tbps * 1e12)
            row.append(f"{fmt_us(sol_ns(c, p))} ({'compute' if compute >= memory else 'memory'})")
        rows.append(row)
    items.append(Table(["shape", "GFLOP", "MB moved", "FLOP/B"] + [f"SOL {p.model} us (bound)" for p in GPU_PEAKS],
                       rows, set(range(1, 4 + len(GPU_PEAKS)))))
    return items


def _pictures(runs: Sequence[RunRecord], labels: Sequence[str]) -> list:
    if not plots.available():
        return [Para("matplotlib is not installed: no pictures (pip install matplotlib).", "warn")]
    specs: dict[str, Case] = {}
    for run in runs:
        for c in run.cases:
            specs.setdefault(c.case.text(), c.case)
    timed = [(run, lb) for run, lb in zip(runs, labels) if any(c.stats for c in run.cases)]
    items: list = []
    if timed and specs:
        bars = []
        for spec in specs:
            row = []
            for run, _ in timed:
                r = next((c for c in run.cases if c.case.text() == spec), None)
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
            sol_us = [sol_ns(c, peaks) / 1e3 for c in specs.values()]
            sol_label = f"{peaks.model} SOL"
        png = plots.shape_bars_png([shape_label(c) for c in specs.values()], [lb for _, lb in timed], bars,
                                   sol_us, sol_label)
        items.append(Image(png, "Per-shape mean time for each run, with 95% confidence intervals"))
    on_gpu = [(run, lb) for run, lb in timed if run_peaks(run)]
    on_cpu = [lb for run, lb in timed if not run_peaks(run)]
    if on_cpu:
        items.append(Para(f"Not on the roofline: {', '.join(on_cpu)}, timed on the CPU (or a GPU without known "
                          f"peaks), which has no roof to draw against."))
    if not on_gpu:
        return items
    points = [plots.RoofPoint(lb, f.label, f.intensity, f.tflops) for run, lb in on_gpu for f in case_figures(run)
              if f.result.passed and f.tflops]
    models = {run_peaks(run).model for run, _ in on_gpu}
    roofs = [p for p in GPU_PEAKS if p.model in models]
    shape_ai = [(shape_label(c), flops(c) / bytes_moved(c)) for c in specs.values()]
    items.append(Image(plots.roofline_png(roofs, points, shape_ai),
                       f"Roofline of {', '.join(p.model for p in roofs)}, the GPU the runs were timed on, with "
                       f"each shape's arithmetic intensity and the measured TFLOP/s"))
    return items


def _document(runs: Sequence[RunRecord], pictures: bool) -> list[Section]:
    labels = run_labels(runs)
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    secs = [Section("fp4bench report", 1, [
        Para(f"{len(runs)} run{'s' if len(runs) != 1 else ''}, generated {now}. Times are mean time per call in "
             f"microseconds (us); 95% CI from the per-shape standard error with a t quantile "
             f"(harness/results/ranking.py)."),
        _runs_table(runs, labels)])]
    if len(runs) > 1:
        across = Section("Across runs", 2, [_across_table(runs, labels)])
        boards = leaderboards(runs)
        for board in boards:
            if len(board.entries) > 1:
                across.items += [Para(f"Ranking: {board.title}", "strong"), _board_table(board, ids=False)]
        secs.append(across)
    if pictures:
        secs.append(Section("Pictures", 2, _pictures(runs, labels)))
    for run, label in zip(runs, labels):
        sec = Section(f"{label}: run {run.run_id}", 2)
        if not run.complete:
            sec.items.append(Para("INCOMPLETE: this run never finished (killed or interrupted); the cases below "
                                  "are what it measured before it stopped.", "warn"))
        sec.items.append(Para(f"{run.mode} mode, {run.data} data, shape set {run.shape_set}, secret seed "
                              f"{'none' if run.secret_seed is None else run.secret_seed}, commit "
                              f"{run.git_commit or 'unknown'}, started {run.started_at}."))
        sec.items.append(Para(f"Submission {run.submission.path} (sha256 {run.submission.sha256[:16]}...). "
                              f"Environment: {_env_text(run)}."))
        sec.items.append(_case_table(run))
        for r in run.cases:
            if r.message and (not r.passed or "\n" in r.message):
                sec.items.append(Details(f"{shape_label(r.case)}: {r.status.value}", r.message))
        secs.append(sec)
    specs: dict[str, Case] = {}
    for run in runs:
        for c in run.cases:
            specs.setdefault(c.case.text(), c.case)
    secs.append(Section("Speed of light by GPU model", 2, _sol_sections(list(specs.values()))))
    return secs


# ------------------------------------------------------------------------------------------- renderers
def _text(c: CellLike) -> str:
    return c.text if isinstance(c, Cell) else c


def _md_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _render_md(secs: list[Section]) -> str:
    out: list[str] = []
    for sec in secs:
        out.append("#" * sec.level + " " + sec.title)
        out.append("")
        for item in sec.items:
            if isinstance(item, Para):
                out += [f"**{item.text}**" if item.cls in ("warn", "strong") else item.text, ""]
            elif isinstance(item, Table):
                out.append("| " + " | ".join(_md_escape(c) for c in item.columns) + " |")
                out.append("| " + " | ".join("---:" if i in item.numeric else "---"
                                             for i in range(len(item.columns))) + " |")
                for row in item.rows:
                    out.append("| " + " | ".join(_md_escape(_text(c)) for c in row) + " |")
                out.append("")
                if item.caption:
                    out += [f"_{item.caption}_", ""]
            elif isinstance(item, Details):
                out += [f"<details><summary>{html.escape(item.summary)}</summary>", "", "```",
                        item.body.replace("```", "'''"), "```", "</details>", ""]
            elif isinstance(item, Image):
                out += [f"_(picture omitted in markdown: {item.alt}; use --format html)_", ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px auto;
       max-width: 1320px; padding: 0 16px; color: #1d1d1f; line-height: 1.45; font-size: 15px; }
h1 { font-size: 26px; margin-bottom: 4px; } h2 { font-size: 20px; margin-top: 36px; border-bottom: 2px solid #ddd;
padding-bottom: 4px; }
p { margin: 8px 0; } p.warn { background: #fff3cd; border-left: 4px solid #e0a800; padding: 8px 12px; }
p.strong { font-weight: 600; margin-top: 18px; }
.tablewrap { overflow-x: auto; margin: 10px 0 4px; }
table { border-collapse: collapse; font-size: 13.5px; }
th, td { border: 1px solid #d0d0d5; padding: 5px 9px; vertical-align: top; }
th { background: #f0f1f4; text-align: left; font-weight: 600; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fafafb; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.pass { color: #146c2e; font-weight: 600; } td.fail { color: #b00020; font-weight: 600; }
td.warn { color: #8a6100; font-weight: 600; } td.muted { color: #666; font-size: 12.5px; }
td.strong { font-weight: 600; } td.id { white-space: nowrap; font-family: ui-monospace, "DejaVu Sans Mono", monospace;
font-size: 12.5px; }
.caption { color: #444; font-size: 13px; margin: 2px 0 12px; }
img { max-width: 100%; height: auto; border: 1px solid #e3e3e8; margin: 10px 0; background: white; }
details { margin: 6px 0; } summary { cursor: pointer; color: #b00020; }
pre { background: #f6f6f8; padding: 10px; overflow-x: auto; font-size: 12.5px; }
"""


def _render_html(secs: list[Section], title: str) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>"]
    for sec in secs:
        out.append(f"<h{sec.level}>{e(sec.title)}</h{sec.level}>")
        for item in sec.items:
            if isinstance(item, Para):
                out.append(f'<p class="{e(item.cls)}">{e(item.text)}</p>' if item.cls else f"<p>{e(item.text)}</p>")
            elif isinstance(item, Table):
                out.append('<div class="tablewrap"><table><thead><tr>')
                out.append("".join(f'<th class="num">{e(c)}</th>' if i in item.numeric else f"<th>{e(c)}</th>"
                                   for i, c in enumerate(item.columns)))
                out.append("</tr></thead><tbody>")
                for row in item.rows:
                    cells = []
                    for i, c in enumerate(row):
                        cls = " ".join(x for x in ("num" if i in item.numeric else "",
                                                   c.cls if isinstance(c, Cell) else "") if x)
                        cells.append(f'<td class="{cls}">{e(_text(c))}</td>' if cls else f"<td>{e(_text(c))}</td>")
                    out.append("<tr>" + "".join(cells) + "</tr>")
                out.append("</tbody></table></div>")
                if item.caption:
                    out.append(f'<p class="caption">{e(item.caption)}</p>')
            elif isinstance(item, Details):
                out.append(f"<details><summary>{e(item.summary)}</summary><pre>{e(item.body)}</pre></details>")
            elif isinstance(item, Image):
                data = base64.b64encode(item.png).decode("ascii")
                out.append(f'<img alt="{e(item.alt)}" src="data:image/png;base64,{data}">')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _csv_rows(runs: Sequence[RunRecord]) -> list[dict]:
    rows = []
    for run in runs:
        for f in case_figures(run):
            s = f.result.stats
            rows.append({
                "run_id": run.run_id, "variant": run.submission.name, "mode": run.mode, "data": run.data,
                "shape_set": run.shape_set, "gpu_model": gpu_model(run.environment.device),
                "device": run.environment.device, "git_commit": run.git_commit, "started_at": run.started_at,
                "complete": run.complete, "case_index": f.index, "case_name": f.result.case.name,
                "spec": f.result.case.text(), "status": f.result.status.value,
                "runs": s.runs if s else "", "mean_us": s.mean_ns / 1e3 if s else "",
                "std_us": s.std_ns / 1e3 if s else "", "err_us": s.err_ns / 1e3 if s else "",
                "best_us": s.best_ns / 1e3 if s else "", "worst_us": s.worst_ns / 1e3 if s else "",
                "ci95_low_us": f.ci.low / 1e3 if f.ci else "",
                "ci95_high_us": f.ci.high / 1e3 if f.ci and math.isfinite(f.ci.high) else "",
                "tflops": f.tflops if f.tflops is not None else "",
                "sol_here_us": f.sol_here_ns / 1e3 if f.sol_here_ns else "",
                "pct_of_sol_here": f.pct_sol_here if f.pct_sol_here is not None else "",
                "sol_b200_us": f.sol_task_ns / 1e3, "gflop": f.flops / 1e9, "mbytes": f.bytes / 1e6,
                "flop_per_byte": f.intensity, "message": f.result.message,
            })
    return rows


def _render_csv(runs: Sequence[RunRecord]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(_csv_rows(runs))
    return buf.getvalue()


def _render_json(runs: Sequence[RunRecord]) -> str:
    figures = []
    for run in runs:
        iv = run_geomean_ci(run)
        figures.append({
            "run_id": run.run_id,
            "gpu_model": gpu_model(run.environment.device),
            "status": run_status(run),
            "geomean_ns": run.geomean_ns,
            "geomean_ci95_ns": [_finite(iv.low), _finite(iv.high)] if iv else None,
            "cases": [{
                "index": f.index, "label": f.label, "tflops": f.tflops,
                "mean_ci95_ns": [_finite(f.ci.low), _finite(f.ci.high)] if f.ci else None,
                "sol_here_ns": f.sol_here_ns, "pct_of_sol_here": f.pct_sol_here, "sol_b200_ns": f.sol_task_ns,
                "flops": f.flops, "bytes": f.bytes, "flop_per_byte": f.intensity,
            } for f in case_figures(run)],
        })
    doc = {
        "format": "fp4bench-report", "version": JSON_VERSION,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": [run.to_dict() for run in runs],
        "figures": figures,
        "gpu_peaks": [dataclasses.asdict(p) for p in GPU_PEAKS],
    }
    return json.dumps(doc, indent=2, allow_nan=False)


def report(runs: RunRecord | Sequence[RunRecord], fmt: str = "md") -> str:
    """A report on one or more runs as text in ``fmt``:

    - ``md``: sections with per-shape tables (mean/std/best us, 95 % CI, TFLOP/s, % SOL of the run's GPU model,
      the task's B200 SOL), a cross-run table and ranking when several runs are given, the SOL analysis;
    - ``html``: the same plus per-shape bar charts with error bars and a roofline, embedded as base64 PNG;
    - ``csv``: one row per (run, case), columns ``CSV_COLUMNS`` (us, TFLOP/s, percent);
    - ``json``: ``{"format", "version", "runs": [RunRecord.to_dict()], "figures", "gpu_peaks"}``; each entry
      of ``runs`` reads back with ``harness.results.record.run_from_dict``.

    Raises ReportError for an unknown format or no runs."""
    runs = [runs] if isinstance(runs, RunRecord) else list(runs)
    if not runs:
        raise ReportError("nothing to report: no runs given")
    if fmt not in FORMATS:
        raise ReportError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "csv":
        return _render_csv(runs)
    if fmt == "json":
        return _render_json(runs)
    secs = _document(runs, pictures=fmt == "html")
    if fmt == "md":
        return _render_md(secs)
    labels = run_labels(runs)
    title = "fp4bench: " + ", ".join(labels[:4]) + (" ..." if len(labels) > 4 else "")
    return _render_html(secs, title)


def leaderboard_report(boards: Sequence[Board], fmt: str = "md") -> str:
    """The ranked boards as ``md``, ``html``, ``csv`` or ``json`` text (the ``leaderboard`` command's
    --format). Raises ReportError for an unknown format."""
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["gpu_model", "shape_set", "data", "mode", "rank", "tied", "variant", "geomean_us",
                    "ci95_low_us", "ci95_high_us", "pct_of_sol", "run_id", "git_commit"])
        for b in boards:
            for e in b.entries:
                w.writerow([b.gpu_model, b.shape_set, b.data, b.mode, e.rank, ";".join(e.tied_with), e.variant,
                            e.interval.estimate / 1e3, e.interval.low / 1e3,
                            e.interval.high / 1e3 if math.isfinite(e.interval.high) else "",
                            "" if e.pct_sol is None else e.pct_sol, e.run.run_id, e.run.git_commit])
        return buf.getvalue()
    if fmt == "json":
        return json.dumps([{
            "gpu_model": b.gpu_model, "shape_set": b.shape_set, "data": b.data, "mode": b.mode,
            "cases": [c.text() for c in b.cases],
            "entries": [{"rank": e.rank, "tied_with": list(e.tied_with), "variant": e.variant,
                         "geomean_ns": e.interval.estimate,
                         "ci95_ns": [_finite(e.interval.low), _finite(e.interval.high)],
                         "pct_of_sol": e.pct_sol, "run_id": e.run.run_id, "git_commit": e.run.git_commit,
                         "mean_ns": [c.stats.mean_ns for c in e.run.cases]} for e in b.entries],
        } for b in boards], indent=2, allow_nan=False)
    if fmt not in FORMATS:
        raise ReportError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    secs = [Section("fp4bench leaderboard", 1, [Para(
        "Each variant's latest passing run per GPU model and shape set, ranked by the geometric mean of per-shape "
        "mean times (us); 95% CI by the log-space delta method; overlapping intervals are ties.")])]
    if not boards:
        secs[0].items.append(Para("No passing runs to rank yet.", "warn"))
    for b in boards:
        secs.append(Section(b.title, 2, [_board_table(b), _board_shapes_table(b)]))
    return _render_md(secs) if fmt == "md" else _render_html(secs, "fp4bench leaderboard")


# ------------------------------------------------------------------------------------------------ compare


#: Under every comparison table: what A/B is and why it can differ from the ratio of the two means shown.
COMPARE_NOTE = ("A/B = A's time / B's time (below 1: A is faster). Per shape it is the geometric mean of the "
                "per-pair ratios (pair i of A and B timed back to back on identical inputs), so it can differ from "
                "the ratio of the two means; the geomean row divides the geomeans of the shapes' means.")


def verdict_text(c: Comparison, a_name: str = "A") -> str:
    """The verdict in words: ``A is 1.63x faster`` (B's time / A's time), ``A is 1.22x slower`` (A's time /
    B's time), or ``no detectable difference`` when the interval holds 1."""
    if c.verdict is Verdict.FASTER:
        return f"{a_name} is {c.speedup:.3g}x faster"
    if c.verdict is Verdict.SLOWER:
        return f"{a_name} is {c.ratio:.3g}x slower"
    return "no detectable difference"


def ratio_ci_text(c: Comparison) -> str:
    """The ratio's confidence interval, ``[0.4982, 0.5019]``, or ``unbounded``."""
    return f"[{c.low:.4g}, {c.high:.4g}]" if math.isfinite(c.high) else "unbounded"


def side_cell(status: str, ns: float | None) -> str:
    """A side's mean time (us) when it passed (``-`` without samples), else its status (``fail``, ...)."""
    return (fmt_us(ns) or "-") if status == Status.PASS.value else status


def compare_items(rows: Sequence[CompareRow], overall: Comparison | None, overall_label: str
                  ) -> list[tuple[str, str, Comparison | NoRatio]]:
    """(number, label, comparison) per row of a comparison table: shapes numbered from 1, then the overall
    row numbered ``all``."""
    out = [(shape_number(i), shape_label(s) if isinstance(s, Case) else str(s), c) for i, (s, c) in enumerate(rows)]
    if overall is not None:
        out.append(("all", overall_label, overall))
    return out


def first_line(text: str, width: int = 160) -> str:
    """The first line of ``text``, cut at ``width`` characters with ``...``."""
    first = text.splitlines()[0] if text else ""
    return first[:width] + ("..." if len(first) > width else "")


def _compare_record(label: str, c: Comparison | NoRatio) -> dict:
    if isinstance(c, NoRatio):
        return {"shape": label, "a_mean_us": None if c.a_ns is None else c.a_ns / 1e3,
                "b_mean_us": None if c.b_ns is None else c.b_ns / 1e3, "ratio": None, "ci_low": None,
                "ci_high": None, "level": None, "dof": None, "verdict": None, "method": None,
                "a_status": c.a_status, "b_status": c.b_status, "note": c.note}
    return {"shape": label, "a_mean_us": c.a_ns / 1e3, "b_mean_us": c.b_ns / 1e3, "ratio": c.ratio,
            "ci_low": c.low, "ci_high": _finite(c.high), "level": c.level,
            "dof": c.dof if math.isfinite(c.dof) else None, "verdict": c.verdict.value, "method": c.method,
            "a_status": Status.PASS.value, "b_status": Status.PASS.value, "note": ""}


def compare_table(a_name: str, b_name: str, rows: Sequence[CompareRow], overall: Comparison | None = None,
                  fmt: str = "text", overall_label: str = "geomean", extra: dict | None = None) -> str:
    """An A-versus-B comparison as text: ``text`` (the rich table, plain characters, 120 columns), ``md``,
    ``csv`` (columns shape, a_mean_us, b_mean_us, ratio, ci_low, ci_high, level, dof, verdict, method,
    a_status, b_status, note; a NoRatio row leaves the ratio columns empty) or ``json`` (``{"a", "b", "rows":
    [those objects, null for empty]}`` plus the keys of ``extra``). ``rows``: (case or label, Comparison from
    harness.results.ranking.compare_samples, or NoRatio); ``overall``: the whole-set Comparison, shown last as
    ``overall_label``; the text form is harness.report.console.compare_rich_table at 120 columns.

    Raises ReportError for an unknown format."""
    items = compare_items(rows, overall, overall_label)
    if fmt == "text":
        from harness.report.console import compare_rich_table
        from harness.report.stacked import render_text

        return render_text(compare_rich_table(a_name, b_name, rows, overall, overall_label=overall_label), 120)
    records = [_compare_record(label, c) for _, label, c in items]
    if fmt == "json":
        return json.dumps({"a": a_name, "b": b_name, **(extra or {}), "rows": records}, indent=2,
                          allow_nan=False)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(records[0]) if records else ["shape"], lineterminator="\n")
        w.writeheader()
        w.writerows(records)
        return buf.getvalue()
    if fmt == "md":
        body = []
        for number, label, c in items:
            if isinstance(c, NoRatio):
                body.append([number, label, side_cell(c.a_status, c.a_ns), side_cell(c.b_status, c.b_ns), "", "",
                             Cell(first_line(c.note), "fail")])
            else:
                body.append([number, label, fmt_us(c.a_ns), fmt_us(c.b_ns), f"{c.ratio:.4f}", ratio_ci_text(c),
                             verdict_text(c, a_name)])
        table = Table(["#", "shape", f"{a_name} us", f"{b_name} us", "A/B", "95% CI", "verdict"], body,
                      {0, 2, 3, 4, 5}, COMPARE_NOTE)
        return _render_md([Section(f"{a_name} (A) vs {b_name} (B)", 2, [table])])
    raise ReportError(f"unknown compare format {fmt!r}; expected text, md, csv or json")


# ------------------------------------------------------------------------------------------------ history
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
    from harness.results.ranking import compare_geomeans

    last: dict[tuple, RunRecord] = {}
    out = []
    for run in sorted(runs, key=lambda r: r.started_at):
        iv = run_geomean_ci(run)
        key = (gpu_model(run.environment.device), run.shape_set, run.data, run.mode,
               tuple(c.case.text() for c in run.cases))
        prev, change = None, None
        if iv is not None and _rankable(run):
            prev = last.get(key)
            if prev is not None:
                change = compare_geomeans([c.stats for c in run.cases], [c.stats for c in prev.cases])
            last[key] = run
        out.append(HistoryRow(run, run_status(run), iv, prev.run_id if prev else None, change))
    return out
