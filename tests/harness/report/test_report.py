"""Reports, boards, pictures and the report commands, on hand-built RunRecords (no GPU, no runner)."""
from __future__ import annotations

import base64
import csv
import dataclasses
import io
import json
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser

import click
import pytest
from click.testing import CliRunner

from harness.cli import reports as cli_reports
from harness.report import plots
from harness.report.boards import leaderboards
from harness.report.compare import compare_table
from harness.report.document import Image, Table, cell_text
from harness.report.figures import fmt_change, fmt_pm, fmt_us, run_geomean_ci, run_status, shape_label
from harness.report.render import ReportError, leaderboard_report, report
from harness.report.history import history_rows
from harness.report.render_data import CSV_COLUMNS
from harness.report.render_html import render_html
from harness.report.render_md import render_md
from harness.report.sections import report_sections
from harness.results.ranking import SpeedVerdict, compare_geomeans, compare_samples, mean_ci
from harness.results.record import CaseResult, Environment, RunRecord, Status, SubmissionInfo, run_from_dict
from harness.results.stats import geomean, summarize
from harness.results.store import ResultStore
from problems.nvfp4_group_gemm.cost import GPU_PEAKS, sol_ns, tflops_at
from problems.nvfp4_group_gemm.spec import Case

H200 = Environment("NVIDIA H200", "sm_90", "580.159", "2.11.0+cu130", "3.6.0", "not installed", "3.12.3",
                   "dev-box", "cuda-events")
B200 = dataclasses.replace(H200, device="NVIDIA B200", compute_capability="sm_100")
CPU = dataclasses.replace(H200, device="CPU (x86_64)", compute_capability="none", timer="cpu-monotonic")
BENCH = (
    Case((192, 320), (3072, 3072), (4096, 4096), 2, 1111, "g2_n3072_k4096"),
    Case((128, 384), (4096, 4096), (1536, 1536), 2, 1111, "g2_n4096_k1536"),
)
BASE_NS = (40_000.0, 25_000.0)
PEAKS = {p.model: p for p in GPU_PEAKS}


def make_run(run_id="r1", variant="baseline", started_at="2026-11-29T18:00:00+00:00", scale=1.0, noise=0.01,
             env=H200, fail=None, complete=True, mode="leaderboard", message="", commit="0123abc"):
    cases = []
    for i, case in enumerate(BENCH):
        if fail == i:
            cases.append(CaseResult(case, Status.FAIL, message or "mismatch at [3, 7]: got 1.5, expected 2.0"))
            continue
        base = BASE_NS[i] * scale
        samples = [base * (1 + noise * d) for d in (-1.5, -0.5, 0.5, 1.5)]
        cases.append(CaseResult(case, Status.PASS, message, tuple(samples), summarize(samples), 60, 0.5))
    gm = geomean([c.stats.mean_ns for c in cases]) if fail is None and complete else None
    return RunRecord(run_id, started_at, mode, "official", "benchmarks", 7,
                     SubmissionInfo(variant, f"submissions/{variant}/submission.py", "cd" * 32, {}),
                     env, tuple(cases), complete, commit, gm)


# ---------------------------------------------------------------------------------------------- formats
def test_markdown_has_per_shape_figures_and_sol():
    run = make_run()
    md = report(run, "md")
    mean = run.cases[0].stats.mean_ns
    assert mean == pytest.approx(40_000.0)
    assert "| 1 | g2_n3072_k4096 | pass | 4 | 40.00 |" in md             # shapes numbered from 1
    assert f"| {tflops_at(BENCH[0], mean):.1f} |" in md                                  # TFLOP/s
    assert f"| {100 * sol_ns(BENCH[0], PEAKS['H200']) / mean:.1f} |" in md               # % SOL H200
    assert "| 2.406 |" in md and "| 1.525 |" in md                                       # the task's B200 SOL
    assert "% SOL H200" in md and "SOL B200 us (task)" in md
    assert "## Speed of light by GPU model" in md
    assert "| B200 | 7274 | 7274 | 7.68 | 947 |" in md                                   # peaks table
    assert "| H200 | 989.4 | 1978.9 | 4.8 | 206 |" in md
    assert f"geomean of per-shape means over 2 shapes: {fmt_us(run.geomean_ns)} us" in md
    assert "INCOMPLETE" not in md


