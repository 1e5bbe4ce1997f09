"""Where a run's results go: the results store (--db, $FP4BENCH_DB), --json, --worker-log, POPCORN_FD,
report --out and stdout. A target that cannot be written is refused in one line before anything is
measured; one that fails at the end says where the run is kept."""
from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.conftest import ROOT
from tests.harness.cli._cli_helpers import TINY, _run, _store_run

from harness.cli.commands import main
from harness.results.store import DEFAULT_DB, ResultStore


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


def test_a_store_that_fails_mid_run_loses_nothing_measured(tmp_path, monkeypatch):
    """The store turns unwritable after the run began (disk full, made read-only): every shape still runs, the
    table and the --json file hold them all, and one line says the run was not stored and where it is."""
    from harness.results.store import StoreError

    def add_case(self, run_id, result, index):
        raise StoreError(f"{self.path}: cannot write to the results store (disk I/O error)")

    monkeypatch.setattr(ResultStore, "add_case", add_case)
    target, db, shapes = tmp_path / "x.json", tmp_path / "r.sqlite", tmp_path / "two.txt"
    shapes.write_text(f"{TINY}\n{TINY.replace('seed: 1', 'seed: 2')}\n")
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", str(shapes),
                                       "--db", str(db), "--json", str(target)])
    assert result.exit_code == 1, result.output
    assert [c["status"] for c in json.loads(target.read_text())["cases"]] == ["pass", "pass"]
    assert result.output.endswith(f"Error: {db}: cannot write to the results store (disk I/O error); 1 run(s) not "
                                  f"stored: the results are in {target} and the table above\n")
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


def _default_store_files() -> dict[str, tuple[int, int]]:
    """Size and mtime (ns) of the checkout's default store and of SQLite's files beside it, by name; absent
    ones are left out."""
    files = [DEFAULT_DB.with_name(DEFAULT_DB.name + suffix) for suffix in ("", "-journal", "-wal", "-shm")]
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in files if p.exists()}


def test_a_run_that_stores_leaves_the_checkouts_default_store_alone(own_default_store, monkeypatch):
    """conftest.own_default_store's promise, end to end: ``fp4bench run`` without --db stores in the test's own
    $FP4BENCH_DB, opens no other store, and the checkout's results/fp4bench.sqlite (with SQLite's files beside
    it) is neither made nor changed. Should it change anyway, only another process (fp4bench used in this
    checkout meanwhile) may have done it: this run's id must not be in it."""
    opened = []
    real_init = ResultStore.__init__

    def spy(self, path, create=True):
        opened.append(Path(path).resolve())
        real_init(self, path, create)

    monkeypatch.setattr(ResultStore, "__init__", spy)
    before = _default_store_files()
    result = _store_run()
    after = _default_store_files()
    assert result.exit_code == 0, result.output
    assert opened == [own_default_store.resolve()] and DEFAULT_DB.resolve() != own_default_store.resolve()
    with ResultStore(own_default_store, create=False) as store:
        (run,) = store.runs()
    assert (run.submission.name, len(run.cases)) == ("torch_reference", 1)
    if after != before:  # written while this test ran, by another process: not with this run
        conn = sqlite3.connect(f"file:{DEFAULT_DB}?mode=ro", uri=True)
        try:
            assert conn.execute("SELECT count(*) FROM runs WHERE run_id = ?", (run.run_id,)).fetchone() == (0,)
        finally:
            conn.close()
