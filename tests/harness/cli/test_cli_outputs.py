"""Bad command-line input: a clear error naming what was expected and what came, exit 113 (bad spec) or 2 (a
malformed option), before anything runs."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.conftest import assert_kept_incomplete, interrupt_after_first_case

from harness.cli.commands import main
from harness.parent.registry import RegistryError
from harness.results.store import ResultStore


def _run(*args):
    return CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--no-store", *args])


@pytest.mark.parametrize("args, code, text", [
    (["--seed", "99999999999999999999999999"], 113, "combined with the secret seed gives"),
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


# --- errors a new user meets: one line, a clear exit code, before anything is measured --------------------
TINY = "m: [64]; n: [128]; k: [256]; g: 1; seed: 1"
ROOT = Path(__file__).resolve().parents[3]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _store_run(*args):
    return CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", TINY, *args])


def test_seed_that_is_not_an_integer_says_so():
    result = _run("--seed", "abc")
    assert result.exit_code == 2
    assert "Invalid value for '--seed': expected a non-negative integer, got 'abc' (not an integer)" in _flat(
        result.output)


def test_missing_submission_file_says_no_such_file():
    result = CliRunner().invoke(main, ["run", "--submission", "kernels/my_kernel.py", "--no-store"])
    assert result.exit_code == 113
    assert result.output == "Error: submission file kernels/my_kernel.py: no such file\n"


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


def test_db_that_is_not_a_store_is_refused_in_one_line(tmp_path):
    corrupt = tmp_path / "r.sqlite"
    corrupt.write_text("not a database " * 200)
    result = _store_run("--db", str(corrupt))
    assert result.exit_code == 1
    assert result.output == f"Error: {corrupt}: not a usable SQLite results store (file is not a database)\n"


@pytest.fixture
def read_only(tmp_path):
    """A current results store that this process cannot write: immutable when running as root (root ignores
    file modes), mode 0444 otherwise."""
    path = tmp_path / "ro.sqlite"
    ResultStore(path).close()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("running as root on a filesystem without chattr +i: no file here is read-only")
        yield path
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o444)
        yield path


def test_read_only_db_is_refused_before_measuring(read_only):
    result = _store_run("--db", str(read_only))
    assert result.exit_code == 1
    assert result.output == (f"Error: {read_only}: cannot write to the results store (attempt to write a readonly "
                             f"database)\n")


def test_db_that_is_a_folder_is_refused(tmp_path, monkeypatch):
    result = _store_run("--db", str(tmp_path))
    assert result.exit_code == 2 and f"Invalid value for '--db': File '{tmp_path}' is a directory." in result.output
    monkeypatch.setenv("FP4BENCH_DB", str(tmp_path))
    result = _store_run()
    assert result.exit_code == 1
    assert result.output == (f"Error: {tmp_path} is a folder; a results store is a file (e.g. "
                             f"{tmp_path / 'fp4bench.sqlite'})\n")


def test_db_in_a_missing_folder_is_created_and_said(tmp_path):
    db = tmp_path / "new" / "deeper" / "r.sqlite"
    result = _store_run("--db", str(db))
    assert result.exit_code == 0, result.output
    assert f"created folder {tmp_path / 'new' / 'deeper'} for the results store {db}\n" in result.output
    with ResultStore(db, create=False) as store:
        assert [r.submission.name for r in store.runs()] == ["torch_reference"]


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


# --- a new user's trial: every mistake one line naming what was expected and what came ------------------
@pytest.mark.parametrize("value", ["", " ", ","])
def test_empty_submission_is_refused(value):
    result = CliRunner().invoke(main, ["run", "--submission", value, "--no-store"])
    assert (result.exit_code, result.output) == (
        113, f"Error: --submission: expected a variant name, a folder or a .py file (several separated by "
             f"commas), got {value!r}\n")


def test_submission_that_is_not_a_python_file_is_refused(tmp_path):
    text = tmp_path / "g5.txt"
    text.write_text("def custom_kernel(data): pass\n")
    result = CliRunner().invoke(main, ["run", "--submission", str(text), "--no-store"])
    assert (result.exit_code, result.output) == (
        113, f"Error: expected a .py file or a variant folder, got {text}\n")


@pytest.mark.parametrize("extra", [[], ["--cluster", "local:1"]])
def test_a_variant_folder_with_a_link_is_refused_before_anything_runs(tmp_path, extra):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "submission.py").write_text("def custom_kernel(data):\n    return data\n")
    (folder / "data.bin").symlink_to("/etc/passwd")
    db = tmp_path / "r.sqlite"
    result = CliRunner().invoke(main, ["run", "--submission", str(folder), "--db", str(db)] + extra)
    assert (result.exit_code, result.output) == (
        113, f"Error: {folder}/data.bin is a symbolic link (to /etc/passwd); a variant's folder may hold only regular "
             f"files and folders\n")
    assert not db.exists()


@pytest.mark.parametrize("folder_is_a_file, message", [
    (False, "Error: --json {p}: expected an existing folder, got {p.parent}, which does not exist\n"),
    (True, "Error: --json {p}: expected a folder, got {p.parent}, which is a file\n"),
])
def test_json_target_is_checked_before_measuring(tmp_path, folder_is_a_file, message):
    target, db = tmp_path / "f" / "x.json", tmp_path / "r.sqlite"
    if folder_is_a_file:
        target.parent.write_text("")
    result = _store_run("--db", str(db), "--json", str(target))
    assert (result.exit_code, result.output) == (1, message.format(p=target))
    assert not db.exists()  # refused before the store was opened, so before anything was measured


@pytest.mark.parametrize("option", ["--json", "--worker-log"])
def test_output_that_is_a_folder_is_one_line_exit_1_before_measuring(tmp_path, option):
    db = tmp_path / "r.sqlite"
    result = _store_run("--db", str(db), option, str(tmp_path))
    assert (result.exit_code, result.output) == (1, f"Error: {option} {tmp_path}: expected a file, got a folder\n")
    assert not db.exists()


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


@pytest.mark.parametrize("option", ["--json", "--worker-log"])
def test_output_that_cannot_be_created_is_refused_before_measuring(tmp_path, option):
    # /proc/x.json: the folder passes os.access for root, but no file can be made there
    db = tmp_path / "r.sqlite"
    result = _store_run("--db", str(db), option, "/proc/x.json")
    assert (result.exit_code, result.output) == (
        1, f"Error: {option} /proc/x.json: cannot write to /proc/x.json (No such file or directory)\n")
    assert not db.exists()


def test_output_check_leaves_no_file_behind_and_keeps_an_existing_one(tmp_path):
    from harness.cli.outputs import check_writable

    new, old = tmp_path / "new.json", tmp_path / "old.json"
    old.write_text("kept")
    check_writable("--json", new)
    check_writable("--json", old)
    assert not new.exists() and old.read_text() == "kept"


def test_two_submissions_of_one_name_are_refused(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(ROOT / "tests" / "cases" / "shared" / "honest_torch.py", tmp_path / folder / "k.py")
    a, b = tmp_path / "a" / "k.py", tmp_path / "b" / "k.py"
    result = CliRunner().invoke(main, ["run", "--submission", f"{a},{b}", "--shapes", TINY, "--no-store"])
    assert (result.exit_code, _flat(result.output)) == (
        113, f"Error: two submissions are both named 'k' ({a} and {b}): results, --json files and the store tell "
             f"variants apart by name, so rename one")
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--shapes", TINY, "--no-store"])
    assert result.exit_code == 113 and "both named 'k'" in result.output
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference,torch_reference", "--shapes", TINY,
                                       "--no-store"])
    ref = ROOT / "submissions" / "torch_reference" / "submission.py"
    assert (result.exit_code, _flat(result.output)) == (
        113, f"Error: submission 'torch_reference' is given twice ({ref}); a run times each variant once")


def test_one_file_twice_is_allowed_for_compare():
    from harness.cli.run_setup import distinct_names
    from harness.parent.registry import resolve

    ref = resolve("torch_reference")
    distinct_names([ref, resolve("torch_reference")], same_file_ok=True)  # an A/A compare: no error
    with pytest.raises(RegistryError, match="given twice"):
        distinct_names([ref, resolve("torch_reference")])


def test_ctrl_c_kills_the_worker_at_once_instead_of_waiting_for_it(monkeypatch):
    """After Ctrl-C the worker may be stuck in the submission (hang.py): the session is released with no grace
    period (the worker killed at once); a run that ends normally gives the worker 10 s to exit."""
    from harness.parent import runner
    from harness.parent.case_runner import RunOptions
    from harness.parent.session import Session
    from harness.parent.process import EXIT_WAIT_S
    from harness.parent.registry import resolve
    from task.spec import load_shapes

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


def test_json_that_fails_at_the_end_says_where_the_run_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.cli.outputs.check_json", lambda *_: None)  # the folder vanishes mid-run
    target, db = tmp_path / "gone" / "x.json", tmp_path / "r.sqlite"
    result = _store_run("--db", str(db), "--json", str(target))
    with ResultStore(db, create=False) as store:
        (run,) = store.runs()
    assert result.exit_code == 1
    assert result.output.endswith(f"Error: cannot write --json file {target}: No such file or directory; run "
                                  f"{run.run_id} is kept in {db}\n")
    assert "Traceback" not in result.output


@pytest.fixture
def closed_fd():
    r, w = os.pipe()
    os.close(r), os.close(w)
    return w


@pytest.mark.parametrize("value, message", [
    ("abc", "POPCORN_FD: expected a file descriptor number, got 'abc'"),
    ("-3", "POPCORN_FD: expected a file descriptor number, got -3"),
    ("closed", "POPCORN_FD: expected an open descriptor, got {fd}, which is closed"),
])
def test_popcorn_fd_is_checked_before_measuring(tmp_path, monkeypatch, closed_fd, value, message):
    monkeypatch.setenv("POPCORN_FD", str(closed_fd) if value == "closed" else value)
    db = tmp_path / "r.sqlite"
    result = _store_run("--db", str(db))
    assert (result.exit_code, result.output) == (113, f"Error: {message.format(fd=closed_fd)}\n")
    assert not db.exists()


def test_popcorn_fd_open_read_only_is_refused(monkeypatch):
    r, w = os.pipe()
    try:
        monkeypatch.setenv("POPCORN_FD", str(r))
        result = _run("--shapes", TINY)
        assert (result.exit_code, result.output) == (
            113, f"Error: POPCORN_FD: expected a descriptor open for writing, got {r}, open read-only\n")
    finally:
        os.close(r), os.close(w)


def test_report_out_that_cannot_be_written_is_one_line(tmp_path):
    db = tmp_path / "r.sqlite"
    assert _store_run("--db", str(db)).exit_code == 0
    result = CliRunner().invoke(main, ["report", "latest", "--db", str(db), "--out", "/proc/nope/x.md"])
    assert (result.exit_code, result.output) == (
        1, "Error: cannot write --out /proc/nope/x.md: No such file or directory (/proc/nope)\n")


@pytest.mark.parametrize("option", ["--mode", "--data"])
def test_leaderboard_mode_and_data_are_choices(tmp_path, option):
    result = CliRunner().invoke(main, ["leaderboard", "--db", str(tmp_path / "r.sqlite"), option, "bogus"])
    assert result.exit_code == 2
    assert f"Invalid value for '{option}': 'bogus' is not one of" in _flat(result.output)


def test_closed_stdout_exits_141_quietly_and_keeps_the_run(tmp_path):
    """``fp4bench run ... | head -0``: the reader is gone before the table is printed."""
    db = tmp_path / "r.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "--submission", "torch_reference",
                             "--shapes", TINY, "--db", str(db)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, stderr
    # quiet: the progress lines (stderr is still read) and no error or traceback
    assert stderr.splitlines()[-1] == "torch_reference test: shape 1 of 1 pass"
    assert all(line.startswith("torch_reference test: ") for line in stderr.splitlines())
    with ResultStore(db, create=False) as store:
        assert [r.submission.name for r in store.runs()] == ["torch_reference"]


_PRINTS = """
import sys
from honest_torch import custom_kernel as honest

