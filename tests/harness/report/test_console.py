"""Terminal output that fits: every table rendered at 80 and 160 columns (rich, record=True) on synthetic
RunRecords, each value found whole in its own row; submission text shown verbatim (markup_raise.py end to end).

A table line is read back into cells (``table_rows``), so "whole" means the cell's text equals the value, in
the row of its key, not merely that the characters occur somewhere."""
from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest
from click.testing import CliRunner
from tests.conftest import SHARED_CASES

from harness.cli import reports as cli_reports
from harness.cli.commands import main
from harness.report.boards import leaderboards
from harness.report.compare import compare_rich_table
from harness.report.console import profile_table, results_table, side_by_side
from harness.report.figures import (
    case_figures,
    fmt_change,
    fmt_interval_us,
    fmt_pct,
    fmt_pm,
    fmt_tflops,
    fmt_us,
    shape_label,
    short_commit,
)
from harness.report.history import history_rows
from harness.report.stacked import Col, StackedTable, render_text
from harness.results.ranking import NoRatio, compare_geomeans, compare_samples
from harness.results.record import CaseResult, Environment, RunRecord, Stats, Status, SubmissionInfo
from harness.results.stats import geomean, summarize
from harness.results.store import ResultStore
from problems.nvfp4_group_gemm.spec import load_shapes

WIDTHS = (80, 160)
H200 = Environment("NVIDIA H200", "sm_90", "580.159", "2.11.0+cu130", "3.6.0", "not installed", "3.12.3",
                   "dev-box", "cuda-events")
CPU = Environment("CPU (x86_64)", "none", "none", "2.13.0+cpu", "not installed", "not installed", "3.11.9",
                  "laptop", "cpu-monotonic")
TESTS = load_shapes("tests")                # 10 unnamed shapes: the longest labels
NAMES = ("cute_dense_per_group", "torch_reference", "triton_grouped")


def make_run(variant: str, scale: float, run_id: str, env: Environment = H200, mode: str = "leaderboard",
             started_at: str = "2026-11-29T10:00:00+00:00", cases=TESTS.cases, commit: str = "0123456789abcdef"
             ) -> RunRecord:
    """A complete passing run: case i's samples around (1253412.7 + 98765.4 i) * scale ns, 4 samples, 1 % noise."""
    results = []
    for i, case in enumerate(cases):
        base = (1_253_412.7 + 98_765.4 * i) * scale
        samples = [base * (1 + 0.01 * d) for d in (-1.5, -0.5, 0.5, 1.5)]
        results.append(CaseResult(case, Status.PASS, "", tuple(samples), summarize(samples), 61, 0.5))
    return RunRecord(run_id, started_at, mode, "official", "tests", None,
                     SubmissionInfo(variant, f"submissions/{variant}/submission.py", "ab" * 32, {}), env,
                     tuple(results), True, commit, geomean([r.stats.mean_ns for r in results]))


# --------------------------------------------------------------------------------------------- reading back
def table_rows(text: str) -> dict[str, list[str]]:
    """Every body row of every table in ``text``, by its key (first) cell: the row's other cells across all
    stacked tables, in order. A line with an empty key continues the row above (its cells joined by spaces)."""
    rows: dict[str, list[str]] = {}
    key, start = "", 0
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells[0]:
            key = cells[0]
            start = len(rows.setdefault(key, []))
            rows[key].extend(cells[1:])
            continue
        for i, cell in enumerate(cells[1:]):    # the next line of a wrapped cell
            if cell:
                rows[key][start + i] += " " + cell
    return rows


def header_cells(text: str) -> set[str]:
    """Every header cell of every table in ``text``: each line's cells, and each column's lines joined by spaces (a
    header rich wrapped, "CUDA time avg" over two lines)."""
    cells: set[str] = set()
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("┃"):
            block.append([c.strip() for c in line.strip().strip("┃").split("┃")])
            continue
        cells |= {c for row in block for c in row} | {" ".join(filter(None, column)) for column in zip(*block)}
        block = []
    return cells


