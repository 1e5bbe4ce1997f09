"""Terminal output: the per-case results of a run, several runs side by side, the profiler's table, and a
progress display (an A-versus-B comparison's terminal table is harness.report.compare.compare_rich_table).

Every table is a harness.report.stacked.StackedTable: shapes are rows, numbered from 1 (figures.shape_number) in a key
column that every stacked part repeats, so at any width down to 80 columns each value is shown whole. Text that
comes from a submission (messages, names) is shown verbatim, never read as console markup. Nothing here needs
torch (the report commands import this module).
"""
from __future__ import annotations

import re
from typing import Sequence

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from harness.report.figures import (
    case_figures,
    device_text,
    first_line,
    fmt_pct,
    fmt_pm,
    fmt_tflops,
    fmt_us,
    plug_of,
    run_labels,
    run_peaks,
    shape_label,
    shape_number,
    sol_ns,
    timer_text,
)
from harness.report.stacked import Col, StackedTable, plain
from harness.results.ranking import plural
from harness.results.record import CaseResult, RunRecord, Status

_STATUS_STYLE = {Status.PASS: "green", Status.SKIPPED: "yellow"}
#: The key column of every table with shapes as rows; "all" numbers a geomean row.
SHAPE_KEY = Col("#")


def status_text(status: Status) -> Text:
    """A case status, coloured (green pass, yellow skipped, red otherwise)."""
    return Text(status.value, style=_STATUS_STYLE.get(status, "red"))


def _title(record: RunRecord) -> str:
    env = record.environment
    timed = any(r.stats for r in record.cases)
    return (f"{record.submission.name}: {record.mode} mode, {record.data} data, on {device_text(env)}"
            + (f", times from {timer_text(env)}" if timed else ""))


def results_table(record: RunRecord) -> StackedTable:
    """One row per shape: shape, status and, for a timed run, mean/std/best/worst us per call, the 95 % CI of
    the mean, TFLOP/s and % of the GPU's speed of light (CUDA-timed runs only). Each case's message (first
    line, verbatim) is a note under the table; the caption gives the geomean."""
    figures = case_figures(record)
    timed = any(r.stats for r in record.cases)
    peaks = run_peaks(record) if timed else None
    columns = [Col("shape", "left"), Col("status", "left")]
    if timed:
        columns += [Col("runs"), Col("mean us"), Col("std us"), Col("best us"), Col("worst us"), Col("95% CI"),
                    Col("TFLOP/s")]
    if peaks:
        columns.append(Col(f"% SOL\n{peaks.model}"))
    caption = ""
    if record.geomean_ns:
        caption = (f"geomean of per-shape means: {fmt_us(record.geomean_ns)} us over "
                   f"{plural(len(record.cases), 'shape')}")
    table = StackedTable(_title(record), SHAPE_KEY, columns, caption)
    for f in figures:
        s = f.result.stats
        cells: list = [f.label, status_text(f.result.status)]
        if timed:
            cells += ([str(s.runs), fmt_us(s.mean_ns), fmt_us(s.std_ns), fmt_us(s.best_ns), fmt_us(s.worst_ns),
                       fmt_pm(f.ci), fmt_tflops(f.tflops)] if s else [""] * 7)
        if peaks:
            cells.append(fmt_pct(f.pct_sol_here))
        table.add_row(shape_number(f.index), *cells)
        if f.result.message:
            lead = f"shape {shape_number(f.index)} {f.result.status.value}: "
            table.add_note(Text.assemble((lead, _STATUS_STYLE.get(f.result.status, "red")),
                                         first_line(f.result.message, 300)))
    return table