def test_markdown_marks_incomplete_runs_and_cpu_runs_have_no_gpu_sol():
    md = report(make_run(complete=False, env=CPU, fail=1, message="boom | pipe"), "md")
    assert "INCOMPLETE: this run never finished" in md
    assert "% SOL" not in md.split("## Speed of light")[0]          # no GPU peak for a CPU-timed run
    assert "SOL B200 us (task)" in md
    assert "boom \\| pipe" in md                                    # a pipe in a message cannot break the table
    partial = make_run(complete=False)
    assert run_geomean_ci(partial) is None and run_status(partial) == "incomplete (2 cases recorded)"
    assert run_geomean_ci(make_run()) is not None


def test_run_sections_say_how_the_worker_was_confined_and_carry_the_run_notes():
    run = dataclasses.replace(make_run(), sandbox="auto via landlock7: held writes, reads",
                              notes=("shape 2: the worker replaced a timer <b>",))
    md, html = report(run, "md"), report(run, "html")
    assert "Worker confinement: auto via landlock7: held writes, reads." in md
    assert "Note: shape 2: the worker replaced a timer <b>" in md
    assert "Note: shape 2: the worker replaced a timer &lt;b&gt;" in html
    assert "Worker confinement: not recorded (a run from before it was)." in report(make_run(), "md")


def test_csv_parses_with_the_documented_columns():
    runs = [make_run(), make_run("r2", "fast", scale=0.5, fail=1)]
    rows = list(csv.DictReader(io.StringIO(report(runs, "csv"))))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    assert len(rows) == 4
    assert float(rows[0]["mean_us"]) == pytest.approx(40.0)
    assert float(rows[0]["sol_b200_us"]) == pytest.approx(2.406, abs=5e-4)
    assert float(rows[0]["pct_of_sol_here"]) == pytest.approx(100 * sol_ns(BENCH[0], PEAKS["H200"]) / 40_000)
    assert float(rows[0]["ci95_low_us"]) < 40.0 < float(rows[0]["ci95_high_us"])
    assert rows[3]["status"] == "fail" and rows[3]["mean_us"] == "" and "mismatch" in rows[3]["message"]
    assert rows[2]["variant"] == "fast" and float(rows[2]["mean_us"]) == pytest.approx(20.0)


def test_json_round_trips_the_records():
    runs = [make_run(), make_run("r2", "other", env=B200, fail=0)]
    doc = json.loads(report(runs, "json"))
    assert doc["format"] == "fp4bench-report" and doc["version"] == 1
    assert [run_from_dict(d) for d in doc["runs"]] == runs
    fig = doc["figures"][0]
    low, high = fig["geomean_ci95_ns"]
    assert low < runs[0].geomean_ns < high
    assert fig["cases"][0]["sol_b200_ns"] == pytest.approx(2406, abs=1)
    assert doc["figures"][1]["geomean_ci95_ns"] is None and doc["figures"][1]["gpu_model"] == "B200"
    assert {p["model"] for p in doc["gpu_peaks"]} >= {"B200", "H200"}


def test_html_is_self_contained_with_embedded_pictures_and_escapes_text():
    runs = [make_run(message="<script>alert(1)</script>"), make_run("r2", "fast", scale=0.5)]
    page = report(runs, "html")
    assert page.startswith("<!DOCTYPE html>")
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 2                                         # per-shape bars and the roofline
    for data in images:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"https?://|//cdn|<link|<script", page, re.IGNORECASE)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "40.00" in page and "Ranking: nvfp4_group_gemm benchmarks on H200" in page


