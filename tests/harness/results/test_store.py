"""The SQLite results store: round trips, runs cut short, schema versions, queries. Records built by hand."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import schema as schema_mod
from harness.results.record import (
    MESSAGE_CHARS,
    CaseResult,
    Environment,
    RunRecord,
    Status,
    SubmissionInfo,
    new_run_id,
)
from harness.results.schema import schema_version
from harness.results.stats import geomean, summarize
from harness.results.store import (
    ResultStore,
    StoreError,
    StoreRecorder,
    resolve_db_path,
)
from problems.nvfp4_group_gemm.spec import Case

ROOT = Path(__file__).resolve().parents[3]

H200 = Environment("NVIDIA H200", "sm_90", "580.159", "2.11.0+cu130", "3.6.0", "not installed", "3.12.3",
                   "dev-box", "cuda-events")
BENCH = (
    Case((192, 320), (3072, 3072), (4096, 4096), 2, 1111, "g2_n3072_k4096"),
    Case((128, 384), (4096, 4096), (1536, 1536), 2, 1111, "g2_n4096_k1536"),
    Case((96, 128), (128, 256), (256, 512), 2, 1111, "small"),
)


def case_result(case: Case, samples: list[float], status: Status = Status.PASS, message: str = "") -> CaseResult:
    return CaseResult(case, status, message, tuple(samples), summarize(samples) if samples else None,
                      calls_checked=15 * len(samples), wall_s=0.25)


def make_run(run_id: str = "r1", variant: str = "baseline", started_at: str = "2026-11-29T18:00:00+00:00",
             mode: str = "leaderboard", env: Environment = H200, scale: float = 1.0, fail_last: bool = False,
             complete: bool = True, shape_set: str = "benchmarks") -> RunRecord:
    cases = []
    for i, case in enumerate(BENCH):
        base = (40_000.0, 25_000.0, 3_000.0)[i] * scale
        samples = [base * (1 + 0.01 * j) for j in (-1, 0, 1, 2)]
        if fail_last and i == len(BENCH) - 1:
            cases.append(case_result(case, [], Status.FAIL, "mismatch at [3, 7]: got 1.5, expected 2.0"))
        else:
            cases.append(case_result(case, samples))
    gm = geomean([c.stats.mean_ns for c in cases]) if not fail_last else None
    return RunRecord(run_id, started_at, mode, "official", shape_set, 42,
                     SubmissionInfo(variant, f"submissions/{variant}/submission.py", "ab" * 32,
                                    {"leaderboard": "nvfp4_group_gemm", "gpu": "B200"}),
                     env, tuple(cases), complete, "0123abc", gm)


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "results" / "fp4bench.sqlite"


def test_save_and_load_round_trip(db):
    run = make_run()
    with ResultStore(db) as store:
        store.save(run)
    with ResultStore(db) as store:
        back = store.load("r1")
    assert back == run
    assert back.cases[0].samples_ns == run.cases[0].samples_ns
    assert back.cases[0].case.name == "g2_n3072_k4096"
    assert back.to_dict() == run.to_dict()


def test_begin_add_case_finish_is_the_runner_protocol(db):
    run = make_run()
    with ResultStore(db) as store:
        store.begin(dataclasses.replace(run, cases=(), complete=False, geomean_ns=None))
        assert store.load("r1").complete is False and store.finished_at("r1") is None
        for i, case in enumerate(run.cases):
            store.add_case("r1", case, i)
        store.finish("r1", run.geomean_ns, complete=True)
        back = store.load("r1")
        assert back == run and back.passed
        assert store.finished_at("r1") is not None
        with pytest.raises(StoreError, match="already finished"):
            store.finish("r1", None, complete=False)
        with pytest.raises(StoreError, match="already finished"):
            store.add_case("r1", run.cases[0], 9)


def test_a_15_mb_message_is_stored_cut_to_the_cap_with_its_first_and_last_lines(db):
    """A submission's 15 MB exception once added 31 MB per case (the message column and record_json); it is
    stored cut to MESSAGE_CHARS, its head and tail kept, in the column, in record_json and in what loads back."""
    first, last = "raised: ValueError: boom", '  File "k.py", line 3, in custom_kernel'
    message = "\n".join([first] + ["y" * 99] * 150_000 + [last])
    assert len(message) == 15_000_064
    run = make_run(fail_last=True)
    big = dataclasses.replace(run.cases[-1], message=message)
    assert len(big.message) <= MESSAGE_CHARS  # the record itself holds it cut
    with ResultStore(db) as store:
        store.begin(dataclasses.replace(run, cases=(), complete=False))
        store.add_case(run.run_id, big, 0)
        store.finish(run.run_id, None, complete=True)
        back = store.load(run.run_id).cases[0]
    with sqlite3.connect(db) as conn:
        stored, body = conn.execute("SELECT message, record_json FROM cases").fetchone()
    assert stored == back.message == big.message == json.loads(body)["message"]
    assert MESSAGE_CHARS - 200 < len(stored) <= MESSAGE_CHARS
    lines = stored.splitlines()
    assert (lines[0], lines[-1]) == (first, last)
    cut = [line for line in lines if line.startswith("[... ")]
    assert cut == [f"[... {len(message) - len(stored) + len(cut[0]) + 2} characters cut ...]"]
    assert os.path.getsize(db) < 512 * 1024  # the message twice, bounded, and the rest of the run


def test_protocol_errors_are_specific(db):
    run = make_run()
    with ResultStore(db) as store:
        with pytest.raises(StoreError, match="begin takes a run in progress"):
            store.begin(run)
        with pytest.raises(StoreError, match="call begin"):
            store.add_case("nope", run.cases[0], 0)
        with pytest.raises(StoreError, match="no run 'nope'"):
            store.finish("nope", None, False)
        with pytest.raises(StoreError, match="no run 'nope'"):
            store.load("nope")
        store.save(run)
        with pytest.raises(StoreError, match="already in"):
            store.save(run)


def test_a_case_is_stored_whole_or_not_at_all(db):
    run = make_run(complete=False)
    with ResultStore(db) as store:
        store.begin(dataclasses.replace(run, cases=()))
        store.add_case("r1", run.cases[0], 0)
        broken = CaseResult(BENCH[1], Status.PASS, "", (1.0, "not a number"), None)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            store.add_case("r1", broken, 1)
        with pytest.raises(StoreError, match="already stored"):
            store.add_case("r1", run.cases[1], 0)
        assert [c.case.name for c in store.load("r1").cases] == ["g2_n3072_k4096"]
        store.add_case("r1", run.cases[1], 1)          # the failed attempt left nothing behind
        assert len(store.load("r1").cases) == 2


_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from harness.results.record import RunRecord, run_from_dict
from harness.results.store import ResultStore
d = json.loads(sys.stdin.read())
run = run_from_dict(d)
store = ResultStore(sys.argv[2])
store.begin(RunRecord(**{**run.__dict__, "cases": (), "complete": False, "geomean_ns": None}))
for i, case in enumerate(run.cases[:2]):
    store.add_case(run.run_id, case, i)
print("measured two", flush=True)
time.sleep(120)
"""


