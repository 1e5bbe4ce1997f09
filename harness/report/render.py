"""Reports in every format, the entry points of the ``report`` and ``leaderboard`` commands.

``report(runs, fmt)`` reports on stored runs; ``leaderboard_report(boards, fmt)`` on boards from
harness.report.boards.leaderboards. Markdown, CSV and JSON are text only; HTML is one self-contained file with its
pictures embedded as base64 PNG (no external URL), so it opens offline. Units: harness.report.figures.
"""
from __future__ import annotations

from typing import Sequence

from harness.report.boards import Board
from harness.report.figures import run_labels
from harness.report.render_data import leaderboard_csv, leaderboard_json, render_csv, render_json
from harness.report.render_html import render_html
from harness.report.render_md import render_md
from harness.report.sections import leaderboard_sections, report_sections
from harness.results.record import RunRecord

FORMATS = ("md", "html", "csv", "json")


class ReportError(ValueError):
    """A report cannot be made as asked (unknown format, no runs); the message says why."""


def report(runs: RunRecord | Sequence[RunRecord], fmt: str = "md") -> str:
    """A report on one or more runs as text in ``fmt``:

    - ``md``: sections with per-shape tables (mean/std/best us, 95 % CI, TFLOP/s, % SOL of the run's GPU model,
      the task's B200 SOL), a cross-run table and ranking when several runs are given, the SOL analysis;
    - ``html``: the same plus per-shape bar charts with error bars and a roofline, embedded as base64 PNG;
    - ``csv``: one row per (run, case), columns ``render_data.CSV_COLUMNS`` (us, TFLOP/s, percent);
    - ``json``: ``{"format", "version", "runs": [RunRecord.to_dict()], "figures", "gpu_peaks"}``; each entry
      of ``runs`` reads back with ``harness.results.record.run_from_dict``.

    Raises ReportError for an unknown format or no runs."""
    runs = [runs] if isinstance(runs, RunRecord) else list(runs)
    if not runs:
        raise ReportError("nothing to report: no runs given")
    if fmt not in FORMATS:
        raise ReportError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "csv":
        return render_csv(runs)
    if fmt == "json":
        return render_json(runs)
    sections = report_sections(runs, pictures=fmt == "html")
    if fmt == "md":
        return render_md(sections)
    labels = run_labels(runs)
    return render_html(sections, "fp4bench: " + ", ".join(labels[:4]) + (" ..." if len(labels) > 4 else ""))


def leaderboard_report(boards: Sequence[Board], fmt: str = "md") -> str:
    """The ranked boards as ``md``, ``html``, ``csv`` or ``json`` text (the ``leaderboard`` command's
    --format). Raises ReportError for an unknown format."""
    if fmt not in FORMATS:
        raise ReportError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "csv":
        return leaderboard_csv(boards)
    if fmt == "json":
        return leaderboard_json(boards)
    sections = leaderboard_sections(boards)
    return render_md(sections) if fmt == "md" else render_html(sections, "fp4bench leaderboard")