def test_html_without_matplotlib_says_so(monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: False)
    page = report(make_run(), "html")
    assert "matplotlib is not installed" in page and "data:image/png" not in page


def test_report_rejects_bad_requests():
    with pytest.raises(ReportError, match="unknown report format 'pdf'"):
        report(make_run(), "pdf")
    with pytest.raises(ReportError, match="no runs"):
        report([], "md")


def test_shape_label():
    assert shape_label(BENCH[0]) == "g2_n3072_k4096"
    assert shape_label(Case((80, 128), (256, 256), (512, 512), 2, 1)) == "G=2 M=[80,128] N=256 K=512"


# ------------------------------------------------------------------------------- templates vs the model
#: Text that HTML must escape and Markdown must keep inside one cell.
HOSTILE = "<script>alert(1)</script> & a|b \\ x"


class _Tables(HTMLParser):
    """Every table of a page as (header cells, body rows), cell text unescaped; counts <img> tags."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: list[tuple[list[str], list[list[str]]]] = []
        self.images = 0
        self._cell: list[str] | None = None
        self._row: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append(([], []))
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "tr":
            self._row = []
        elif tag == "img":
            self.images += 1

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr":
            header, rows = self.tables[-1]
            if header:
                rows.append(self._row)
            else:
                header.extend(self._row)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_tables(page: str) -> tuple[list, int]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables, parser.images


def md_tables(md: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every pipe table: header cells and body rows, escaped pipes and backslashes undone, no separator row."""
    def cells(line: str) -> list[str]:
        parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        return [re.sub(r"\\(.)", r"\1", p.strip()) for p in parts]

    tables, block = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            block.append(cells(line))
        elif block:
            tables.append((block[0], block[2:]))
            block = []
    return tables


def model_tables(sections, newline: str = "\n") -> list[tuple[list[str], list[list[str]]]]:
    return [(item.columns, [[cell_text(c).replace("\n", newline) for c in row] for row in item.rows])
            for sec in sections for item in sec.items if isinstance(item, Table)]


def hostile_runs():
    return [make_run(variant="a&b<i>", message=HOSTILE), make_run("r2", "fast", scale=0.5, fail=1, message=HOSTILE)]


def test_html_and_markdown_tables_hold_the_models_cells_and_pictures():
    sections = report_sections(hostile_runs(), pictures=True)
    expected = model_tables(sections)
    assert len(expected) == 6   # runs, across runs, each run's cases, GPU peaks, SOL per shape (r2 failed)
    assert any(HOSTILE in row[-1] for _, rows in expected for row in rows)    # the message column
    tables, images = html_tables(render_html(sections, "t"))
    assert tables == expected
    assert images == sum(isinstance(i, Image) for sec in sections for i in sec.items) == 2
    md = render_md(sections)
    assert md_tables(md) == model_tables(sections, newline=" ")
    assert md.count("picture omitted in markdown") == 2


def test_html_escapes_markup_and_ampersands_in_every_text():
    page = report(hostile_runs(), "html")
    assert "<script" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; a|b" in page
    assert "a&amp;b&lt;i&gt;" in page                                         # a variant name, in cells and headers
    tables, _ = html_tables(page)
    assert ["a&b<i>", "r1"] == tables[0][1][0][:2]                           # and reads back as written


@pytest.mark.skipif(not shutil.which("chromium"), reason="needs chromium (apt-get install chromium)")
def test_headless_chromium_reads_the_same_table_cells(tmp_path):
    sections = report_sections(hostile_runs(), pictures=True)
    page = tmp_path / "report.html"
    page.write_text(render_html(sections, "fp4bench"))
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    tables, images = html_tables(dom)
    assert tables == model_tables(sections)
    assert images == 2 and "<script" not in dom