def test_run_killed_midway_keeps_its_cases_and_stays_incomplete(db):
    run = make_run()
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(ROOT), str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        child.stdin.write(json.dumps(run.to_dict()))
        child.stdin.close()
        assert child.stdout.readline().strip() == "measured two"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    with ResultStore(db) as store:
        back = store.load("r1")
        assert back.complete is False and not back.passed and back.geomean_ns is None
        assert back.cases == run.cases[:2]
        assert store.latest(complete=False).run_id == "r1"
        assert store.runs(passed=True) == []


def test_fresh_file_is_marked_and_versioned(db):
    with ResultStore(db) as store:
        assert store.version == schema_version() == len(schema_mod.MIGRATIONS)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == schema_mod.APPLICATION_ID
    conn.close()


def test_newer_schema_is_refused_with_a_clear_error(db):
    ResultStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {schema_version() + 1}")
    conn.commit()
    conn.close()
    v = schema_version()
    with pytest.raises(StoreError, match=rf"newer fp4bench \(schema v{v + 1}\); this one reads up to v{v}"):
        ResultStore(db)


def test_foreign_files_are_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (x TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not an fp4bench results store"):
        ResultStore(other)
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a database at all " * 100)
    with pytest.raises(StoreError, match="not a usable SQLite"):
        ResultStore(text)
    with pytest.raises(StoreError, match="no results store at"):
        ResultStore(tmp_path / "missing.sqlite", create=False)
    assert not (tmp_path / "missing.sqlite").exists()


def test_older_file_is_migrated_in_order_and_keeps_its_runs(db, monkeypatch):
    with ResultStore(db) as store:              # a file at today's version with a run in it
        store.save(make_run())

    def add_note(conn):
        conn.execute("ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT ''")

    monkeypatch.setattr(schema_mod, "MIGRATIONS", [*schema_mod.MIGRATIONS, add_note])
    with ResultStore(db) as store:
        assert store.version == schema_version() == len(schema_mod.MIGRATIONS)
        assert store.load("r1") == make_run()
        store.save(make_run("r2"))
    conn = sqlite3.connect(db)
    assert [r[0] for r in conn.execute("SELECT note FROM runs ORDER BY run_id")] == ["", ""]
    conn.close()


def test_failed_migration_leaves_the_file_at_its_old_version(db, monkeypatch):
    ResultStore(db).close()

    def broken(conn):
        conn.execute("ALTER TABLE runs ADD COLUMN note TEXT")
        raise RuntimeError("step failed halfway")

    monkeypatch.setattr(schema_mod, "MIGRATIONS", [*schema_mod.MIGRATIONS, broken])
    with pytest.raises(RuntimeError, match="halfway"):
        ResultStore(db)
    monkeypatch.undo()
    with ResultStore(db) as store:
        assert store.version == schema_version()
    conn = sqlite3.connect(db)
    assert "note" not in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    conn.close()


def test_an_older_store_that_cannot_be_written_says_it_needs_an_upgrade(db, monkeypatch):
    """Even a command that only reads upgrades an older file first; when it cannot write (here: another process
    holds the write lock), the message says which schema the file has and why a write is needed."""
    from harness.results import store as store_mod
    with ResultStore(db) as store:
        store.save(make_run())
    monkeypatch.setattr(schema_mod, "MIGRATIONS", [*schema_mod.MIGRATIONS, lambda conn: None])
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # readers may read, no one else may write
    try:
        with pytest.raises(StoreError) as info:
            ResultStore(db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    old, new = schema_version() - 1, schema_version()
    assert str(info.value) == (f"{db}: cannot upgrade this results store from schema v{old} to v{new}, which even a "
                               f"read needs (database is locked)")


def test_queries_filter_and_order(db):
    b200 = dataclasses.replace(H200, device="NVIDIA B200", compute_capability="sm_100")
    with ResultStore(db) as store:
        store.save(make_run("a1", "alpha", "2026-11-29T10:00:00+00:00"))
        store.save(make_run("a2", "alpha", "2026-11-29T12:00:00+00:00", fail_last=True))
        store.save(make_run("b1", "beta", "2026-11-29T11:00:00+00:00", env=b200))
        store.save(make_run("b2", "beta", "2026-11-29T13:00:00+00:00", mode="benchmark"))
        assert [r.run_id for r in store.runs()] == ["a1", "b1", "a2", "b2"]
        assert [r.run_id for r in store.runs(variant="alpha")] == ["a1", "a2"]
        assert [r.run_id for r in store.runs(passed=True, mode="leaderboard")] == ["a1", "b1"]
        assert [r.run_id for r in store.runs(passed=False)] == ["a2"]
        assert [r.run_id for r in store.runs(gpu="b200")] == ["b1"]
        assert [r.run_id for r in store.runs(limit=2)] == ["a2", "b2"]
        assert store.latest(variant="alpha").run_id == "a2"
        assert store.latest(variant="alpha", passed=True).run_id == "a1"
        assert store.latest(variant="gamma") is None
        assert store.runs(with_samples=False)[0].cases[0].samples_ns == ()
        assert store.resolve("latest") == "b2"
        assert store.resolve("b1") == "b1"
        with pytest.raises(StoreError, match="matches 2 runs"):
            store.resolve("b")
        with pytest.raises(StoreError, match="no run matches"):
            store.resolve("zz")


def test_db_path_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("FP4BENCH_DB", raising=False)
    assert resolve_db_path() == ROOT / "results" / "fp4bench.sqlite"
    monkeypatch.setenv("FP4BENCH_DB", str(tmp_path / "env.sqlite"))
    assert resolve_db_path() == tmp_path / "env.sqlite"
    assert resolve_db_path(tmp_path / "opt.sqlite") == tmp_path / "opt.sqlite"


def test_new_run_ids_differ():
    a, b = new_run_id(), new_run_id()
    assert a != b and len(a) == 12 and int(a, 16) >= 0


def test_store_recorder_follows_the_runner_hooks_and_forwards_them(db):
    run = make_run()
    seen = []

    class Inner:
        def __getattr__(self, name):
            return lambda *args: seen.append(name)

    with ResultStore(db) as store:
        rec = StoreRecorder(store, Inner())
        rec.on_start(dataclasses.replace(run, cases=(), complete=False, geomean_ns=None))
        for i, case in enumerate(run.cases):
            rec.on_case_start(i, case.case)
            rec.on_sample(i, 1)
            rec.on_case(i, case)
        assert store.load("r1").complete is False and len(store.load("r1").cases) == 3
        rec.on_finish(run)
        assert store.load("r1") == run
    assert seen[:4] == ["on_start", "on_case_start", "on_sample", "on_case"] and seen[-1] == "on_finish"


def test_run_notes_are_kept_on_the_run_and_cases_are_never_rewritten(db):
    run = dataclasses.replace(make_run(), notes=("the submission replaced time.perf_counter; fp4bench measures "
                                                 "with its own captured copy",))
    with ResultStore(db) as store:
        rec = StoreRecorder(store)
        rec.on_start(dataclasses.replace(run, cases=(), complete=False, geomean_ns=None, notes=()))
        for i, case in enumerate(run.cases):
            rec.on_case(i, case)
        rec.on_finish(run)
        back = store.load("r1")
    assert back == run and back.notes == run.notes
    assert [c.message for c in back.cases] == [c.message for c in make_run().cases]


def test_a_v2_store_gains_notes_and_keeps_its_cases_and_cuda_failures(db, monkeypatch):
    """A store written before run notes (schema v2) and before the CUDA-failure fact: its runs load with no
    notes, and a case whose message says "CUDA error" still counts as a CUDA failure (exit code 110)."""
    from harness.protocol import ExitCode
    from harness.results.record import exit_code

    crashed = dataclasses.replace(make_run(), cases=(
        case_result(BENCH[0], [], Status.ERROR, "CUDA error: RuntimeError: illegal memory access"),))
    monkeypatch.setattr(schema_mod, "MIGRATIONS", schema_mod.MIGRATIONS[:2])
    with ResultStore(db) as store:
        _insert_old_run(store, crashed)
        body = dataclasses.asdict(crashed.cases[0])
        del body["cuda_failure"], body["samples_ns"]
        store._conn.execute("INSERT INTO cases (run_id, idx, name, spec, status, message, record_json) VALUES "
                            "(?, 0, '', ?, 'error', ?, ?)",
                            ("r1", BENCH[0].text(), crashed.cases[0].message, json.dumps(body)))
        store._conn.execute("UPDATE runs SET complete = 1, finished_at = 'x' WHERE run_id = 'r1'")
    monkeypatch.undo()
    with ResultStore(db) as store:
        assert store.version == len(schema_mod.MIGRATIONS)
        back = store.load("r1")
    assert back.notes == () and back.cases[0].cuda_failure and exit_code(back) is ExitCode.CUDA_FAILURE


def test_git_commit_says_dirty_when_tracked_files_differ(tmp_path):
    import subprocess

    from harness.parent.runner import git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    assert git_commit(tmp_path) == ""  # not a repo
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "untracked.py").write_text("")
    assert git_commit(tmp_path) == head  # untracked files do not change what ran from the repo
    (tmp_path / "a.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == head + "-dirty"


def test_the_brackets_margin_round_trips_and_an_older_store_migrates_to_empty(tmp_path, monkeypatch):
    """Schema v4: ``runs.bracket`` holds the margin the parent's bracket held the run to; runs stored before it
    read back ''."""
    db = tmp_path / "r.sqlite"
    monkeypatch.setattr(schema_mod, "MIGRATIONS", schema_mod.MIGRATIONS[:3])
    with ResultStore(db) as store:  # a v3 store: what save() wrote before the column existed
        _insert_old_run(store, make_run("old"))
        store._conn.execute("UPDATE runs SET complete = 1, finished_at = 'x' WHERE run_id = 'old'")
    monkeypatch.undo()
    with ResultStore(db) as store:
        assert store.version == len(schema_mod.MIGRATIONS) and store.load("old").bracket == ""
        run = dataclasses.replace(make_run(), run_id="new", bracket="time bracket: 290 us + 20 us + 3% of the window")
        store.save(run)
        assert store.load("new").bracket == run.bracket


def _insert_old_run(store: ResultStore, run) -> None:
    """Insert ``run``'s row as a store before schema v5 (no ``problem`` column) held it."""
    meta = run.to_dict()
    for key in ("cases", "complete", "geomean_ns", "notes", "bracket", "problem"):
        meta.pop(key, None)
    store._conn.execute(
        "INSERT INTO runs (run_id, started_at, mode, data, shape_set, secret_seed, variant, submission_path,"
        " submission_sha256, git_commit, device, gpu_model, complete, geomean_ns, record_json, shape_set_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?)",
        (run.run_id, run.started_at, run.mode, run.data, run.shape_set, run.secret_seed, run.submission.name,
         run.submission.path, run.submission.sha256, run.git_commit, run.environment.device, "H200",
         json.dumps(meta), run.shape_set_id))


def test_a_v4_store_migrates_its_runs_to_nvfp4_group_gemm(tmp_path, monkeypatch):
    """Schema v5 keys runs by problem: every run stored before it is an nvfp4_group_gemm run, found by that
    filter and by no other, its cases read back as they were."""
    db = tmp_path / "r.sqlite"
    monkeypatch.setattr(schema_mod, "MIGRATIONS", schema_mod.MIGRATIONS[:4])
    old = make_run("old")
    with ResultStore(db) as store:  # a v4 store, its run and cases written the way v4 wrote them
        assert store.version == 4
        _insert_old_run(store, old)
        for i, case in enumerate(old.cases):
            store._insert_case(store._conn, "old", case, i, "nvfp4_group_gemm")
        store._conn.execute("UPDATE runs SET complete = 1, finished_at = 'x', geomean_ns = ? WHERE run_id = 'old'",
                            (old.geomean_ns,))
    monkeypatch.undo()
    with ResultStore(db) as store:
        assert store.version == 5 == len(schema_mod.MIGRATIONS)
        back = store.load("old")
        assert back.problem == "nvfp4_group_gemm" and back.cases == old.cases
        assert [r.run_id for r in store.runs(problem="nvfp4_group_gemm")] == ["old"]
        assert store.runs(problem="nvfp4_gemm") == []
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT problem FROM runs").fetchall() == [("nvfp4_group_gemm",)]
    conn.close()


def test_a_run_of_another_problem_round_trips_with_its_own_cases(db):
    from harness import plugs

    gemv = plugs.get("nvfp4_gemv")
    case = gemv.parse_case({"m": 128, "k": 256, "l": 1, "seed": 1111, "name": "tiny"})
    run = dataclasses.replace(make_run("g1"), problem="nvfp4_gemv", cases=(
        case_result(case, [100.0, 110.0], Status.PASS),))
    with ResultStore(db) as store:
        store.save(run)
        back = store.load("g1")
        assert back == run and back.cases[0].case == case and back.cases[0].case.name == "tiny"
        assert [r.run_id for r in store.runs(problem="nvfp4_gemv")] == ["g1"]
        spec = store._conn.execute("SELECT spec FROM cases WHERE run_id = 'g1'").fetchone()[0]
    assert spec == "m: 128; k: 256; l: 1; seed: 1111"