def custom_kernel(data):
    print("hello from the kernel")
    print("and from its stderr", file=sys.stderr)
    return honest(data)
"""


def test_worker_log_keeps_the_submissions_prints(tmp_path):
    """--worker-log: the parent appends the worker's stdout and stderr, under a header naming the variant, when
    the worker ends (test mode: one correctness call per shape, so one print per shape)."""
    from tests.conftest import SHARED_CASES

    shutil.copy(SHARED_CASES / "honest_torch.py", tmp_path)
    (tmp_path / "prints.py").write_text(_PRINTS)
    log = tmp_path / "worker.log"
    two = "m: [64]; n: [128]; k: [256]; g: 1; seed: 1\nm: [32]; n: [256]; k: [128]; g: 1; seed: 2"
    shapes = tmp_path / "two.txt"
    shapes.write_text(two)
    result = CliRunner().invoke(main, ["run", "--submission", str(tmp_path / "prints.py"), "--shapes", str(shapes),
                                       "--no-store", "--worker-log", str(log)])
    assert result.exit_code == 0, result.output
    text = log.read_text()
    assert re.match(r"=== prints: worker pid \d+, exit 0, ended \S+, \d+ bytes of output ===\n", text), text[:200]
    assert text.count("hello from the kernel\n") == 2 and text.count("and from its stderr\n") == 2


def test_worker_log_in_a_missing_folder_is_refused_before_anything_runs(tmp_path):
    target = tmp_path / "nothere" / "worker.log"
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", TINY, "--no-store",
                                       "--worker-log", str(target)])
    assert result.exit_code == 1
    assert result.output == (f"Error: --worker-log {target}: expected an existing folder, got {target.parent}, "
                             "which does not exist\n")


def test_json_of_several_submissions_says_where_each_file_went(tmp_path):
    """--json FILE with two submissions writes FILE-<name>.json per submission and says so, one line each."""
    honest = ROOT / "tests" / "cases" / "shared" / "honest_torch.py"
    out = tmp_path / "multi.json"
    result = CliRunner().invoke(main, ["run", "--submission", f"torch_reference,{honest}", "--shapes", TINY,
                                       "--no-store", "--json", str(out)])
    assert result.exit_code == 0, result.output
    written = [tmp_path / "multi-torch_reference.json", tmp_path / "multi-honest_torch.json"]
    assert not out.exists() and all(json.loads(p.read_text())["submission"]["name"] for p in written)
    lines = [line.strip() for line in result.output.splitlines() if line.strip().startswith("--json written to")]
    assert lines == [f"--json written to {p}" for p in written]


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


def test_a_file_built_for_another_gpu_is_named_before_it_runs(tmp_path):
    sub = tmp_path / "bw.py"
    sub.write_text('PTX = "tcgen05.mma.cta_group::1"\n\n\ndef custom_kernel(data):\n    raise RuntimeError("no")\n')
    result = CliRunner().invoke(main, ["run", "--submission", str(sub), "--shapes", "smoke#2", "--no-store",
                                       "--timeout", "120"])
    assert result.exit_code == 112, result.output
    note, *progress = result.stderr.splitlines()
    assert note == (
        "note: bw looks built for sm_100a (line 1: PTX = \"tcgen05.mma.cta_group::1\"); this machine has no CUDA "
        "GPU: running it anyway; a '#!FP4BENCH requires sm_100a' line at its top would skip it here")
    assert progress[0] == "bw test: starting the worker, loading the submission"  # then it runs


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
    assert "correctness call" not in result.stdout and "torch_reference: test mode" in result.stdout


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
