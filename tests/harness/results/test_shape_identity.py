"""Shape-set identity: a set is its cases (problems.nvfp4_group_gemm.spec.shape_set_id), its name only a label. Every
run stores the id; the report commands take the same --shapes forms as run and match by content; the leaderboard ranks
each variant by its best comparable run. Records built by hand, except one real run end to end."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli.commands import main
from harness.results import schema as schema_mod
from harness.results.ranking import best_runs, comparable_key
from harness.results.record import CaseResult, Environment, RunRecord, Status, SubmissionInfo, run_from_dict
from harness.results.stats import geomean, summarize
from harness.results.store import ResultStore
from problems.nvfp4_group_gemm.spec import Case, ShapeSet, load_shapes, shape_set_id

H200 = Environment("NVIDIA H200", "sm_90", "580.159", "2.11.0+cu130", "3.6.0", "not installed", "3.12.3",
                   "dev-box", "cuda-events")
SMOKE_A = "cases:\n  - {m: [64], n: [128], k: [256], g: 1, seed: 1}\n"
SMOKE_B = "cases:\n  - {m: [128], n: [256], k: [512], g: 1, seed: 1}\n  - {m: [4], n: [128], k: [64], g: 1, seed: 2}\n"


def _record(run_id: str, variant: str, shapes: ShapeSet, mean_ns: float, started_at: str,
            mode: str = "leaderboard", with_id: bool = True) -> RunRecord:
    cases = tuple(CaseResult(c, Status.PASS, "", samples, summarize(samples), 1 + 15 * 4, 0.5)
                  for c in shapes.cases for samples in [(mean_ns * 0.99, mean_ns, mean_ns * 1.01, mean_ns)])
    return RunRecord(run_id, started_at, mode, "official", shapes.name, None,
                     SubmissionInfo(variant, f"submissions/{variant}/submission.py", "ab" * 32, {}), H200, cases, True,
                     "0123abc", geomean([c.stats.mean_ns for c in cases]),
                     shape_set_id=shapes.id if with_id else "")


@pytest.fixture
def two_smokes(tmp_path):
    """Two different files, both called smoke.yml."""
    a, b = tmp_path / "a" / "smoke.yml", tmp_path / "b" / "smoke.yml"
    for path, text in ((a, SMOKE_A), (b, SMOKE_B)):
        path.parent.mkdir()
        path.write_text(text)
    return a, b


def test_the_id_is_the_content_not_the_name(two_smokes):
    a, b = (load_shapes(str(p)) for p in two_smokes)
    assert a.name == b.name == "smoke" and a.id != b.id
    renamed = ShapeSet("other", tuple(dataclasses.replace(c, name="x") for c in a.cases))
    assert renamed.id == a.id  # names of the set and its cases are labels
    assert load_shapes("m: [64]; n: [128]; k: [256]; g: 1; seed: 1").id == a.id  # inline, the same case
    reseeded = ShapeSet("smoke", (dataclasses.replace(a.cases[0], seed=2),))
    assert reseeded.id != a.id  # the seed is content: other inputs
    line = "m: [64]; n: [128]; k: [256]; g: 1; seed: 1"
    assert a.id == hashlib.sha256(line.encode()).hexdigest()[:12] == shape_set_id(a.cases)


def test_the_official_sets_keep_their_ids():
    """Stored runs are found by these ids: changing how ids are computed would orphan them."""
    assert (load_shapes("tests").id, load_shapes("benchmarks").id, load_shapes("smoke").id) == \
        ("305359e60b58", "f5a4ec5cad36", "5585b6abffc0")


def test_the_record_carries_the_id_and_old_records_read_back_without_it():
    run = _record("r1", "alpha", load_shapes("smoke"), 1000.0, "2026-11-30T10:00:00+00:00")
    d = run.to_dict()
    assert d["shape_set_id"] == "5585b6abffc0" and run_from_dict(d) == run
    del d["shape_set_id"]
    assert run_from_dict(d).shape_set_id == ""


def test_every_run_is_stored_with_its_id_and_found_by_it(tmp_path):
    smoke = load_shapes("smoke")
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.save(_record("r1", "alpha", smoke, 1000.0, "2026-11-30T10:00:00+00:00"))
        assert store.load("r1").shape_set_id == smoke.id
        assert [r.run_id for r in store.runs(shape_set_id=smoke.id)] == ["r1"]
        assert store.runs(shape_set_id=load_shapes("tests").id) == []
        assert store.shape_sets() == [(smoke.id, "smoke")]


def test_migration_gives_old_runs_the_id_of_their_cases(tmp_path):
    """A schema v1 file (no shape_set_id column, records without the key): opening it adds the column and fills
    it for every complete run from its stored cases; a run never finished keeps ''."""
    db = tmp_path / "old.sqlite"
    smoke, tests = load_shapes("smoke"), load_shapes("tests")
    with ResultStore(db) as store:
        store.save(_record("r1", "alpha", smoke, 1000.0, "2026-11-30T10:00:00+00:00"))
        store.save(_record("r2", "beta", tests, 2000.0, "2026-11-30T11:00:00+00:00"))
        cut = _record("r3", "beta", tests, 2000.0, "2026-11-30T12:00:00+00:00")
        store.begin(dataclasses.replace(cut, cases=(), complete=False, geomean_ns=None))
        store.add_case("r3", cut.cases[0], 0)
    conn = sqlite3.connect(db)  # back to v1, as an older fp4bench wrote it
    conn.execute("DROP INDEX runs_by_problem")  # schema v5's
    conn.execute("ALTER TABLE runs DROP COLUMN problem")
    conn.execute("DROP INDEX runs_by_shape_set_id")
    conn.execute("ALTER TABLE runs DROP COLUMN shape_set_id")
    conn.execute("ALTER TABLE runs DROP COLUMN notes")  # schema v3's
    conn.execute("ALTER TABLE runs DROP COLUMN bracket")  # schema v4's
    for run_id, body in conn.execute("SELECT run_id, record_json FROM runs").fetchall():
        d = json.loads(body)
        d.pop("shape_set_id")
        d.pop("problem")
        conn.execute("UPDATE runs SET record_json = ? WHERE run_id = ?", (json.dumps(d), run_id))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with ResultStore(db) as store:
        assert store.version == len(schema_mod.MIGRATIONS) == 5
        assert [(r.run_id, r.shape_set_id) for r in store.runs()] == [("r1", smoke.id), ("r2", tests.id), ("r3", "")]


def _leaderboard(db: Path, *args: str):
    return CliRunner().invoke(main, ["leaderboard", "--db", str(db), *args])


def test_two_files_named_smoke_never_mix(tmp_path, two_smokes):
    """run stores "smoke" for both files; leaderboard, history and report --leaderboard take each file's path
    (as run does), its id or a prefix of it, and find only the runs of that content."""
    a, b = (load_shapes(str(p)) for p in two_smokes)
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as store:
        store.save(_record("ra", "alpha", a, 1000.0, "2026-11-30T10:00:00+00:00"))
        store.save(_record("rb", "beta", b, 2000.0, "2026-11-30T11:00:00+00:00"))
    for spec, shown, hidden in ((str(two_smokes[0]), "alpha", "beta"), (str(two_smokes[1]), "beta", "alpha"),
                                (a.id, "alpha", "beta"), (b.id[:6], "beta", "alpha")):
        result = _leaderboard(db, "--shapes", spec)
        assert result.exit_code == 0, result.output
        assert shown in result.output and hidden not in result.output, (spec, result.output)
        result = CliRunner().invoke(main, ["report", "--db", str(db), "--leaderboard", "--shapes", spec,
                                           "--format", "csv"])
        assert result.exit_code == 0 and shown in result.output and hidden not in result.output
    for variant, spec in (("alpha", str(two_smokes[0])), ("beta", str(two_smokes[1]))):
        result = CliRunner().invoke(main, ["history", variant, "--db", str(db), "--shapes", spec])
        assert result.exit_code == 0 and f"r{variant[0]}" in result.output, result.output
    result = CliRunner().invoke(main, ["history", "alpha", "--db", str(db), "--shapes", str(two_smokes[1])])
    assert result.exit_code == 0 and "no runs of 'alpha'" in result.output
    with ResultStore(db) as store:  # alpha on both files: its history tells the two sets apart by id
        store.save(_record("ra2", "alpha", b, 1500.0, "2026-11-30T12:00:00+00:00"))
    result = CliRunner().invoke(main, ["history", "alpha", "--db", str(db)], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and f"smoke {a.id[:8]}" in result.output and f"smoke {b.id[:8]}" in result.output
    # the configs set called smoke is a third content: neither file's runs are its runs
    result = _leaderboard(db, "--shapes", "smoke")
    assert result.exit_code == 0 and "no passing leaderboard runs" in result.output


def test_shapes_that_match_nothing_say_what_was_tried(tmp_path, two_smokes):
    db = tmp_path / "r.sqlite"
    a, b = (load_shapes(str(p)) for p in two_smokes)
    with ResultStore(db) as store:
        store.save(_record("ra", "alpha", a, 1000.0, "2026-11-30T10:00:00+00:00"))
        store.save(_record("rb", "beta", b, 2000.0, "2026-11-30T11:00:00+00:00"))
    result = _leaderboard(db, "--shapes", "nothing-here")
    assert result.exit_code == 113 and "Usage:" not in result.output
    assert "Error: --shapes 'nothing-here': expected a shape-set name" in " ".join(result.output.split())
    assert f"nor is 'nothing-here' a shape-set id or name stored in {db}" in " ".join(result.output.split())
    with ResultStore(db) as store:  # two ids that share their first 4 digits
        store.save(dataclasses.replace(_record("rc", "gamma", a, 1000.0, "2026-11-30T12:00:00+00:00"),
                                       shape_set_id="abcd11112222"))
        store.save(dataclasses.replace(_record("rd", "delta", b, 1000.0, "2026-11-30T13:00:00+00:00"),
                                       shape_set_id="abcd33334444"))
    result = _leaderboard(db, "--shapes", "abcd")
    assert result.exit_code == 113
    assert ("Error: --shapes 'abcd' starts 2 stored shape-set ids (abcd11112222, abcd33334444); give more digits"
            in " ".join(result.output.split()))
    result = _leaderboard(db, "--shapes", "abcd3")
    assert result.exit_code == 0 and "delta" in result.output and "gamma" not in result.output


def test_a_stored_name_whose_file_is_gone_still_selects(tmp_path):
    """A label not resolvable as a file or configs name (the file was deleted) matches runs by their name."""
    gone = ShapeSet("my_set", (Case((64,), (128,), (256,), 1, 5),))
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as store:
        store.save(_record("r1", "alpha", gone, 1000.0, "2026-11-30T10:00:00+00:00"))
    result = _leaderboard(db, "--shapes", "my_set")
    assert result.exit_code == 0 and "alpha" in result.output


def test_leaderboard_ranks_each_variant_by_its_best_comparable_run(tmp_path):
    """alpha: a fast run, then a slow one (a cold machine); beta in between. Ranked by best runs alpha is first,
    and the run shown for it is the fast one."""
    smoke = load_shapes("smoke")
    fast = _record("alpha-fast", "alpha", smoke, 1000.0, "2026-11-30T10:00:00+00:00")
    slow = _record("alpha-slow", "alpha", smoke, 5000.0, "2026-11-30T12:00:00+00:00")
    beta = _record("beta-1", "beta", smoke, 2000.0, "2026-11-30T11:00:00+00:00")
    other_mode = _record("alpha-bench", "alpha", smoke, 10.0, "2026-11-30T13:00:00+00:00", mode="benchmark")
    assert [r.run_id for r in best_runs([slow, beta, fast, other_mode])] == ["alpha-fast", "beta-1", "alpha-bench"]
    assert comparable_key(fast) == ("nvfp4_group_gemm", "H200", smoke.id, "official", "leaderboard")
    assert comparable_key(dataclasses.replace(fast, shape_set_id="")) == comparable_key(fast)  # from its cases
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as store:
        for run in (fast, beta, slow):
            store.save(run)
    result = _leaderboard(db, "--format", "json")
    assert result.exit_code == 0, result.output
    (board,) = json.loads(result.output)
    assert [(e["variant"], e["run_id"]) for e in board["entries"]] == [("alpha", "alpha-fast"), ("beta", "beta-1")]


def test_a_real_run_stores_the_id_that_history_finds_by_path(tmp_path):
    """The issue's case: `run --shapes FILE` then `history --shapes FILE` (it found nothing before)."""
    shapes = tmp_path / "mine.yml"
    shapes.write_text("cases:\n  - {m: [64], n: [128], k: [128], g: 1, seed: 3}\n")
    db = tmp_path / "r.sqlite"
    result = CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", str(shapes),
                                       "--db", str(db)])
    assert result.exit_code == 0, result.output
    with ResultStore(db, create=False) as store:
        (run,) = store.runs()
    assert (run.shape_set, run.shape_set_id) == ("mine", load_shapes(str(shapes)).id)
    result = CliRunner().invoke(main, ["history", "torch_reference", "--db", str(db), "--shapes", str(shapes)])
    assert result.exit_code == 0 and run.run_id in result.output, result.output
