"""Options, settings files and shape sets given wrongly: one line naming what was expected and what came,
exit 113 (bad spec) or 2 (a malformed option), before anything runs; and the settings' own rules."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from tests.conftest import ROOT
from tests.harness.cli._cli_helpers import _flat, _run

from harness.cli.commands import main


@pytest.mark.parametrize("args, code, text", [
    (["--seed", "99999999999999999999999999"], 113, "combined with secret seed 99999999999999999999999999 gives"),
    (["--shapes", "m: [64]; n: [128]; k: [256]; g: 1; seed: 99999999999999999999999"], 113,
     "case seed 99999999999999999999999 does not fit torch.manual_seed (expected < 2**64)"),
    (["--seed", "-5"], 2, "Invalid value for '--seed': expected a non-negative integer, got -5"),
    (["--timeout", "0"], 2, "Invalid value for '--timeout': expected a number of seconds above 0 and at most 1e+06, "
                            "got 0"),
    (["--timeout", "nan"], 2, "expected a number of seconds above 0 and at most 1e+06, got nan"),
    (["--timeout", "inf"], 2, "expected a number of seconds above 0 and at most 1e+06, got inf"),
    (["--timeout", "1e300"], 2, "expected a number of seconds above 0 and at most 1e+06, got 1e300"),
    (["--timeout", "soon"], 2, "expected a number of seconds, got 'soon'"),
    (["--shapes", "configs/shapes/nothere.yml"], 113, "shape file configs/shapes/nothere.yml does not exist"),
    (["--settings", "configs/nothere.yml"], 113, "settings file configs/nothere.yml does not exist"),
    (["--cluster", "10.0.0.1:8786"], 113,
     "Error: --cluster 10.0.0.1:8786: expected a scheduler address (tcp://HOST:8786) or local:N"),
    (["--cluster", "local:0"], 113, "Error: --cluster local:0: expected local:N with N >= 1 workers"),
    (["--gpus", "0", "--cluster", "local:1"], 113, "Error: --gpus and --cluster cannot be used together"),
])
def test_bad_options_are_refused_before_running(args, code, text):
    result = _run(*args)
    assert result.exit_code == code
    assert text in " ".join(result.output.split())


def test_settings_file_that_is_not_yaml_or_is_a_shape_file(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("timing: [\n")
    result = _run("--settings", str(bad))
    assert result.exit_code == 113
    assert result.output == (f"Error: {bad}: not valid YAML at line 2, column 1: expected the node content, but "
                             f"found '<stream end>'\n")
    bad.write_bytes(b"timing:\n  max_runs: \xff\n")
    result = _run("--settings", str(bad))
    assert (result.exit_code, result.output) == (113, f"Error: {bad}: not a UTF-8 text file (byte 0xff at offset 20)\n")
    settings = tmp_path / "s.yml"
    settings.write_text("timing:\n  max_runs: 5\n")
    result = _run("--shapes", str(settings))
    assert result.exit_code == 113
    assert (f"{settings}: expected a mapping with a 'cases' list, or an official task.yml with 'tests' or "
            f"'benchmarks' lists, got a mapping with keys 'timing'") in " ".join(result.output.split())


def test_settings_keys_keep_their_kinds(tmp_path):
    from harness.parent.settings import Settings, SettingsError, load_settings

    path = tmp_path / "s.yml"
    path.write_text("timing:\n  max_runs: 5\n")
    assert load_settings(path) == Settings(max_runs=5)
    path.write_text("timing:\n  budget_s: {benchmark: 2}\n")  # the other modes keep their budgets
    assert load_settings(path).budget_s == (("benchmark", 2.0), ("leaderboard", 30.0), ("compare", 10.0))
    for text, message in (("timing:\n  max_runs: 2.5\n", "max_runs must be an int, got 2.5"),
                          ("timing:\n  max_runs: 0\n", "max_runs must be a positive finite number, got 0"),
                          ("timing:\n  budget_s: {profile: 1}\n",
                           "budget_s: 'profile' takes no timed samples; budgets are for benchmark, leaderboard, "
                           "compare"),
                          ("timing:\n  budget_s: {benchmrk: 3}\n",
                           "budget_s: 'benchmrk' is not a mode; budgets are for benchmark, leaderboard, compare"),
                          ("timing:\n  budget_s: {benchmark: -1}\n",
                           "budget_s: benchmark must be a positive number of seconds up to 1e\\+06, got -1"),
                          ("- timing\n",
                           "expected a mapping with sections 'timeouts', 'timing' and 'sandbox', got list"),
                          ("timing: 5\n", "section timing must map setting -> value, got 5"),
                          ("timing:\n  bogus_key: 3\n",
                           "unknown setting 'bogus_key' in section timing \\(settings: import_s, first_call_s, "),
                          ("timeouts:\n  firstcall_s: 3\n",
                           "unknown setting 'firstcall_s' in section timeouts; did you mean 'first_call_s'\\?"),
                          ("timeouts:\n  call_s: 1e3\n",
                           "call_s must be a float, got '1e3' \\(a string to YAML: write 1000 or 1.0e\\+3\\)"),
                          ("timeouts:\n  call_s: .nan\n", "call_s must be a positive finite number, got nan"),
                          ("timeouts:\n  call_s: .inf\n", "call_s must be a positive finite number, got inf"),
                          ("timeouts:\n  call_s: 1.0e+300\n", "call_s must be at most 1e\\+06 seconds, got 1e\\+300"),
                          ("timing:\n  budget_s: {benchmark: .inf}\n",
                           "budget_s: benchmark must be a positive number of seconds up to 1e\\+06, got inf"),
                          ("timing:\n  min_runs: 50\n  max_runs: 5\n", "min_runs \\(50\\) must not exceed max_runs \\(5\\)"),
                          ("timing:\n  warmup_samples: 12\n", "warmup_samples \\(12\\) must not exceed warmup_max \\(10\\)")):
        path.write_text(text)
        with pytest.raises(SettingsError, match=message):
            load_settings(path)


def test_the_config_file_states_the_defaults():
    """configs/run.yml documents the defaults; Settings holds them: the two must not drift apart."""
    from harness.parent.settings import DEFAULT_FILE, Settings, load_settings

    assert load_settings(DEFAULT_FILE) == Settings()


def test_a_mode_without_a_budget_is_refused():
    from harness.parent.settings import Settings

    assert Settings().stopping_rule("leaderboard").budget_ns == 30e9
    with pytest.raises(ValueError, match="no time budget for mode 'profile': budgets exist for benchmark, "
                                         "leaderboard, compare"):
        Settings().stopping_rule("profile")


def test_seed_that_is_not_an_integer_says_so():
    result = _run("--seed", "abc")
    assert result.exit_code == 2
    assert "Invalid value for '--seed': expected a non-negative integer, got 'abc' (not an integer)" in _flat(
        result.output)


def test_full_range_with_a_k_too_large_is_refused_up_front():
    result = _run("--data", "full-range", "--shapes", "m: [4]; n: [4]; k: [600000]; g: 1; seed: 1")
    assert result.exit_code == 113
    assert result.output == ("Error: --data full-range: full-range data cannot bound the fp16 output for K=600000: "
                             "its scales keep |C| <= 65504 only up to K=529920 (case m: [4]; n: [4]; k: [600000]; "
                             "g: 1; seed: 1)\n")


def test_a_case_too_large_for_memory_is_refused_naming_it():
    result = _run("--shapes", "m: [128]; n: [100000000000]; k: [256]; g: 1; seed: 1")  # about 840 TiB
    assert result.exit_code == 113
    assert re.fullmatch(r"Error: case m: \[128\]; n: \[100000000000\]; k: \[256\]; g: 1; seed: 1 needs about "
                        r"\d+\.\d GiB of (CPU|GPU) memory \(1 input a request, with their outputs and the exact "
                        r"reference, in fp4bench and 1 worker\); \d+\.\d GiB available\n", result.output), result.output


def test_unknown_shape_set_name_lists_auto_with_the_named_sets():
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", "smok", "--no-store"])
    assert result.exit_code == 113 and result.output.startswith(
        "Error: --shapes 'smok': expected a shape-set name of nvfp4_group_gemm (auto, benchmarks, smoke, tests), a "
        ".yml or text file")


def test_shapes_naming_a_folder_says_it_is_a_folder(tmp_path):
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", str(tmp_path),
                                       "--no-store"])
    assert (result.exit_code, result.output) == (
        113, f"Error: shape file {tmp_path}: expected a .yml or text file, got a folder\n")


@pytest.mark.parametrize("option", ["--mode", "--data"])
def test_leaderboard_mode_and_data_are_choices(tmp_path, option):
    result = CliRunner().invoke(main, ["leaderboard", "--db", str(tmp_path / "r.sqlite"), option, "bogus"])
    assert result.exit_code == 2
    assert f"Invalid value for '{option}': 'bogus' is not one of" in _flat(result.output)


@pytest.mark.parametrize("args, message", [
    (["run", "--mode", "benchmarks"], "Invalid value for '--mode': 'benchmarks' is not one of 'test', 'benchmark', "
                                      "'leaderboard', 'profile'. (see fp4bench run --help)"),
    (["run", "--bogus"], "No such option '--bogus'"),
    (["report", "--format", "pdf"], "Invalid value for '--format': 'pdf' is not one of 'md', 'html', 'csv', "
                                    "'json'. (see fp4bench report --help)"),
    (["runn"], "No such command 'runn'. Did you mean 'run'? (see fp4bench --help)"),
])
def test_usage_errors_are_one_line_with_exit_2(args, message):
    """An option value click rejects, an unknown option or command: exit 2 and one `Error:` line naming the
    command's --help, no usage block (click alone prints three lines)."""
    result = CliRunner().invoke(main, args, prog_name="fp4bench")
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.output