# ------------------------------------------------------------------------------------------------ boards
def test_leaderboards_rank_latest_passing_run_per_variant_and_gpu_with_ties():
    runs = [
        make_run("a1", "alpha", "2026-11-29T10:00:00+00:00", scale=1.00),
        make_run("a2", "alpha", "2026-11-29T11:00:00+00:00", scale=0.50, fail=0),     # newer but failed
        make_run("b1", "beta", "2026-11-29T10:30:00+00:00", scale=1.005),              # overlaps alpha
        make_run("c1", "gamma", "2026-11-29T10:40:00+00:00", scale=2.0),               # clearly slower
        make_run("d1", "delta", "2026-11-29T10:50:00+00:00", scale=0.1, env=B200),     # another GPU
        make_run("e1", "eps", "2026-11-29T10:55:00+00:00", scale=0.1, complete=False),  # never finished
    ]
    boards = leaderboards(runs)
    assert [(b.gpu_model, b.shape_set) for b in boards] == [("B200", "benchmarks"), ("H200", "benchmarks")]
    h200 = boards[1]
    assert [(e.variant, e.run.run_id, e.rank, e.tied_with) for e in h200.entries] == [
        ("alpha", "a1", 1, ("beta",)), ("beta", "b1", 1, ("alpha",)), ("gamma", "c1", 3, ())]
    alpha = h200.entries[0]
    expected_pct = 100 * geomean([sol_ns(c, PEAKS["H200"]) for c in BENCH]) / alpha.interval.estimate
    assert alpha.pct_sol == pytest.approx(expected_pct)
    md = leaderboard_report(boards, "md")
    assert "| =1 | alpha |" in md and "| =1 | beta |" in md and "| 3 | gamma |" in md
    rows = list(csv.DictReader(io.StringIO(leaderboard_report(boards, "csv"))))
    assert [r["variant"] for r in rows] == ["delta", "alpha", "beta", "gamma"]
    assert json.loads(leaderboard_report(boards, "json"))[1]["entries"][2]["rank"] == 3


def test_history_rows_compare_with_the_previous_comparable_run():
    runs = [make_run("h1", started_at="2026-11-29T10:00:00+00:00", scale=1.0, noise=0.001),
            make_run("h2", started_at="2026-11-29T11:00:00+00:00", scale=0.8, noise=0.001),
            make_run("h3", started_at="2026-11-29T12:00:00+00:00", scale=0.8, fail=0),
            make_run("h4", started_at="2026-11-29T13:00:00+00:00", scale=0.9, noise=0.001, env=B200),
            make_run("h5", started_at="2026-11-29T14:00:00+00:00", scale=0.9, noise=0.001)]
    rows = history_rows(reversed(runs))
    assert [r.run.run_id for r in rows] == ["h1", "h2", "h3", "h4", "h5"]
    assert rows[0].change is None
    assert rows[1].previous_run_id == "h1" and rows[1].change.verdict is SpeedVerdict.FASTER
    assert rows[1].change.ratio == pytest.approx(0.8)
    assert rows[2].change is None and rows[2].status == "failed (1 of 2 cases)"
    assert rows[3].previous_run_id is None                          # first run on a B200
    assert rows[4].previous_run_id == "h2" and rows[4].change.verdict is SpeedVerdict.SLOWER


