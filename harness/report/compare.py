"""An A-versus-B comparison (harness.parent.compare, harness.results.ranking.compare_samples) shown as a terminal
table (``compare_rich_table``) or as text in a format (``compare_table``: text, md, csv, json)."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Sequence

from rich.text import Text

from harness.report.console import SHAPE_KEY
from harness.report.document import Cell, Section, Table
from harness.report.figures import finite, first_line, fmt_us, shape_label, shape_number
from harness.report.render import ReportError
from harness.report.render_md import render_md
from harness.report.stacked import Col, StackedTable, render_text
from harness.results.ranking import CompareRow, Comparison, NoRatio, SpeedVerdict
from harness.results.record import Status

_VERDICT_STYLE = {SpeedVerdict.FASTER: "green", SpeedVerdict.SLOWER: "red"}

#: Under every comparison table: what A/B is and why it can differ from the ratio of the two means shown.
COMPARE_NOTE = ("A/B = A's time / B's time (below 1: A is faster). Per shape it is the geometric mean of the "
                "per-pair ratios (pair i of A and B timed back to back on identical inputs), so it can differ from "
                "the ratio of the two means; the geomean row divides the geomeans of the shapes' means.")


def verdict_text(c: Comparison, a_name: str = "A") -> str:
    """The verdict in words: ``A is 1.63x faster`` (B's time / A's time), ``A is 1.22x slower`` (A's time /
    B's time), or ``no detectable difference`` when the interval holds 1."""
    if c.verdict is SpeedVerdict.FASTER:
        return f"{a_name} is {c.speedup:.3g}x faster"
    if c.verdict is SpeedVerdict.SLOWER:
        return f"{a_name} is {c.ratio:.3g}x slower"
    return "no detectable difference"


def ratio_ci_text(c: Comparison) -> str:
    """The ratio's confidence interval, ``[0.4982, 0.5019]``, or ``unbounded``."""
    return f"[{c.low:.4g}, {c.high:.4g}]" if math.isfinite(c.high) else "unbounded"


def side_cell(status: str, ns: float | None) -> str:
    """A side's mean time (us) when it passed (``-`` without samples), else its status (``fail``, ...)."""
    return (fmt_us(ns) or "-") if status == Status.PASS.value else status


def compare_items(rows: Sequence[CompareRow], overall: Comparison | None, overall_label: str, plug=None
                  ) -> list[tuple[str, str, Comparison | NoRatio]]:
    """(number, label, comparison) per row of a comparison table: shapes (of ``plug``'s problem; None:
    nvfp4_group_gemm) numbered from 1, then the overall row numbered ``all``."""
    out = [(shape_number(i), str(s) if isinstance(s, str) else shape_label(s, plug), c)
           for i, (s, c) in enumerate(rows)]
    if overall is not None:
        out.append(("all", overall_label, overall))
    return out


def _compare_record(label: str, c: Comparison | NoRatio) -> dict:
    if isinstance(c, NoRatio):
        return {"shape": label, "a_mean_us": None if c.a_ns is None else c.a_ns / 1e3,
                "b_mean_us": None if c.b_ns is None else c.b_ns / 1e3, "ratio": None, "ci_low": None,
                "ci_high": None, "level": None, "dof": None, "verdict": None, "method": None,
                "a_status": c.a_status, "b_status": c.b_status, "note": c.note}
    return {"shape": label, "a_mean_us": c.a_ns / 1e3, "b_mean_us": c.b_ns / 1e3, "ratio": c.ratio,
            "ci_low": c.low, "ci_high": finite(c.high), "level": c.level,
            "dof": c.dof if math.isfinite(c.dof) else None, "verdict": c.verdict.value, "method": c.method,
            "a_status": Status.PASS.value, "b_status": Status.PASS.value, "note": ""}


def compare_table(a_name: str, b_name: str, rows: Sequence[CompareRow], overall: Comparison | None = None,
                  fmt: str = "text", overall_label: str = "geomean", extra: dict | None = None, plug=None) -> str:
    """An A-versus-B comparison as text: ``text`` (the rich table, plain characters, 120 columns), ``md``,
    ``csv`` (columns shape, a_mean_us, b_mean_us, ratio, ci_low, ci_high, level, dof, verdict, method,
    a_status, b_status, note; a NoRatio row leaves the ratio columns empty) or ``json`` (``{"a", "b", "rows":
    [those objects, null for empty]}`` plus the keys of ``extra``). ``rows``: (case or label, Comparison from
    harness.results.ranking.compare_samples, or NoRatio); ``overall``: the whole-set Comparison, shown last as
    ``overall_label``; the text form is compare_rich_table at 120 columns.

    Raises ReportError for an unknown format."""
    items = compare_items(rows, overall, overall_label, plug)
    if fmt == "text":
        return render_text(compare_rich_table(a_name, b_name, rows, overall, overall_label=overall_label, plug=plug),
                           120)
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
        return render_md([Section(f"{a_name} (A) vs {b_name} (B)", 2, [table])])
    raise ReportError(f"unknown compare format {fmt!r}; expected text, md, csv or json")


def compare_rich_table(a_name: str, b_name: str, rows: Sequence[CompareRow], overall: Comparison | None = None,
                       title: str | None = None, overall_label: str = "geomean", plug=None) -> StackedTable:
    """An A-versus-B comparison (harness.parent.compare): per shape A's and B's mean us, A/B with its 95 % CI and the
    verdict in words ("A is 1.63x faster", green; slower red), then the ``overall`` row labelled
    ``overall_label``. ``rows``: (case or label, Comparison, or NoRatio for a shape without a ratio:
    each side shows its time or status and the verdict column why). The footer says what A/B is."""
    level = next((c.level for _, c in rows if isinstance(c, Comparison)), overall.level if overall else 0.95)
    columns = [Col("shape", "left"), Col("A us"), Col("B us"), Col("A/B"), Col(f"{level:.0%} CI"),
               Col("verdict", "left", wrap=True)]
    table = StackedTable(title or f"A: {a_name}  vs  B: {b_name}", SHAPE_KEY, columns, COMPARE_NOTE)
    items = compare_items(rows, overall, overall_label, plug)
    for k, (number, label, c) in enumerate(items):
        before_overall = k + 1 < len(items) and items[k + 1][0] == "all"
        if isinstance(c, NoRatio):
            table.add_row(number, label, side_cell(c.a_status, c.a_ns), side_cell(c.b_status, c.b_ns), "", "",
                          Text(first_line(c.note), style="red"), end_section=before_overall)
            continue
        table.add_row(number, label, fmt_us(c.a_ns), fmt_us(c.b_ns), f"{c.ratio:.4f}", ratio_ci_text(c),
                      Text(verdict_text(c), style=_VERDICT_STYLE.get(c.verdict, "")), end_section=before_overall)
    return table