def render(renderable, width: int) -> str:
    text = render_text(renderable, width)
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, f"lines wider than {width}: {too_wide[:2]}"
    assert "…" not in text                                          # nothing cut with an ellipsis
    return text


def assert_row(rows: dict[str, list[str]], key: str, *values: str) -> None:
    missing = [v for v in values if v not in rows.get(key, [])]
    assert not missing, f"row {key!r}: {missing} not among its cells {rows.get(key)}"


# ------------------------------------------------------------------------------------------------ tables
def test_stacked_table_splits_columns_and_repeats_the_key():
    table = StackedTable("t", Col("#"), [Col(f"column {i}") for i in range(12)])
    table.add_row("1", *(f"{1000 + i}.5" for i in range(12)))
    assert len(table.panels(80)) == 2 and len(table.panels(160)) == 1
    text = render(table, 80)
    assert text.count("┃ # ┃") == 2
    assert table_rows(text) == {"1": [f"{1000 + i}.5" for i in range(12)]}
    with pytest.raises(ValueError, match="expected 12 value cells"):
        table.add_row("2", "1")
    plain = StackedTable("[bold]title[/]", Col("[/]"), [Col("x", wrap=True)], caption="[red]caption")
    plain.add_row("[/]", "[bold]a[/bold] [/red]")
    text = render(plain, 80)
    assert "[bold]title[/]" in text and "[red]caption" in text
    assert table_rows(text) == {"[/]": ["[bold]a[/bold] [/red]"]}