# ----------------------------------------------------------------------------------------------- compare
def test_compare_table_renders_every_format():
    a = [10_000.0, 10_100.0, 9_900.0, 10_050.0]
    b = [20_000.0, 20_200.0, 19_800.0, 20_100.0]
    same = [20_010.0, 20_190.0, 19_790.0, 20_110.0]
    rows = [(BENCH[0], compare_samples(a, b)), ("second", compare_samples(same, b))]
    overall = compare_geomeans([summarize(a), summarize(same)], [summarize(b), summarize(b)])
    text = compare_table("mine", "ref", rows, overall)
    assert "A is 2x faster" in text and "no detectable difference" in text and "geomean" in text
    md = compare_table("mine", "ref", rows, overall, fmt="md")
    assert "| 1 | g2_n3072_k4096 | 10.01 | 20.02 | 0.5000 |" in md and "| mine is 2x faster |" in md
    assert "| all | geomean |" in md and "geometric mean of the per-pair ratios" in md      # the footer
    parsed = list(csv.DictReader(io.StringIO(compare_table("mine", "ref", rows, overall, fmt="csv"))))
    assert [r["verdict"] for r in parsed] == ["faster", "no detectable difference", "faster"]
    assert float(parsed[0]["ratio"]) == pytest.approx(0.5, rel=1e-3)
    doc = json.loads(compare_table("mine", "ref", rows, fmt="json"))
    assert doc["a"] == "mine" and len(doc["rows"]) == 2 and doc["rows"][0]["a_mean_us"] == pytest.approx(10.0125)
    with pytest.raises(ReportError, match="unknown compare format"):
        compare_table("a", "b", rows, fmt="pdf")


def test_titles_name_the_device_once_and_cpu_rates_are_not_zero():
    cpu = dataclasses.replace(CPU, driver="none")
    run = make_run(env=cpu, scale=10_000.0)          # 400 ms per call for 12.9 GFLOP: 0.0322 TFLOP/s
    md = report(run, "md")
    assert "Environment: CPU (x86_64), torch 2.11.0+cu130," in md and "(none)" not in md
    assert "times from a monotonic CPU clock" in md
    rate = tflops_at(BENCH[0], 400_000_000.0)
    assert f"{rate:.3g}" == "0.0322" and "| 0.0322 |" in md and "| 0.0 |" not in md
    assert "Environment: NVIDIA H200 (sm_90, driver 580.159), torch" in report(make_run(), "md")
    page = report(run, "html")
    assert "<td class=\"num\">0.0322</td>" in page


def test_an_interval_too_wide_to_mean_anything_says_too_few_samples():
    """3 samples of a bimodal CPU run (the first cold): the 95 % interval spans thousands of percent."""
    samples = (117e6, 0.55e6, 0.56e6)
    stats = summarize(samples)
    iv = mean_ci(stats)
    assert iv.rel_half_width > 30                                            # about +3500 %
    assert fmt_pm(iv) == "too few samples"
    assert fmt_pm(mean_ci(summarize((1.0e6, 1.01e6, 0.99e6)))) == "±2.5 %"
    run = make_run()
    run = dataclasses.replace(run, cases=(dataclasses.replace(run.cases[0], samples_ns=samples, stats=stats),
                                          run.cases[1]))
    md = report(run, "md")
    assert "| too few samples |" in md and "3547" not in md and "±" in md
    change = compare_geomeans([stats], [summarize((1.0e6, 1.01e6, 0.99e6))])
    assert fmt_change(change).endswith("(too few samples)")


def test_roofline_is_drawn_only_under_the_roof_of_the_gpu_the_run_used(monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "roofline_png", lambda peaks, points, shapes: drawn.append(
        ([p.model for p in peaks], {p.series for p in points})) or b"\x89PNG")
    page = report([make_run(), make_run("r2", "cpu_one", env=CPU)], "html")
    assert drawn == [(["H200"], {"baseline"})]                              # no B200 roof, no CPU points
    assert "Not on the roofline: cpu_one, timed on the CPU" in page
    assert 'alt="Roofline of H200, the GPU the runs were timed on' in page
    drawn.clear()
    page = report(make_run(env=CPU), "html")
    assert drawn == [] and page.count("data:image/png;base64,") == 1         # the bars only
    assert "Not on the roofline: baseline, timed on the CPU" in page


