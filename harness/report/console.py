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
from harness.results.record import CaseResult, RunRecord, Status, message_head

_STATUS_STYLE = {Status.PASS: "green", Status.SKIPPED: "yellow"}
#: The key column of every table with shapes as rows; "all" numbers a geomean row.
SHAPE_KEY = Col("#")


def status_text(status: Status) -> Text:
    """A case status, coloured (green pass, yellow skipped, red otherwise)."""
    return Text(status.value, style=_STATUS_STYLE.get(status, "red"))


def _title(record: RunRecord) -> str:
    env = record.environment
    timed = any(r.stats for r in record.cases)
    return (f"{record.submission.name}: {record.problem}, {record.mode} mode, {record.data} data, on {device_text(env)}"
            + (f", times from {timer_text(env)}" if timed else ""))


def results_table(record: RunRecord) -> StackedTable:
    """One row per shape: shape, status and, for a timed run, mean/std/best/worst us per call, the 95 % CI of
    the mean, TFLOP/s and % of the GPU's speed of light (CUDA-timed runs only). Each case's message (its head:
    the first lines before a traceback and where the submission raised, ``record.message_head``; verbatim) is a
    note under the table; the caption gives the geomean."""
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
            first, *more = message_head(f.result.message)
            note = Text.assemble((lead, _STATUS_STYLE.get(f.result.status, "red")), first_line(first, 300))
            for line in more:
                note.append("\n  " + first_line(line, 300))
            table.add_note(note)
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
    title = (f"side by side: {plural(len(records), 'variant')} of {records[0].problem}, {records[0].mode} mode, "
             f"{records[0].data} data, on {device_text(env)}, times from {timer_text(env)}")
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
    """Progress over ``shapes`` shapes, per shape and phase: on a terminal a transient rich bar whose description
    names the shape, its phase and its sample count; elsewhere (a log, a pipe) one line per event: the run's own
    phases (loading), each shape as it starts, each phase of it, and each finished shape with its status and
    mean. Write it to standard error, so that data on standard output (--format json) stays clean. An Observer
    (harness.parent.runner) by its hooks, duck-typed so this module needs no torch. ``sides``: how many runs report
    to it (2 for both sides of a compare, each through its ``side`` view), so the bar counts shapes x sides
    finished results."""

    def __init__(self, console: Console, shapes: int, label: str, sides: int = 1):
        self.live = console.is_terminal
        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True, disable=not self.live)
        self.task = self.progress.add_task(label, total=shapes * sides)
        self.label = label
        self.total = shapes
        self._started: set[int] = set()
        self._unnamed: dict[int, str] = {}  # shapes started whose label no line has shown yet
        self._plug = None  # the run's problem (on_start); None: nvfp4_group_gemm's labels

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def side(self, who: str) -> "SideProgress":
        """A view of this display for one side of a compare (``who``: ``A (name)``): its hooks name the side."""
        return SideProgress(self, who)

    def _where(self, index: int | None, who: str, named: str = "") -> str:
        shape = f": shape {shape_number(index)} of {self.total}" if index is not None else ""
        return f"{self.label}{shape}{f' ({named})' if named else ''}{f': {who}' if who else ''}"

    def _show(self, text: str, line: bool = True) -> None:
        """``text`` as the bar's description on a terminal, else (``line``) as a line of its own."""
        if self.live:
            self.progress.update(self.task, description=text)
        elif line:
            self.progress.console.print(Text(text), soft_wrap=True)

    def on_start(self, record: RunRecord, who: str = "") -> None:
        self._plug = plug_of(record)

    def on_phase(self, index: int | None, phase: str, who: str = "") -> None:
        """A phase began: of the whole run (``index`` None: starting the worker, loading) or of shape ``index``
        (correctness call, warm-up, timing); the shape's first phase names the shape."""
        self._show(f"{self._where(index, who, self._unnamed.pop(index, ''))}: {phase}")

    def on_case_start(self, index: int, case, who: str = "") -> None:
        if index not in self._started:  # both sides of a compare start each shape: named once
            self._started.add(index)
            self._unnamed[index] = shape_label(case, self._plug)
            self._show(f"{self._where(index, '')}: {shape_label(case, self._plug)}", line=False)

    def on_sample(self, index: int, runs: int, who: str = "") -> None:
        self._show(f"{self._where(index, who)}: timing, {plural(runs, 'sample')}", line=False)

    def on_case(self, index: int, result: CaseResult, who: str = "") -> None:
        self.progress.advance(self.task)
        mean = f", {fmt_us(result.stats.mean_ns)} us" if result.stats else ""
        self._show(f"{self._where(index, who)} {result.status.value}{mean}", line=True)

    def on_finish(self, record: RunRecord, who: str = "") -> None: ...


class SideProgress:
    """One side's hooks into a shared ProgressObserver (``ProgressObserver.side``)."""

    def __init__(self, display: ProgressObserver, who: str):
        self.display, self.who = display, who

    def on_start(self, record: RunRecord) -> None:
        self.display.on_start(record, self.who)

    def on_phase(self, index: int | None, phase: str) -> None:
        self.display.on_phase(index, phase, self.who)

    def on_case_start(self, index: int, case) -> None:
        self.display.on_case_start(index, case, self.who)

    def on_sample(self, index: int, runs: int) -> None:
        self.display.on_sample(index, runs, self.who)

    def on_case(self, index: int, result: CaseResult) -> None:
        self.display.on_case(index, result, self.who)

    def on_finish(self, record: RunRecord) -> None: ...
