"""Reports as data: CSV (one row per run and case, columns CSV_COLUMNS) and JSON (the whole records plus derived
figures), for runs and for leaderboards. Units are in the names (``_us``, ``_ns``, ``tflops``, ``pct_``)."""
from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import io
import json
import math
from typing import Sequence

from harness import plugs
from harness.report.boards import Board
from harness.report.figures import case_figures, finite, plug_of, run_geomean_ci, run_status
from harness.results.record import RunRecord
from harness.hardware import GPU_PEAKS, gpu_model

#: JSON report layout version (bump when keys change meaning).
JSON_VERSION = 1
#: CSV columns, one row per (run, case); units in the names.
CSV_COLUMNS = (
    "run_id", "variant", "problem", "mode", "data", "shape_set", "gpu_model", "device", "git_commit", "started_at",
    "complete", "case_index", "case_name", "spec", "status", "runs", "mean_us", "std_us", "err_us", "best_us",
    "worst_us", "ci95_low_us", "ci95_high_us", "tflops", "sol_here_us", "pct_of_sol_here", "sol_b200_us",
    "gflop", "mbytes", "flop_per_byte", "message",
)


def csv_rows(runs: Sequence[RunRecord]) -> list[dict]:
    """One dict per (run, case), keys CSV_COLUMNS: times in us, TFLOP/s, percent of SOL; "" where unknown."""
    rows = []
    for run in runs:
        for f in case_figures(run):
            s = f.result.stats
            rows.append({
                "run_id": run.run_id, "variant": run.submission.name, "problem": run.problem, "mode": run.mode,
                "data": run.data,
                "shape_set": run.shape_set, "gpu_model": gpu_model(run.environment.device),
                "device": run.environment.device, "git_commit": run.git_commit, "started_at": run.started_at,
                "complete": run.complete, "case_index": f.index, "case_name": f.result.case.name,
                "spec": plug_of(run).case_text(f.result.case), "status": f.result.status.value,
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


def render_csv(runs: Sequence[RunRecord]) -> str:
    """The runs as CSV text with a header row of CSV_COLUMNS."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(csv_rows(runs))
    return buf.getvalue()


def render_json(runs: Sequence[RunRecord]) -> str:
    """``{"format", "version", "generated_at", "runs": [RunRecord.to_dict()], "figures", "gpu_peaks"}`` as
    indented JSON; each entry of ``runs`` reads back with harness.results.record.run_from_dict."""
    figures = []
    for run in runs:
        iv = run_geomean_ci(run)
        figures.append({
            "run_id": run.run_id,
            "gpu_model": gpu_model(run.environment.device),
            "status": run_status(run),
            "geomean_ns": run.geomean_ns,
            "geomean_ci95_ns": [finite(iv.low), finite(iv.high)] if iv else None,
            "cases": [{
                "index": f.index, "label": f.label, "tflops": f.tflops,
                "mean_ci95_ns": [finite(f.ci.low), finite(f.ci.high)] if f.ci else None,
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


def leaderboard_csv(boards: Sequence[Board]) -> str:
    """One CSV row per board entry: the board's keys, rank, ties, variant, geomean and 95 % CI in us, % SOL, run."""
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


def leaderboard_json(boards: Sequence[Board]) -> str:
    """A JSON list of boards: their keys, cases, and entries (rank, ties, geomean and CI in ns, per-case means)."""
    return json.dumps([{
        "problem": b.problem, "gpu_model": b.gpu_model, "shape_set": b.shape_set, "data": b.data, "mode": b.mode,
        "cases": [plugs.get(b.problem).case_text(c) for c in b.cases],
        "entries": [{"rank": e.rank, "tied_with": list(e.tied_with), "variant": e.variant,
                     "geomean_ns": e.interval.estimate,
                     "ci95_ns": [finite(e.interval.low), finite(e.interval.high)],
                     "pct_of_sol": e.pct_sol, "run_id": e.run.run_id, "git_commit": e.run.git_commit,
                     "mean_ns": [c.stats.mean_ns for c in e.run.cases]} for e in b.entries],
    } for b in boards], indent=2, allow_nan=False)