def test_roofline_labels_of_nearby_shapes_share_one_label():
    shapes = [("a", 100.0), ("b", 101.0), ("c", 300.0), ("d", 102.5), ("e", 1000.0)]
    placed = plots.label_clusters(shapes, 10.0, 10_000.0, named=False)
    assert [text for _, text in placed] == ["1, 2, 4", "3", "5"]             # numbered from 1, in x order
    assert placed[0][0] == pytest.approx((100.0 * 101.0 * 102.5) ** (1 / 3))
    assert [text for _, text in plots.label_clusters(shapes, 10.0, 10_000.0, named=True)][0] == "a, b, d"
    xs = [x for x, _ in placed]
    gaps = [math.log(b / a) / math.log(1000.0) for a, b in zip(xs, xs[1:])]
    assert min(gaps) >= plots.LABEL_GAP


def test_leaderboard_markdown_lists_shapes_as_rows():
    boards = leaderboards([make_run("a1", "alpha"), make_run("b1", "beta", scale=2.0)])
    md = leaderboard_report(boards, "md")
    assert "| # | shape | alpha us | beta us |" in md
    assert "| 1 | g2_n3072_k4096 | 40.00 | 80.00 |" in md and "| 2 | g2_n4096_k1536 | 25.00 | 50.00 |" in md


# ------------------------------------------------------------------------------------------------ plots
def test_plots_return_png_and_check_dimensions():
    bars = [[plots.Bar(10.0, 9.0, 11.0), plots.Bar(None, note="fail")]]
    png = plots.shape_bars_png(["s"], ["a", "b"], bars, sol_us=[2.0], sol_label="H200 SOL")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="1 shapes x 3 series"):
        plots.shape_bars_png(["s"], ["a", "b", "c"], bars)
    roof = plots.roofline_png(GPU_PEAKS[:2], [plots.RoofPoint("a", "s", 400.0, 300.0)], [("s", 400.0)])
    assert roof[:8] == b"\x89PNG\r\n\x1a\n"
    many = [(f"G=3 M=[{i},128,256] N=[384,256,128] K=[256,512,256]", 150.0 + i) for i in range(10)]
    assert plots.roofline_png(GPU_PEAKS, [], many)[:4] == b"\x89PNG"       # numbered labels with a key


# --------------------------------------------------------------------------------------------------- CLI
@pytest.fixture
def cli():
    group = click.Group()
    cli_reports.register(group)
    runner = CliRunner()
    return lambda *args: runner.invoke(group, list(args), env={"COLUMNS": "250"},
                                       catch_exceptions=False)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "results.sqlite"
    with ResultStore(path) as store:
        store.save(make_run("20261129-100000-aaaaaa", "alpha", "2026-11-29T10:00:00+00:00", scale=1.0))
        store.save(make_run("20261129-103000-bbbbbb", "beta", "2026-11-29T10:30:00+00:00", scale=1.005))
        store.save(make_run("20261129-104000-cccccc", "gamma", "2026-11-29T10:40:00+00:00", scale=2.0,
                            commit="feedbeef"))
        store.save(make_run("20261129-110000-dddddd", "alpha", "2026-11-29T11:00:00+00:00", scale=0.5, fail=1))
    return path


def test_cli_leaderboard_shows_ranks_and_ties(cli, db):
    result = cli("leaderboard", "--db", str(db))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "benchmarks on H200 (leaderboard, official data)" in out
    assert out.index("alpha") < out.index("beta") < out.index("gamma")
    assert len(re.findall(r"=1", out)) == 2 and re.search(r"│\s+3 │ gamma", out)
    assert "1 run not ranked: incomplete or not every case passed" in out
    assert "no passing leaderboard runs" in cli("leaderboard", "--db", str(db), "--gpu", "B200").output
    hint = " ".join(cli("leaderboard", "--db", str(db), "--mode", "benchmark").output.split())
    assert hint.endswith("(0 runs considered) 3 passing leaderboard runs there: fp4bench leaderboard --mode "
                         "leaderboard")
    assert " ".join(cli("leaderboard", "--db", str(db), "--gpu", "B200").output.split()).endswith(
        "only timed runs are ranked: fp4bench run --mode leaderboard (or benchmark); a test run times nothing")
    md = cli("leaderboard", "--db", str(db), "--format", "md").output
    assert "| =1 | alpha |" in md


