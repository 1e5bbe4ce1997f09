"""Reports, leaderboards and history of runs of several problems: each problem's runs are labelled, costed and
ranked through its own plug, never mixed with another problem's."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness import plugs
from harness.cli.commands import main
from harness.hardware import peaks_for, sol_ns_of
from harness.report.boards import leaderboards
from harness.report.render import report
from harness.results.record import CaseResult, RunRecord, Status, SubmissionInfo
from harness.results.stats import geomean, summarize
from harness.results.store import ResultStore
from tests.harness.report.test_report import H200, make_run

GEMM = plugs.get("nvfp4_gemm")
CASES = (GEMM.parse_case({"m": 128, "n": 7168, "k": 16384, "l": 1, "seed": 1111}),
         GEMM.parse_case({"m": 128, "n": 4096, "k": 7168, "l": 1, "seed": 1111, "name": "second"}))


def gemm_run(run_id: str, variant: str, scale: float = 1.0) -> RunRecord:
    cases = []
    for i, case in enumerate(CASES):
        samples = [(20_000.0, 10_000.0)[i] * scale * (1 + 0.01 * d) for d in (-1, 0, 1, 2)]
        cases.append(CaseResult(case, Status.PASS, "", tuple(samples), summarize(samples), 200, 0.5))
    return RunRecord(run_id, "2026-12-01T10:00:00+00:00", "leaderboard", "official", "benchmarks", 7,
                     SubmissionInfo(variant, f"submissions/nvfp4_gemm/{variant}/submission.py", "ab" * 32, {}),
                     H200, tuple(cases), True, "0123abc", geomean([c.stats.mean_ns for c in cases]),
                     problem="nvfp4_gemm")


def test_boards_are_per_problem_and_costed_by_the_plug():
    runs = [make_run("g1", "grouped"), gemm_run("m1", "triton"), gemm_run("m2", "torch_reference", 3.0)]
    boards = {b.problem: b for b in leaderboards(runs)}
    assert set(boards) == {"nvfp4_group_gemm", "nvfp4_gemm"}
    gemm = boards["nvfp4_gemm"]
    assert gemm.title == "nvfp4_gemm benchmarks on H200 (leaderboard, official data)"
    assert boards["nvfp4_group_gemm"].title == "nvfp4_group_gemm benchmarks on H200 (leaderboard, official data)"
    assert [e.variant for e in gemm.entries] == ["triton", "torch_reference"]
    h200 = peaks_for("H200")
    sol = geomean([sol_ns_of(GEMM.flops(c), GEMM.bytes_moved(c), h200) for c in CASES])
    assert gemm.entries[0].pct_sol == pytest.approx(100 * sol / gemm.entries[0].interval.estimate)


def test_a_report_labels_the_cases_with_the_plug():
    md = report(gemm_run("m1", "triton"), "md")
    assert "| 1 | M=128 N=7168 K=16384 L=1 | pass | 4 | 20.10 |" in md
    assert "| 2 | second | pass | 4 | 10.05 |" in md
    assert md.count("| 8.994 |") == 1   # task.yml's B200 SOL of 128 x 7168 x 16384, from the plug's bytes
    flops = GEMM.flops(CASES[0])
    assert f"| M=128 N=7168 K=16384 L=1 | {flops / 1e9:.2f} |" in md   # the speed-of-light table, by the plug


def stored(tmp_path, *runs: RunRecord):
    """A results store under ``tmp_path`` holding ``runs``; its path."""
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as store:
        for run in runs:
            store.save(run)
    return db


def test_leaderboard_problem_filter(tmp_path):
    db = stored(tmp_path, make_run("g1", "grouped"), gemm_run("m1", "triton"))
    wide = {"COLUMNS": "200"}
    only = CliRunner().invoke(main, ["leaderboard", "--db", str(db), "--problem", "nvfp4_gemm"], env=wide)
    assert only.exit_code == 0 and "nvfp4_gemm benchmarks on H200" in only.output and "grouped" not in only.output
    both = CliRunner().invoke(main, ["leaderboard", "--db", str(db)], env=wide)
    assert "nvfp4_gemm benchmarks on H200" in both.output and "grouped" in both.output
    bad = CliRunner().invoke(main, ["leaderboard", "--db", str(db), "--problem", "gemm"])
    assert (bad.exit_code, bad.output) == (113, "Error: unknown problem 'gemm': expected one of nvfp4_dual_gemm, "
                                                "nvfp4_gemm, nvfp4_gemv, nvfp4_group_gemm\n")


def test_a_report_of_two_problems_names_each_and_compares_only_within_one():
    """Two problems' torch_reference runs: labelled <problem>/<name>, a problem column in the runs table and the
    CSV, "Across runs" and the speed-of-light analysis once per problem, never one table of both."""
    group = make_run("g1", "torch_reference")
    runs = [group, make_run("g2", "grouped"), gemm_run("m1", "torch_reference"), gemm_run("m2", "triton")]
    md = report(runs, "md")
    assert "| nvfp4_group_gemm/torch_reference | g1 | nvfp4_group_gemm | leaderboard |" in md
    assert "| nvfp4_gemm/torch_reference | m1 | nvfp4_gemm | leaderboard |" in md
    assert "## Across runs: nvfp4_group_gemm" in md and "## Across runs: nvfp4_gemm" in md
    assert "## Speed of light by GPU model: nvfp4_gemm" in md and "## Across runs\n" not in md
    csv_lines = report(runs, "csv").splitlines()
    assert csv_lines[0].startswith("run_id,variant,problem,mode,")
    assert {line.split(",")[2] for line in csv_lines[1:]} == {"nvfp4_group_gemm", "nvfp4_gemm"}
    assert "## Across runs\n" in report(runs[2:], "md")  # one problem: no name needed


def test_history_takes_a_problem_by_option_or_as_list_names_the_variant(tmp_path):
    db = stored(tmp_path, make_run("g1", "torch_reference"), gemm_run("m1", "torch_reference"))
    wide = {"COLUMNS": "200"}
    both = CliRunner().invoke(main, ["history", "torch_reference", "--db", str(db)], env=wide)
    assert both.exit_code == 0 and "g1" in both.output and "m1" in both.output and "problem" in both.output
    for args in (["nvfp4_gemm/torch_reference"], ["torch_reference", "--problem", "nvfp4_gemm"]):
        one = CliRunner().invoke(main, ["history", *args, "--db", str(db)], env=wide)
        assert one.exit_code == 0 and "m1" in one.output and "g1" not in one.output, one.output
        assert "history of torch_reference (nvfp4_gemm, leaderboard, benchmarks, H200)" in one.output
    clash = CliRunner().invoke(main, ["history", "nvfp4_gemm/torch_reference", "--problem", "nvfp4_gemv",
                                      "--db", str(db)])
    assert (clash.exit_code, clash.output) == (113, "Error: nvfp4_gemm/torch_reference is a variant of nvfp4_gemm, "
                                                    "not --problem nvfp4_gemv\n")


@pytest.mark.parametrize("problem, sizes, task_us", [
    ("nvfp4_dual_gemm", (256, 4096, 7168), 4.708), ("nvfp4_dual_gemm", (512, 4096, 7168), 8.714),
    ("nvfp4_dual_gemm", (256, 3072, 4096), 2.125), ("nvfp4_dual_gemm", (512, 3072, 7168), 6.535),
    ("nvfp4_gemm", (128, 7168, 16384), 8.994), ("nvfp4_gemm", (128, 4096, 7168), 2.354),
])
def test_the_task_sol_column_gives_task_yml_s_table(problem, sizes, task_us):
    """The "SOL B200 (task)" figure of each benchmark is its task.yml's, to the table's last digit where the
    task's own formula is known (dual_gemm's table assumes 6.90 PFLOP/s of FP4, the others 7.27)."""
    from harness.report.figures import sol_ns, task_peaks
    plug = plugs.get(problem)
    case = plug.parse_case(dict(zip(("m", "n", "k", "l", "seed"), (*sizes, 1, 1111))))
    assert sol_ns(case, task_peaks(plug), plug) / 1e3 == pytest.approx(task_us, abs=0.0015)