@pytest.mark.parametrize("width", WIDTHS)
def test_run_results_show_every_value_whole(width):
    run = make_run("cute_dense_per_group", 1.0, "20261129-100000-aaaaaa")
    wide = dataclasses.replace(run.cases[9], stats=Stats(4, 123_456_789_012.0, 98_765_432.1, 49_382_716.0,
                                                          123_000_000_000.0, 124_000_000_000.0))
    run = dataclasses.replace(run, cases=run.cases[:9] + (wide,))
    text = render(results_table(run), width)
    assert "cute_dense_per_group: nvfp4_group_gemm, leaderboard mode, official data, on NVIDIA H200 (sm_90, driver 580.159)" in \
        " ".join(text.split())
    rows = table_rows(text)
    for f in case_figures(run):
        s = f.result.stats
        assert_row(rows, str(f.index + 1), shape_label(f.result.case), "pass", str(s.runs), fmt_us(s.mean_ns),
                   fmt_us(s.std_ns), fmt_us(s.best_ns), fmt_us(s.worst_ns), fmt_pm(f.ci), fmt_tflops(f.tflops),
                   fmt_pct(f.pct_sol_here))
    assert "123456789" in rows["10"] and "0.0" not in rows["10"]
    assert {"mean us", "TFLOP/s", "H200"} <= header_cells(text)
    assert f"geomean of per-shape means: {fmt_us(run.geomean_ns)} us over 10 shapes" in " ".join(text.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_cpu_run_title_names_the_device_once_and_keeps_small_rates(width):
    run = make_run("torch_reference", 1.0, "r-cpu", env=CPU, mode="benchmark", cases=TESTS.cases[:1])
    text = render(results_table(run), width)
    title = " ".join(text.split("\n┏")[0].split())
    assert title == ("torch_reference: nvfp4_group_gemm, benchmark mode, official data, on CPU (x86_64), times from a monotonic "
                     "CPU clock")
    rate = fmt_tflops(case_figures(run)[0].tflops)
    assert rate == "0.0318" and rate in table_rows(text)["1"]    # 2(96*128*256 + 128*256*512) FLOP / 1253.4127 us
    assert "over 1 shape" in text and "% SOL" not in text


@pytest.mark.parametrize("width", WIDTHS)
def test_side_by_side_shows_every_variant_and_number(width):
    runs = [make_run(name, scale, f"r{i}") for i, (name, scale) in enumerate(zip(NAMES, (1.0, 1.3, 0.7)))]
    text = render(side_by_side(runs), width)
    rows = table_rows(text)
    assert set(NAMES) <= header_cells(text)
    for i, case in enumerate(TESTS.cases):
        means = [fmt_us(r.cases[i].stats.mean_ns) for r in runs]
        speedups = [f"{runs[1].cases[i].stats.mean_ns / r.cases[i].stats.mean_ns:.2f}x" for r in (runs[0], runs[2])]
        assert_row(rows, str(i + 1), shape_label(case), *means, *speedups,
                   *(fmt_tflops(case_figures(r)[i].tflops) for r in runs))
    assert_row(rows, "all", "geomean", *(fmt_us(r.geomean_ns) for r in runs))


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_table_shows_every_value_and_says_which_is_faster(width):
    a = [10_000.0, 10_100.0, 9_900.0, 10_050.0]
    b = [16_300.0, 16_500.0, 16_100.0, 16_400.0]
    faster = compare_samples(a, b, paired=True)
    slower = compare_samples(b, a, paired=True)
    failed = NoRatio("pass", "fail", "B fail: output 0: 3 elements differ [/] at [0, 1] (got 1.5, expected 2)",
                     12_345.6, None)
    rows = [(TESTS.cases[3], faster), (TESTS.cases[4], slower), (TESTS.cases[5], failed)]
    overall = compare_geomeans([summarize(a), summarize(b)], [summarize(b), summarize(a)])
    text = render(compare_rich_table("cute_dense_per_group", "triton_grouped", rows, overall,
                                     overall_label="geomean (2 of 3 shapes)"), width)
    flat = " ".join(text.split())
    assert "A: cute_dense_per_group vs B: triton_grouped" in flat
    parsed = table_rows(text)
    assert_row(parsed, "1", shape_label(TESTS.cases[3]), fmt_us(faster.a_ns), fmt_us(faster.b_ns),
               f"{faster.ratio:.4f}", f"[{faster.low:.4g}, {faster.high:.4g}]", f"A is {1 / faster.ratio:.3g}x faster")
    assert_row(parsed, "2", f"{slower.ratio:.4f}", f"A is {slower.ratio:.3g}x slower")
    assert_row(parsed, "3", "12.35", "fail", failed.note)                    # the note verbatim, markup and all
    assert_row(parsed, "all", "geomean (2 of 3 shapes)", "no detectable difference")
    assert "geometric mean of the per-pair ratios" in flat and "ratio of the two means" in flat


def _profile_round_trip(device: str) -> None:
    """Profile a matmul on ``device`` as the worker does (key_averages().table, sorted by that device's total
    time), then render the table at each width: the first row's every cell and every header whole."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(256, 256, device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        (x @ x).sum().item()
    raw = prof.key_averages().table(sort_by=f"{'cuda' if device == 'cuda' else 'cpu'}_time_total", row_limit=15)
    lines = raw.splitlines()
    header = re.split(r"\s{2,}", lines[1].strip())
    first = re.split(r"\s{2,}", lines[3].strip())
    assert len(first) == len(header) >= 7
    for width in WIDTHS:
        text = render(profile_table(raw), width)
        assert_row(table_rows(text), "1", *first)
        assert set(header) <= header_cells(text)
        assert "Self CPU time total:" in text


def test_profile_table_stacks_torch_profiler_columns():
    _profile_round_trip("cpu")


@pytest.mark.gpu
def test_profile_table_reads_the_cuda_profiler_table():
    """The CUDA table has more columns (Self CUDA, CUDA total, ...) and longer kernel names."""
    _profile_round_trip("cuda")


#: torch 2.11's CUDA profiler table as printed on the H200 (2026-12-01): every column 12 wide, so the 13-character
#: "CUDA time avg" header runs one character past its dashes and shifts the headers after it.
CUDA_PROFILE = "\n".join([
    "-" * 30 + ("  " + "-" * 12) * 10,
    "Name".ljust(30) + "".join("  " + h.rjust(12) for h in (
        "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "Self CUDA", "Self CUDA %",
        "CUDA total", "CUDA time avg", "# of Calls")),
    "-" * 30 + ("  " + "-" * 12) * 10,
    "aten::mm".ljust(30) + "".join("  " + c.rjust(12) for c in (
        "1.23%", "12.000us", "4.56%", "45.000us", "45.000us", "3.000us", "80.00%", "3.000us", "3.000us", "1")),
    "-" * 30 + ("  " + "-" * 12) * 10,
    "Self CPU time total: 1.000ms",
    "Self CUDA time total: 3.000us"])


@pytest.mark.parametrize("width", WIDTHS)
def test_profile_table_keeps_a_header_wider_than_its_column(width):
    text = render(profile_table(CUDA_PROFILE), width)
    assert {"CUDA time avg", "# of Calls", "Self CUDA %"} <= header_cells(text)
    assert_row(table_rows(text), "1", "aten::mm", "80.00%", "3.000us", "1")


@pytest.mark.parametrize("width", WIDTHS)
def test_markup_in_submission_text_is_shown_verbatim(width):
    message = "raised: ValueError: scale tile [/] mismatch at a[0:4, /1] [bold]row 3[/bold] [/red]"
    run = make_run("my[bold]kernel[/]", 1.0, "r1", cases=TESTS.cases[:2])
    run = dataclasses.replace(run, cases=(dataclasses.replace(run.cases[0], status=Status.ERROR,
                                                              message=message + "\nTraceback (most recent call last):\n  ..."),
                                          run.cases[1]), geomean_ns=None)
    flat = " ".join(render(results_table(run), width).split())
    assert "my[bold]kernel[/]: nvfp4_group_gemm, leaderboard mode" in flat
    assert f"shape 1 error: {message}" in flat and "Traceback" not in flat


# ------------------------------------------------------------------------------------ report commands (CLI)
@pytest.fixture
def store(tmp_path):
    """Three variants on the 10 `tests` shapes (two tied), and a variant's history over three runs."""
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as db:
        for i, (name, scale) in enumerate(zip(NAMES, (1.0, 1.002, 0.7))):
            db.save(make_run(name, scale, f"20261129-10000{i}-{'abc'[i] * 6}", commit=f"{i}123456789abcdef-dirty"))
        for i, scale in enumerate((1.0, 0.8, 0.79)):
            db.save(make_run("wgmma_sm90", scale, f"20261130-0{i}0000-dddddd", mode="benchmark",
                             started_at=f"2026-11-30T0{i}:00:00+00:00", commit=f"feed{i}beef"))
    return path


def _cli(width: int, *args: str):
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("width", WIDTHS)
def test_leaderboard_of_ten_shapes_shows_every_column(store, width):
    text = _cli(width, "leaderboard", "--db", str(store))
    assert not [line for line in text.splitlines() if len(line) > width] and "…" not in text
    with ResultStore(store) as db:
        (board,) = leaderboards(db.runs(mode="leaderboard", passed=True))
    rows = table_rows(text)
    assert [e.variant for e in board.entries] == ["triton_grouped", "cute_dense_per_group", "torch_reference"]
    for e in board.entries:
        assert_row(rows, cli_reports.rank_text(e, board), e.variant, fmt_us(e.interval.estimate),
                   fmt_interval_us(e.interval), fmt_pct(e.pct_sol), ", ".join(e.tied_with) or "-", e.run.run_id,
                   short_commit(e.run.git_commit))
    assert "torch_reference" in rows["=2"] and "cute_dense_per_group" in rows["=2"]    # the tie, both ways
    assert set(NAMES) <= header_cells(text)
    for i, case in enumerate(board.cases):
        assert_row(rows, str(i + 1), shape_label(case), *(fmt_us(e.run.cases[i].stats.mean_ns) for e in board.entries))


@pytest.mark.parametrize("width", WIDTHS)
def test_history_shows_every_run_whole(store, width):
    text = _cli(width, "history", "wgmma_sm90", "--db", str(store))
    assert not [line for line in text.splitlines() if len(line) > width] and "…" not in text
    rows = table_rows(text)
    assert "history of wgmma_sm90 (nvfp4_group_gemm, benchmark, tests, H200)" in " ".join(text.split())
    with ResultStore(store) as db:
        history = history_rows(db.runs(variant="wgmma_sm90"))
    for i, h in enumerate(history):
        assert_row(rows, h.run.run_id, f"2026-11-30 0{i}:00", f"feed{i}beef", "passed", fmt_us(h.run.geomean_ns),
                   fmt_pm(h.interval))
    assert history[1].change.ratio == pytest.approx(0.8)
    for h in history[1:]:
        assert_row(rows, h.run.run_id, fmt_change(h.change), h.change.verdict.value)
    assert_row(rows, history[1].run.run_id, "-20.0 % ±0.5", "faster")


@pytest.mark.parametrize("width", WIDTHS)
def test_list_shows_whole_variant_names_and_reasons(width):
    text = _cli(width, "list")
    assert not [line for line in text.splitlines() if len(line) > width] and "…" not in text
    rows = table_rows(text)
    for name in ("cuda_inline", "cute_dense_per_group", "cute_grouped", "torch_reference", "triton_grouped",
                 "wgmma_sm90"):
        assert "nvfp4_group_gemm" in rows[name]
    assert_row(rows, "torch_reference", "B200", "cpu-ok", "yes")
    assert rows["cute_dense_per_group"][-2].startswith("no: needs sm_100a; this ")
    assert rows["cute_dense_per_group"][-1] == "ok" and rows["torch_reference"][-1] == "ok"  # the export column
    assert rows["wgmma_sm90"][-1] == "1 finding (gpu): built for another GPU: needs sm_90a"


# ------------------------------------------------------------------------------ markup_raise.py end to end
def test_markup_raise_fails_its_case_verbatim_and_still_writes_json_and_popcorn(tmp_path, monkeypatch):
    """A submission's message holding [/] and [bold] is shown as written; the run neither crashes nor loses its
    JSON file or its POPCORN stream."""
    stream = tmp_path / "popcorn.txt"
    out = tmp_path / "run.json"
    fd = os.open(stream, os.O_WRONLY | os.O_CREAT)
    try:
        result = CliRunner().invoke(main, [
            "run", "--submission", str(SHARED_CASES / "markup_raise.py"), "--no-store", "--json", str(out),
            "--shapes", "m: [64]; n: [128]; k: [256]; g: 1; seed: 5"],
            env={"COLUMNS": "200", "POPCORN_FD": str(fd)})
    finally:
        os.close(fd)
    message = "raised: ValueError: scale tile [/] mismatch at a[0:4, /1] [bold]row 3[/bold] [/red]"
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 112
    assert f"shape 1 error: {message}" in result.output
    case = json.loads(out.read_text())["cases"][0]
    assert case["status"] == "error" and case["message"].startswith(message + "\n")
    assert stream.read_text().splitlines()[-3:] == ["test.0.status: fail", f"test.0.error: {message}",
                                                    "check: fail"]


def test_error_lines_show_their_text_verbatim():
    result = CliRunner().invoke(main, ["run", "--submission", "no[/]such[bold]", "--no-store"])
    assert result.exit_code == 113
    assert "no[/]such[bold]" in result.output and "MarkupError" not in result.output



@pytest.mark.parametrize("terminal", [False, True])
def test_progress_writes_one_line_per_shape_to_a_log_and_none_to_a_terminal(terminal):
    import io

    from rich.console import Console

    from harness.report.console import ProgressObserver
    cases = load_shapes("smoke").cases
    out = io.StringIO()
    with ProgressObserver(Console(file=out, force_terminal=terminal, width=100), 2, "honest") as obs:
        obs.on_case(0, CaseResult(cases[0], Status.PASS, "", (1500.0,), summarize([1500.0]), 15, 0.1))
        obs.on_case(1, CaseResult(cases[1], Status.FAIL, "mismatch"))
    lines = [line for line in out.getvalue().splitlines() if line.startswith("honest: shape")]
    assert lines == ([] if terminal else ["honest: shape 1 of 2 pass, 1.500 us", "honest: shape 2 of 2 fail"])


def test_message_head_keeps_four_lines_and_where_it_raised():
    from harness.results.record import message_head

    text = "\n".join(f"line {i}" for i in range(1, 8))
    message = f"raised: E: {text}\nat sub/k.py:9 in custom_kernel\nTraceback (most recent call last):\n  File x"
    assert message_head(message) == ["raised: E: line 1", "line 2", "line 3", "line 4", "[... 3 more lines]",
                                      "at sub/k.py:9 in custom_kernel"]
    assert message_head("outputs differ: 3 of 8192 elements") == ["outputs differ: 3 of 8192 elements"]


def test_progress_lines_name_the_shape_once_and_every_phase():
    import io

    from rich.console import Console

    from harness.report.console import ProgressObserver
    cases = load_shapes("smoke").cases
    out = io.StringIO()
    with ProgressObserver(Console(file=out, width=100), 2, "k leaderboard") as obs:
        obs.on_phase(None, "starting the worker, loading the submission")
        obs.on_phase(0, "warm-up")                     # a leaderboard's warm-up pass comes before the shape starts
        obs.on_case_start(0, cases[0])
        obs.on_phase(0, "timing")
        obs.on_sample(0, 3)                            # a line per sample would flood a log: none
        obs.on_case(0, CaseResult(cases[0], Status.PASS, "", (1500.0,), summarize([1500.0]), 15, 0.1))
        side = obs.side("B (k)")
        side.on_case_start(1, cases[1])
        side.on_phase(1, "correctness call")
        side.on_case(1, CaseResult(cases[1], Status.ERROR, "raised: E"))
    assert out.getvalue().splitlines() == [
        "k leaderboard: starting the worker, loading the submission",
        "k leaderboard: shape 1 of 2: warm-up",
        "k leaderboard: shape 1 of 2 (G=2 M=[64,40] N=[128,256] K=[256,512]): timing",
        "k leaderboard: shape 1 of 2 pass, 1.500 us",
        "k leaderboard: shape 2 of 2 (G=1 M=128 N=128 K=256): B (k): correctness call",
        "k leaderboard: shape 2 of 2: B (k) error",
    ]


@pytest.mark.parametrize("terminal", [False, True])
def test_a_long_note_is_one_line_in_a_pipe_and_wrapped_on_a_terminal(terminal):
    """A log or a pipe gets each failed shape's message on one line (grep finds it whole); a terminal 40 cells
    wide gets it wrapped, and the table above it fits either way."""
    import io

    from harness.cli.exits import Stdout
    message = "raised: ValueError: kernel refused the problem: K must be a multiple of 512 on this kernel"
    run = make_run("k", 1.0, "r1", cases=TESTS.cases[:1])
    run = dataclasses.replace(run, cases=(dataclasses.replace(run.cases[0], status=Status.ERROR, message=message),),
                              geomean_ns=None)
    out = io.StringIO()
    Stdout(file=out, width=40, force_terminal=terminal, color_system=None).print(results_table(run))
    lines = out.getvalue().splitlines()
    assert (f"shape 1 error: {message}" in lines) is not terminal
    assert all(len(line) <= 40 for line in lines if not line.startswith("shape 1 error"))
    if terminal:
        assert " ".join(" ".join(lines).split()).count(f"shape 1 error: {message}") == 1
