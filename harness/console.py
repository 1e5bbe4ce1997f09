"""Terminal output with rich: the per-case results table, the side-by-side table, and a progress display."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.record import CaseResult, RunRecord, Status
from harness.report import fmt_us
from harness.runner import Observer
from task.cost import peaks_for, sol_ns, tflops_at
from task.spec import Case

_STYLE = {Status.PASS: "green", Status.SKIPPED: "yellow"}


def case_label(case: Case) -> str:
    """The case's name, or a compact ``G2 m64,40 n128,256 k256,512`` (equal entries shown once)."""
    def part(key: str, values: tuple[int, ...]) -> str:
        return key + (str(values[0]) if len(set(values)) == 1 else ",".join(map(str, values)))
    return case.name or " ".join([f"G{case.g}", part("m", case.m), part("n", case.n), part("k", case.k)])


def fmt_tflops(x: float) -> str:
    """TFLOP/s with one decimal, or three significant digits below 1 (CPU rates are fractions of one)."""
    return f"{x:.1f}" if x >= 1 else f"{x:.3g}"


def results_table(record: RunRecord) -> Table:
    """One row per case: status, runs, mean/std/best/worst (us), TFLOP/s, % of this GPU's SOL, message."""
    env = record.environment
    peaks = peaks_for(env.device) if env.timer == "cuda-events" else None
    table = Table(title=f"{record.submission.name}: {record.mode} on {env.device} "
                        f"({'CUDA events' if env.timer == 'cuda-events' else 'CPU, monotonic clock'}, "
                        f"{record.data} data{'; times in us per call' if any(r.stats for r in record.cases) else ''})")
    timed = any(r.stats for r in record.cases)
    columns = ("case", "status") + (("runs", "mean", "std", "best", "worst", "TFLOP/s") if timed else ())
    labels = [case_label(r.case) for r in record.cases]
    longest_word = max((len(w) for label in labels for w in label.split()), default=4)
    for col in columns:
        if col == "case":  # wide enough for its longest word, so a narrow terminal breaks labels between words
            table.add_column(col, overflow="fold", max_width=26, min_width=min(26, longest_word))
        else:
            table.add_column(col, justify="left" if col == "status" else "right", no_wrap=True)
    peaks = peaks if timed else None
    if peaks:
        table.add_column(f"% SOL {peaks.model}", justify="right")
    with_messages = any(r.message for r in record.cases)
    if with_messages:
        table.add_column("message", overflow="fold")
    for r, label in zip(record.cases, labels):
        s = r.stats
        cells = [label, f"[{_STYLE.get(r.status, 'red')}]{r.status.value}[/]"]
        if s:
            cells += [str(s.runs), fmt_us(s.mean_ns), fmt_us(s.std_ns), fmt_us(s.best_ns), fmt_us(s.worst_ns),
                      fmt_tflops(tflops_at(r.case, s.mean_ns))]
        elif timed:
            cells += [""] * 6
        if peaks:
            cells.append(f"{100 * sol_ns(r.case, peaks) / s.mean_ns:.1f}" if s else "")
        if with_messages:
            cells.append(r.message.splitlines()[0][:300] if r.message else "")
        table.add_row(*cells)
    if record.geomean_ns:
        table.caption = f"geomean of means: {fmt_us(record.geomean_ns)} us over {len(record.cases)} shapes"
    return table


def side_by_side(records: list[RunRecord], baseline: str = "torch_reference") -> Table:
    """Per case: mean us, TFLOP/s, % of the exact-MMA roofline and ratio to ``baseline`` for every submission."""
    base = next((r for r in records if r.submission.name == baseline), None)
    env = records[0].environment
    peaks = peaks_for(env.device) if env.timer == "cuda-events" else None
    table = Table(title=f"side by side on {env.device}" + ("" if peaks else " (CPU, monotonic clock)"))
    table.add_column("case")
    for rec in records:
        name = rec.submission.name
        table.add_column(f"{name}\nmean us", justify="right")
        table.add_column("TFLOP/s", justify="right")
        if peaks:
            table.add_column("% roofline", justify="right")
        if base is not None and rec is not base:
            table.add_column(f"x vs {baseline}", justify="right")
    rows = list(zip(*(rec.cases for rec in records)))
    for results in rows:
        cells = [case_label(results[0].case)]
        base_result = results[records.index(base)] if base is not None else None
        for rec, r in zip(records, results):
            s = r.stats if r.passed else None
            cells += [f"{s.mean_ns / 1e3:.2f}" if s else r.status.value, fmt_tflops(tflops_at(r.case, s.mean_ns)) if s else ""]
            if peaks:
                cells.append(f"{100 * sol_ns(r.case, peaks) / s.mean_ns:.1f}" if s else "")
            if base is not None and rec is not base:
                bs = base_result.stats if base_result and base_result.passed else None
                cells.append(f"{bs.mean_ns / s.mean_ns:.2f}" if s and bs else "")
        table.add_row(*cells)
    geo = ["geomean"]
    for rec in records:
        geo += [f"{rec.geomean_ns / 1e3:.2f}" if rec.geomean_ns else "", ""]
        if peaks:
            geo.append("")
        if base is not None and rec is not base:
            geo.append(f"{base.geomean_ns / rec.geomean_ns:.2f}" if rec.geomean_ns and base.geomean_ns else "")
    table.add_row(*geo)
    return table


class ProgressObserver(Observer):
    """A rich progress bar: one bar over cases, the current case's sample count in its description."""

    def __init__(self, console: Console, total: int, label: str):
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.task = self.progress.add_task(label, total=total)
        self.label = label

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def on_case_start(self, index: int, case: Case) -> None:
        self.progress.update(self.task, description=f"{self.label}: {case_label(case)}")

    def on_sample(self, index: int, runs: int) -> None:
        self.progress.update(self.task, description=f"{self.label}: case {index + 1}, {runs} samples")

    def on_case(self, index: int, result: CaseResult) -> None:
        self.progress.advance(self.task)