def test_cli_report_formats_and_run_selection(cli, db, tmp_path):
    doc = json.loads(cli("report", "--db", str(db), "--format", "json").output)
    assert [r["run_id"] for r in doc["runs"]] == ["20261129-110000-dddddd"]          # latest by default
    md = cli("report", "20261129-10", "--db", str(db))
    assert md.exit_code == 1 and "matches 3 runs" in md.output
    md = cli("report", "20261129-1000", "20261129-1040", "--db", str(db)).output
    assert "## alpha: run 20261129-100000-aaaaaa" in md and "## gamma: run" in md and "| 40.00 |" in md
    out = tmp_path / "r" / "report.html"
    result = cli("report", "--leaderboard", "--db", str(db), "--format", "html", "--out", str(out))
    assert result.exit_code == 0 and "wrote" in result.output
    page = out.read_text()
    assert page.count("data:image/png;base64,") == 2 and "gamma" in page
    rows = list(csv.DictReader(io.StringIO(cli("report", "latest", "--db", str(db), "--format", "csv").output)))
    assert [r["status"] for r in rows] == ["pass", "fail"]
    assert cli("report", "x", "--leaderboard", "--db", str(db)).exit_code == 2


def test_cli_history_and_missing_store(cli, db, tmp_path):
    out = cli("history", "alpha", "--db", str(db)).output
    assert "20261129-100000-aaaaaa" in out and "20261129-110000-dddddd" in out and "failed (1 of 2" in out
    assert "no runs of 'nobody'" in cli("history", "nobody", "--db", str(db)).output
    missing = cli("leaderboard", "--db", str(tmp_path / "none.sqlite"))
    assert missing.exit_code == 1 and "no results store at" in missing.output
    assert not (tmp_path / "none.sqlite").exists()


def test_cli_history_shows_change_verdicts(cli, tmp_path):
    path = tmp_path / "h.sqlite"
    with ResultStore(path) as store:
        store.save(make_run("h1", "alpha", "2026-11-29T10:00:00+00:00", noise=0.001))
        store.save(make_run("h2", "alpha", "2026-11-29T11:00:00+00:00", scale=0.8, noise=0.001))
    out = cli("history", "alpha", "--db", str(path)).output
    assert "-20.0 %" in out and "faster" in out


def test_cli_leaderboard_lists_shapes_as_rows_numbered_from_1(cli, tmp_path):
    path = tmp_path / "u.sqlite"
    run = make_run("u1", "alpha")
    unnamed = dataclasses.replace(run, cases=tuple(dataclasses.replace(c, case=dataclasses.replace(c.case, name=""))
                                                   for c in run.cases))
    with ResultStore(path) as store:
        store.save(unnamed)
    out = cli("leaderboard", "--db", str(path)).output
    assert re.search(r"│ 1 │ G=2 M=\[192,320\] N=3072 K=4096 +│ +40\.00 │", out)
    assert re.search(r"│ 2 │ G=2 M=\[128,384\] N=4096 K=1536 +│ +25\.00 │", out)


def test_run_status_counts_skipped_cases_apart_from_failures():
    from dataclasses import replace

    base = make_run()
    passed = base.cases[0]
    skipped = CaseResult(passed.case, Status.SKIPPED, "needs sm_100a; this machine has no CUDA GPU")
    failed = CaseResult(passed.case, Status.FAIL, "output 0: 3 elements differ")
    assert run_status(replace(base, cases=(skipped, skipped))) == "skipped"
    assert run_status(replace(base, cases=(passed, skipped))) == "passed (1 of 2 skipped)"
    assert run_status(replace(base, cases=(failed, skipped))) == "failed (1 of 2 cases, 1 skipped)"
    assert run_status(replace(base, cases=(passed, passed))) == "passed"
