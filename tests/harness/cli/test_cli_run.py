"""A run from start to end as the user sees it: progress on stderr, the exit code when cases were skipped,
and Ctrl-C or SIGTERM (exit 128 + the signal, the measured cases kept, the worker killed at once)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal

import pytest
from click.testing import CliRunner
from tests.conftest import ROOT, assert_kept_incomplete, interrupt_after_first_case
from tests.harness.cli._cli_helpers import TINY, _run

from harness.cli.commands import main


def test_ctrl_c_outside_a_run_exits_130(monkeypatch):
    def interrupt(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr("harness.cli.commands.find_variants", interrupt)
    result = CliRunner().invoke(main, ["list"])
    assert (result.exit_code, result.output) == (130, "interrupted\n")


_SECOND_CASE_HANGS = """
import time
from honest_torch import custom_kernel as honest

def custom_kernel(data):
    if len(data[3]) == 1:  # the second case (one group) never returns
        time.sleep(3600)
    return honest(data)
"""


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_stopping_a_run_mid_case_exits_128_plus_the_signal_and_keeps_what_was_measured(tmp_path, signum, code):
    """SIGINT (Ctrl-C) or SIGTERM (kill, a cancelled CI job) while the worker is busy on case 2: case 1 stays in
    the store (the run marked finished, incomplete) and in the --json file; stderr says where each went."""
    shutil.copy(ROOT / "tests" / "cases" / "shared" / "honest_torch.py", tmp_path)
    sub = tmp_path / "second_hangs.py"
    sub.write_text(_SECOND_CASE_HANGS)
    shapes = tmp_path / "two.txt"
    shapes.write_text("m: [64, 40]; n: [128, 256]; k: [256, 512]; g: 2; seed: 7\n"
                      "m: [32]; n: [128]; k: [128]; g: 1; seed: 8\n")
    db, out = tmp_path / "r.sqlite", tmp_path / "out.json"
    code_seen, _, stderr = interrupt_after_first_case(["run", "--submission", str(sub), "--shapes", str(shapes),
                                                       "--db", str(db), "--json", str(out)], db, settle_s=1.0,
                                                      signum=signum)
    assert_kept_incomplete(db, code_seen, stderr, expected_code=code)  # settle_s: the worker is inside case 2
    assert f"interrupted: wrote the 1 finished case(s) of second_hangs to {out}" in stderr
    saved = json.loads(out.read_text())
    assert saved["complete"] is False and [c["status"] for c in saved["cases"]] == ["pass"]


def test_ctrl_c_kills_the_worker_at_once_instead_of_waiting_for_it(monkeypatch):
    """After Ctrl-C the worker may be stuck in the submission (hang.py): the session is released with no grace
    period (the worker killed at once); a run that ends normally gives the worker 10 s to exit."""
    from harness.parent import runner
    from harness.parent.case_runner import RunOptions
    from harness.parent.session import Session
    from harness.parent.process import EXIT_WAIT_S
    from harness.parent.registry import resolve
    from problems.nvfp4_group_gemm.spec import load_shapes

    waits = []
    monkeypatch.setattr(Session, "release", lambda self, wait_s=EXIT_WAIT_S: waits.append(wait_s))
    monkeypatch.setattr(Session, "reserve", lambda self, layouts: None)

    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_run_cases", interrupted)
    shapes = load_shapes(TINY)
    with pytest.raises(KeyboardInterrupt):
        runner.run(resolve("torch_reference"), shapes, RunOptions("test"))
    monkeypatch.setattr(runner, "_run_cases", lambda *_: None)
    runner.run(resolve("torch_reference"), shapes, RunOptions("test"))
    assert waits == [0.0, EXIT_WAIT_S] and EXIT_WAIT_S == 10.0


def test_a_run_where_every_case_was_skipped_exits_3():
    from harness.cli.exits import EXIT_NOTHING_RAN

    assert EXIT_NOTHING_RAN == 3
    result = CliRunner().invoke(main, ["run", "--submission", "cute_grouped", "--shapes", "smoke", "--no-store"])
    assert result.exit_code == 3, result.output
    text = " ".join(result.output.split())
    assert text.count("skipped") >= 3 and "needs sm_100a; this machine has no CUDA GPU" in text


def test_a_run_with_one_submission_measured_exits_as_that_one():
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference,cute_grouped", "--shapes", "smoke#2",
                                       "--no-store", "--timeout", "120"])
    assert result.exit_code == 0, result.output


def test_a_compare_where_both_sides_were_skipped_exits_3_and_says_so_in_json():
    result = CliRunner().invoke(main, ["compare", "cute_grouped", "cute_dense_per_group", "--shapes", "smoke#1",
                                       "--no-store", "--format", "json", "--out", os.devnull])
    assert result.exit_code == 3, result.output
    out = CliRunner().invoke(main, ["compare", "cute_grouped", "cute_dense_per_group", "--shapes", "smoke#1",
                                    "--no-store", "--format", "json"])
    assert json.loads(out.stdout)["exit_code"] == 3


def test_test_mode_prints_per_shape_progress_on_stderr_and_keeps_stdout_for_the_table():
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", "smoke", "--no-store",
                                       "--timeout", "120"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "torch_reference test: starting the worker, loading the submission",
        "torch_reference test: shape 1 of 3 (G=2 M=[64,40] N=[128,256] K=[256,512]): correctness call",
        "torch_reference test: shape 1 of 3 pass",
        "torch_reference test: shape 2 of 3 (G=1 M=128 N=128 K=256): correctness call",
        "torch_reference test: shape 2 of 3 pass",
        "torch_reference test: shape 3 of 3 (G=3 M=[4,76,132] N=[128,128,256] K=[64,128,256]): correctness call",
        "torch_reference test: shape 3 of 3 pass",
    ]
    assert "correctness call" not in result.stdout and "torch_reference: nvfp4_group_gemm, test mode" in result.stdout


def test_compare_progress_names_each_side_on_stderr_and_json_on_stdout_stays_clean(tmp_path):
    settings = tmp_path / "fast.yml"
    settings.write_text("timing:\n  min_runs: 2\n  max_runs: 2\n  warmup_max: 2\n  budget_s: {compare: 1}\n")
    result = CliRunner().invoke(main, ["compare", "torch_reference", "torch_reference", "--shapes", "smoke#2",
                                       "--no-store", "--settings", str(settings), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"][0]["a_status"] == "pass"
    lines = [re.sub(r"pass, [0-9.]+ us$", "pass, T us", line) for line in result.stderr.splitlines()]
    head = "torch_reference vs torch_reference"
    assert lines == [
        f"{head}: A (torch_reference): starting the worker, loading the submission",
        f"{head}: B (torch_reference): starting the worker, loading the submission",
        f"{head}: shape 1 of 1 (G=1 M=128 N=128 K=256): A (torch_reference): correctness call",
        f"{head}: shape 1 of 1: A (torch_reference): warm-up",
        f"{head}: shape 1 of 1: B (torch_reference): correctness call",
        f"{head}: shape 1 of 1: B (torch_reference): warm-up",
        f"{head}: shape 1 of 1: A (torch_reference): timing, the sides interleaved",
        f"{head}: shape 1 of 1: B (torch_reference): timing, the sides interleaved",
        f"{head}: shape 1 of 1: A (torch_reference) pass, T us",
        f"{head}: shape 1 of 1: B (torch_reference) pass, T us",
    ]


def test_the_console_says_how_the_worker_was_confined():
    result = _run("--shapes", TINY, "--sandbox", "off")
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("sandbox: off")
