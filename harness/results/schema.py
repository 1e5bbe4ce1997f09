"""The results store's schema: one migration step per version, applied in order (harness.results.store opens
files and runs them). Append a step for a change; never edit one that has shipped: stores in the wild were
built by it."""
from __future__ import annotations

import sqlite3
from typing import Callable

from harness import plugs
from harness import shapes

#: ``PRAGMA application_id`` of an fp4bench store: the ASCII bytes "fp4b".
APPLICATION_ID = 0x66703462


def _v1(conn: sqlite3.Connection) -> None:
    conn.execute("""
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            started_at TEXT NOT NULL,           -- ISO 8601 UTC, from the record
            finished_at TEXT,                   -- set by finish(); NULL: never finished
            mode TEXT NOT NULL,
            data TEXT NOT NULL,
            shape_set TEXT NOT NULL,
            secret_seed INTEGER,
            variant TEXT NOT NULL,              -- submission.name
            submission_path TEXT NOT NULL,
            submission_sha256 TEXT NOT NULL,
            git_commit TEXT NOT NULL,
            device TEXT NOT NULL,
            gpu_model TEXT NOT NULL,            -- gpu_model(device)
            complete INTEGER NOT NULL DEFAULT 0,
            geomean_ns REAL,
            record_json TEXT NOT NULL           -- RunRecord.to_dict() without cases/complete/geomean_ns
        )""")
    conn.execute("""
        CREATE TABLE cases (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            name TEXT NOT NULL,
            spec TEXT NOT NULL,                 -- Case.text()
            status TEXT NOT NULL,
            message TEXT NOT NULL,
            runs INTEGER, mean_ns REAL, std_ns REAL, err_ns REAL, best_ns REAL, worst_ns REAL,
            record_json TEXT NOT NULL,          -- the CaseResult as a dict without samples_ns
            PRIMARY KEY (run_id, idx)
        )""")
    conn.execute("""
        CREATE TABLE samples (
            run_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            sample_idx INTEGER NOT NULL,
            duration_ns REAL NOT NULL,          -- one sample's duration per call
            PRIMARY KEY (run_id, idx, sample_idx),
            FOREIGN KEY (run_id, idx) REFERENCES cases(run_id, idx) ON DELETE CASCADE
        )""")
    conn.execute("CREATE INDEX runs_by_variant ON runs(variant, mode, started_at)")
    conn.execute("CREATE INDEX runs_by_group ON runs(gpu_model, shape_set, mode, started_at)")


def _v2(conn: sqlite3.Connection) -> None:
    """Shape-set identity: ``runs.shape_set_id``. Runs already stored complete get the id of their cases' spec
    lines (all their cases are stored); a run never finished keeps '' (its case list may be partial)."""
    conn.execute("ALTER TABLE runs ADD COLUMN shape_set_id TEXT NOT NULL DEFAULT ''")
    plug = plugs.get("nvfp4_group_gemm")  # every run stored before v5 is one of it
    for (run_id,) in conn.execute("SELECT run_id FROM runs WHERE complete = 1").fetchall():
        specs = [r[0] for r in conn.execute("SELECT spec FROM cases WHERE run_id = ? ORDER BY idx", (run_id,))]
        if specs:
            texts = (plug.case_text(plug.parse_case(shapes.parse_line(x))) for x in specs)
            conn.execute("UPDATE runs SET shape_set_id = ? WHERE run_id = ?", (shapes.shape_set_id(texts), run_id))
    conn.execute("CREATE INDEX runs_by_shape_set_id ON runs(shape_set_id, mode, started_at)")


def _v3(conn: sqlite3.Connection) -> None:
    """Run-wide notes as a JSON list on the run (``runs.notes``): before, ``finish`` appended them to every stored
    case's message. Older runs keep those messages and get an empty list."""
    conn.execute("ALTER TABLE runs ADD COLUMN notes TEXT NOT NULL DEFAULT '[]'")


def _v4(conn: sqlite3.Connection) -> None:
    """The margin the parent's time bracket held the run to (``runs.bracket``, harness.parent.bracket); older runs
    had no bracket and get ''."""
    conn.execute("ALTER TABLE runs ADD COLUMN bracket TEXT NOT NULL DEFAULT ''")


def _v5(conn: sqlite3.Connection) -> None:
    """Runs keyed by problem (``runs.problem``, a name ``plugs.get`` knows): every run stored before is an
    nvfp4_group_gemm run."""
    conn.execute("ALTER TABLE runs ADD COLUMN problem TEXT NOT NULL DEFAULT 'nvfp4_group_gemm'")
    conn.execute("CREATE INDEX runs_by_problem ON runs(problem, gpu_model, shape_set_id, mode, started_at)")


#: Migration steps: ``MIGRATIONS[i]`` takes a store at schema version i to version i + 1. Append, never edit.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3, _v4, _v5]


def schema_version() -> int:
    """The schema version this code writes (the number of migration steps)."""
    return len(MIGRATIONS)