def test_a_case_pick_out_of_range_is_one_line_113():
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", "tests#11",
                                       "--no-store"])
    assert (result.exit_code, result.output) == (
        113, "Error: --shapes tests#11: expected a case number from 1 to 10, got '11'\n")


def test_timeout_bounds_the_calls_not_start_up_and_import(tmp_path):
    """A submission whose import takes 4 s passes under --timeout 3: the worker's start-up and the import keep
    import_s (300 s); before, the 3 s counted from the worker's start and the run ended 114, blamed on loading."""
    from harness.parent.settings import Settings

    assert Settings().with_timeout(3) == Settings(import_s=300.0, first_call_s=3.0, call_s=3.0)
    sub = tmp_path / "slow_import.py"
    reference = ROOT / "submissions" / "torch_reference" / "submission.py"
    sub.write_text("import time\ntime.sleep(4)\n" + reference.read_text())
    result = CliRunner().invoke(main, ["run", "--submission", str(sub), "--shapes", "smoke#2", "--timeout", "3",
                                       "--no-store"])
    assert result.exit_code == 0, result.output
    assert "pass" in result.output and "timeout" not in result.output


@pytest.mark.parametrize("args, message", [
    (["run", "--submission", "torch_reference", "--shapes", ""],
     "Invalid value for '--shapes': expected a value, got ''"),
    (["run", "--submission", "torch_reference", "--db", " "], "Invalid value for '--db': expected a path, got ' '"),
    (["leaderboard", "--db", ""], "Invalid value for '--db': expected a path, got ''"),
    (["export", ""], "Invalid value for 'SUBMISSION': expected a value, got ''"),
    (["check", ""], "Invalid value for 'FILE': expected a path, got ''"),
    (["compare", "torch_reference", ""], "Invalid value for 'B': expected a value, got ''"),
])
def test_an_empty_value_is_refused_not_read_as_the_current_folder(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and message in _flat(result.output), result.output


def test_a_problems_official_loop_fills_what_a_settings_file_leaves_at_its_default():
    """nvfp4_gemv times one call a sample and up to its own sample counts; a --settings file that sets max_runs
    keeps it (it was silently replaced), and one that leaves it gets the problem's."""
    from harness import plugs
    from harness.parent.settings import Settings

    gemv = plugs.get("nvfp4_gemv").timing
    plain = Settings().with_timing(gemv, "benchmark")
    assert (plain.calls_per_sample, plain.max_runs) == (gemv.calls_per_sample, gemv.max_samples_benchmark)
    mine = Settings(max_runs=5).with_timing(gemv, "leaderboard")
    assert (mine.calls_per_sample, mine.max_runs) == (gemv.calls_per_sample, 5)
