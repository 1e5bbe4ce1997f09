"""The tables of a report, as document.Tables: runs, one run's cases, rankings, shapes across runs, and the
speed-of-light analysis. Times in us (figures.fmt_us); shapes numbered from 1."""
from __future__ import annotations

from typing import Sequence

from harness.report.boards import RANK_NOTE, Board, rank_text
from harness.report.document import Cell, CellLike, Para, Table
from harness.report.figures import (
    TASK_GPU,
    case_figures,
    fmt_interval_us,
    fmt_pct,
    fmt_pm,
    fmt_tflops,
    fmt_us,
    plug_of,
    run_geomean_ci,
    run_peaks,
    run_status,
    shape_label,
    shape_number,
    short_commit,
    sol_ns,
)
from harness.results.ranking import mean_ci, plural
from harness.results.record import RunRecord, Status
from harness.results.stats import geomean
from harness import plugs
from harness.hardware import GPU_PEAKS, gpu_model
from harness.shapes import DEFAULT_PROBLEM


def status_cell(status: Status) -> Cell:
    """A case status as a cell styled pass (green), warn (skipped) or fail (red)."""
    return Cell(status.value, "pass" if status is Status.PASS else "warn" if status is Status.SKIPPED else "fail")


def runs_table(runs: Sequence[RunRecord], labels: Sequence[str]) -> Table:
    """One row per run: its label, id, problem, mode, data, shape set, GPU model, commit, start, result and
    geomean."""
    rows = []
    for run, label in zip(runs, labels):
        iv = run_geomean_ci(run)
        status = run_status(run)
        rows.append([label, Cell(run.run_id, "id"), run.problem, run.mode, run.data, run.shape_set,
                     gpu_model(run.environment.device),
                     short_commit(run.git_commit), run.started_at.replace("T", " ")[:19],
                     Cell(status, "pass" if status == "passed" else "fail"),
                     fmt_us(run.geomean_ns), fmt_interval_us(iv)])
    return Table(["variant", "run", "problem", "mode", "data", "shapes", "GPU", "commit", "started (UTC)", "result",
                  "geomean us", "95% CI us"], rows, numeric={10, 11})


def case_table(run: RunRecord) -> Table:
    """One row per case of ``run``: status, runs, mean/std/best us, the 95 % CI, TFLOP/s, SOL of the run's GPU
    model (CUDA-timed runs) and of the task's B200, and each case's message; the caption gives the geomean."""
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
        row: list[CellLike] = [shape_number(f.index), f.label, status_cell(f.result.status),
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
            sol_g = geomean([sol_ns(c.case, peaks, plug_of(run)) for c in run.cases])
            caption += f"; {fmt_pct(100 * sol_g / run.geomean_ns)} % of {peaks.model} SOL (geomean)"
    return Table(cols, rows, numeric, caption)


def board_table(board: Board, ids: bool = True) -> Table:
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


def board_shapes_table(board: Board) -> Table:
    """Per-shape mean times (us) on a board: shapes as rows, variants (in rank order) as columns."""
    plug = plugs.get(board.problem)
    rows = [[shape_number(i), shape_label(case, plug)] + [fmt_us(e.run.cases[i].stats.mean_ns) for e in board.entries]
            for i, case in enumerate(board.cases)]
    return Table(["#", "shape"] + [f"{e.variant} us" for e in board.entries], rows,
                 {0} | set(range(2, 2 + len(board.entries))))


def across_table(runs: Sequence[RunRecord], labels: Sequence[str]) -> Table:
    """Shapes as rows (every shape any run has), runs as columns: mean us with its interval, or the status; the
    last row is each run's geomean."""
    specs: dict[tuple, tuple] = {}  # (problem, official line) -> (case, plug)
    for run in runs:
        plug = plug_of(run)
        for c in run.cases:
            specs.setdefault((run.problem, plug.case_text(c.case)), (c.case, plug))
    rows = []
    for i, (key, (case, plug)) in enumerate(specs.items()):
        row: list[CellLike] = [shape_number(i), shape_label(case, plug)]
        for run in runs:
            r = next((c for c in run.cases if (run.problem, plug_of(run).case_text(c.case)) == key), None)
            if r is None:
                row.append(Cell("-", "muted"))
            elif r.passed and r.stats:
                row.append(f"{fmt_us(r.stats.mean_ns)} {fmt_pm(mean_ci(r.stats))}")
            else:
                row.append(status_cell(r.status))
        rows.append(row)
    rows.append(["", Cell("geomean", "strong")] + [fmt_us(r.geomean_ns) for r in runs])
    return Table(["#", "shape"] + [f"{lb} mean us" for lb in labels], rows, {0} | set(range(2, len(runs) + 2)))


def sol_items(cases: Sequence, plug=None) -> list:
    """What speed of light means here, the peaks of every known GPU model, and each case's FLOPs, bytes and
    SOL per GPU model (compute- or memory-bound), from ``plug`` (the cases' problem; None: nvfp4_group_gemm)."""
    plug = plug or plugs.get(DEFAULT_PROBLEM)
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
        f, b = plug.flops(c), plug.bytes_moved(c)
        row: list[CellLike] = [shape_label(c, plug), f"{f / 1e9:.2f}", f"{b / 1e6:.2f}", f"{f / b:.0f}"]
        for p in GPU_PEAKS:
            compute, memory = f / (p.exact_tflops * 1e12), b / (p.hbm_tbps * 1e12)
            row.append(f"{fmt_us(sol_ns(c, p, plug))} ({'compute' if compute >= memory else 'memory'})")
        rows.append(row)
    items.append(Table(["shape", "GFLOP", "MB moved", "FLOP/B"] + [f"SOL {p.model} us (bound)" for p in GPU_PEAKS],
                       rows, set(range(1, 4 + len(GPU_PEAKS)))))
    return items