def side_by_side(records: Sequence[RunRecord], baseline: str = "torch_reference") -> StackedTable:
    """Several runs of one shape set, per shape: each variant's mean us, then each one's TFLOP/s, % of the
    GPU's speed of light (CUDA-timed runs) and speed-up over ``baseline`` (its time / the variant's, when
    ``baseline`` is among them); the last row is the geomean. A shape a variant did not pass shows its status."""
    base = next((r for r in records if r.submission.name == baseline), None)
    env = records[0].environment
    peaks = run_peaks(records[0])
    names = run_labels(records)                     # a variant run twice gets its run id added
    others = [(r, n) for r, n in zip(records, names) if r is not base] if base is not None else []
    columns = ([Col("shape", "left")] + [Col(f"{n}\nmean us", group="mean") for n in names]
               + [Col(f"{n}\nTFLOP/s", group="tflops") for n in names])
    if peaks:
        columns += [Col(f"{n}\n% SOL {peaks.model}", group="sol") for n in names]
    columns += [Col(f"{n}\nspeed-up vs {baseline}", group="speed-up") for _, n in others]
    title = (f"side by side: {plural(len(records), 'variant')}, {records[0].mode} mode, {records[0].data} data, "
             f"on {device_text(env)}, times from {timer_text(env)}")
    table = StackedTable(title, SHAPE_KEY, columns, "speed-up = the baseline's mean time / the variant's")

    def mean(r: CaseResult) -> float | None:
        return r.stats.mean_ns if r.passed and r.stats else None

    figures = [case_figures(rec) for rec in records]
    for i, results in enumerate(zip(*(rec.cases for rec in records))):
        means = [mean(r) for r in results]
        plug = plug_of(records[0])
        cells: list = [shape_label(results[0].case, plug)]
        cells += [fmt_us(m) if m else status_text(r.status) for m, r in zip(means, results)]
        cells += [fmt_tflops(fig[i].tflops) if m else "" for m, fig in zip(means, figures)]
        if peaks:
            cells += [fmt_pct(100 * sol_ns(r.case, peaks, plug) / m) if m else "" for m, r in zip(means, results)]
        base_mean = mean(base.cases[i]) if base is not None else None
        cells += [f"{base_mean / mean(r.cases[i]):.2f}x" if base_mean and mean(r.cases[i]) else "" for r, _ in others]
        table.add_row(shape_number(i), *cells, end_section=i == len(records[0].cases) - 1)
    geo: list = ["geomean"] + [fmt_us(r.geomean_ns) for r in records] + [""] * len(records)
    if peaks:
        geo += [""] * len(records)
    geo += [f"{base.geomean_ns / r.geomean_ns:.2f}x" if base.geomean_ns and r.geomean_ns else "" for r, _ in others]
    table.add_row("all", *geo)
    return table


#: A rule of dashes in torch.profiler's table: one run of dashes per column, two spaces apart.
_RULE = re.compile(r"^-+(  -+)*\s*$")


def profile_table(text: str):
    """The torch profiler's kernel table (``key_averages().table()``) as a StackedTable, rows numbered from 1,
    so a narrow terminal stacks its columns instead of breaking each line; its total lines follow as notes.
    Text in any other layout is returned as it is (shown verbatim)."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if _RULE.match(line)]
    if len(rules) < 3 or rules[1] != rules[0] + 2:
        return plain(text)
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rules[0]])]

    def cells(line: str) -> list[str]:
        # A header wider than its column ("CUDA time avg" over 12 dashes) pushes the rest right: split on the
        # two-space gaps when they give one cell per column, else cut at the dashes.
        gaps = re.split(r"\s{2,}", line.strip())
        if len(gaps) == len(spans):
            return gaps
        return [line[a:b if k + 1 < len(spans) else None].strip() for k, (a, b) in enumerate(spans)]

    header = cells(lines[rules[0] + 1])
    table = StackedTable("", SHAPE_KEY, [Col(h, "left" if k == 0 else "right") for k, h in enumerate(header)])
    for n, line in enumerate(lines[rules[1] + 1:rules[2]]):
        table.add_row(str(n + 1), *cells(line))
    for line in lines[rules[2] + 1:]:
        if line.strip():
            table.add_note(line)
    return table


def profile_section(result: CaseResult, index: int, plug=None):
    """A case's profile under a heading naming the shape (``plug``: its problem's, None for nvfp4_group_gemm):
    a renderable for Console.print."""
    return Group(Text(f"profile of shape {shape_number(index)}: {shape_label(result.case, plug)}", style="bold"),
                 profile_table(result.profile))


class ProgressObserver:
    """A rich progress bar over ``shapes`` shapes, the current shape's sample count in its description. An
    Observer (harness.parent.runner) by its hooks, duck-typed so this module needs no torch. ``sides``: how many runs
    report to it (2 for both sides of a compare), so the bar counts shapes x sides finished results."""

    def __init__(self, console: Console, shapes: int, label: str, sides: int = 1):
        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.task = self.progress.add_task(label, total=shapes * sides)
        self.label = label
        self.total = shapes

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def on_start(self, record: RunRecord) -> None: ...

    def on_case_start(self, index: int, case) -> None:
        self.progress.update(self.task, description=f"{self.label}: shape {shape_number(index)} of {self.total}")

    def on_sample(self, index: int, runs: int) -> None:
        self.progress.update(self.task, description=f"{self.label}: shape {shape_number(index)} of {self.total}, "
                                                    f"{plural(runs, 'sample')}")

    def on_case(self, index: int, result: CaseResult) -> None:
        self.progress.advance(self.task)
        if not self.progress.console.is_terminal:  # a log or a pipe gets no bar: one line per finished shape
            mean = f", {fmt_us(result.stats.mean_ns)} us" if result.stats else ""
            self.progress.console.print(Text(f"{self.label}: shape {shape_number(index)} of {self.total} "
                                             f"{result.status.value}{mean}"))

    def on_finish(self, record: RunRecord) -> None: ...
