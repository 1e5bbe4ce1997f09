"""The results store: every run, every case, every sample, in one SQLite file (stdlib sqlite3).

Where: ``--db`` if given, else ``$FP4BENCH_DB``, else ``results/fp4bench.sqlite`` under the repository root.

How the runner records a run (each call is one transaction, so a run killed midway keeps what it measured and
stays marked incomplete)::

    store = ResultStore(resolve_db_path(db_option))
    store.begin(run)                          # RunRecord with cases=() and complete=False
    store.add_case(run.run_id, case, i)       # once per case, as soon as it is measured
    store.finish(run.run_id, geomean_ns, complete=True, notes=run_notes)

Layout (schema version in ``PRAGMA user_version``, file marked with ``PRAGMA application_id``):

- ``runs``: one row a run; queryable columns (variant, mode, data, shape set, secret seed, commit, submission
  path and sha256, device, GPU model, complete, geomean_ns, started/finished times, notes) plus ``record_json``,
  the run's ``to_dict()`` without its cases.
- ``cases``: one row a case, keyed (run_id, idx); name, spec text, status, message, the ``Stats`` columns
  (ns) plus ``record_json``, the case as a dict without its samples.
- ``samples``: one row a timed sample, keyed (run_id, idx, sample_idx): ``duration_ns`` per call.

Records are rebuilt with ``harness.results.record.run_from_dict``, so fields added to the records later load from old
rows through that function's defaults. ``runs.shape_set_id`` (schema v2) identifies a run's shape set by its
content (``harness.shapes.shape_set_id``); ``shape_set`` is only its label. Rows are appended and never
rewritten: ``finish`` sets only the run row's end (time, complete, geomean, the run-wide ``notes``, schema v3).
``runs.problem`` (schema v5) names the problem run; runs stored before it are nvfp4_group_gemm's. Schema changes
go in harness.results.schema (``MIGRATIONS``); opening an older file applies the missing steps in order, each in
its own transaction; a newer or foreign file is refused with ``StoreError``.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from harness import plugs
from harness import ROOT
from harness.results import schema
from harness.results.record import CaseResult, RunRecord, Status, run_from_dict
from harness.hardware import gpu_model

#: The store used when neither ``--db`` nor ``$FP4BENCH_DB`` says otherwise.
DEFAULT_DB = ROOT / "results" / "fp4bench.sqlite"
ENV_VAR = "FP4BENCH_DB"
#: Seconds a connection waits for another process's write lock before giving up.
BUSY_TIMEOUT_S = 30.0


class StoreError(Exception):
    """The store cannot do what was asked; the message says why and names the file or run (safe to show)."""


def resolve_db_path(db: str | os.PathLike | None = None) -> Path:
    """The store's path: ``db`` (the ``--db`` option) if given, else ``$FP4BENCH_DB``, else ``DEFAULT_DB``."""
    if db:
        return Path(db)
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else DEFAULT_DB




def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------------------------- store
class ResultStore:
    """A results store file. Open with ``ResultStore(path)``; the file and its folder are created (and brought
    to the current schema) unless ``create=False``, which raises StoreError for a missing file.

    Raises StoreError for a folder, a file that is not SQLite, not an fp4bench store, or written by a newer
    schema, and for a folder that cannot be created. Usable as a context manager (closes the connection).
    ``created_folder`` is the folder this call created to hold the file (its missing parents created with it),
    if any (callers say so)."""

    def __init__(self, path: str | os.PathLike, create: bool = True) -> None:
        self.path = Path(path)
        self.created_folder: Path | None = None
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a folder; a results store is a file "
                             f"(e.g. {self.path / 'fp4bench.sqlite'})")
        if not self.path.exists():
            if not create:
                raise StoreError(f"no results store at {self.path} (record a run first, or pass --db / set "
                                 f"${ENV_VAR})")
            missing = not self.path.parent.exists()
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the folder for results store {self.path}: "
                                 f"{exc.strerror or exc}") from None
            self.created_folder = self.path.parent if missing else None
        try:
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the results store ({exc})") from None
        try:
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"{self.path}: not a usable SQLite results store ({exc})") from None
        except BaseException:
            self._conn.close()
            raise

    # -- lifecycle
    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "ResultStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _tx(self, what: str = "write to the results store") -> Iterator[sqlite3.Connection]:
        """One write transaction. SQLite's own failures (a read-only file or folder, a full disk, a lock held
        longer than BUSY_TIMEOUT_S) come out as StoreError naming the file: ``cannot <what> (<SQLite's words>)``."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{self.path}: cannot {what} ({exc})") from None
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._rollback()
            raise StoreError(f"{self.path}: cannot {what} ({exc})") from None
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self._conn.in_transaction:  # SQLite may have rolled back already (e.g. a failed COMMIT)
            self._conn.execute("ROLLBACK")

    def check_writable(self) -> None:
        """Try a write and undo it, so a run learns before measuring anything that its results could not be
        kept. Raises StoreError naming the file and SQLite's reason (e.g. a read-only file or folder)."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute("CREATE TABLE fp4bench_write_probe (x INTEGER)")
            finally:
                self._conn.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{self.path}: cannot write to the results store ({exc})") from None

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
        current = schema.schema_version()
        if app_id not in (0, schema.APPLICATION_ID):
            raise StoreError(f"{self.path}: not an fp4bench results store (application_id {app_id:#x})")
        if version == 0 and app_id == 0:
            tables = self._conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
            if tables:
                raise StoreError(f"{self.path}: an SQLite file with {tables} table(s) of its own, not an fp4bench "
                                 f"results store; refusing to write into it")
        if version > current:
            raise StoreError(f"{self.path}: written by a newer fp4bench (schema v{version}); this one reads up to "
                             f"v{current}. Update fp4bench or use another --db.")
        what = "write to the results store" if version == 0 else \
            f"upgrade this results store from schema v{version} to v{current}, which even a read needs"
        for step in range(version, current):
            with self._tx(what) as conn:
                schema.MIGRATIONS[step](conn)
                conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {step + 1}")

    @property
    def version(self) -> int:
        """The schema version of the open file."""
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    # -- writing
    def begin(self, run: RunRecord) -> None:
        """Record the start of a run (one transaction). ``run.cases`` are normally empty; any given are added
        too. The run stays incomplete until ``finish``.

        Raises StoreError if ``run.run_id`` is already stored or ``run.complete`` is True (use ``save``)."""
        if run.complete:
            raise StoreError(f"begin(): run {run.run_id} is marked complete; begin takes a run in progress "
                             f"(use save() to store a finished record)")
        with self._tx() as conn:
            self._insert_run(conn, run)
            for i, case in enumerate(run.cases):
                self._insert_case(conn, run.run_id, case, i, run.problem)

    def add_case(self, run_id: str, case: CaseResult, index: int) -> None:
        """Store one case's result and all its samples (one transaction), as case ``index`` of the run.

        Raises StoreError if the run is unknown or already finished, or ``index`` is already stored."""
        with self._tx() as conn:
            row = conn.execute("SELECT finished_at, problem FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"add_case(): no run {run_id!r} in {self.path} (call begin() first)")
            if row["finished_at"] is not None:
                raise StoreError(f"add_case(): run {run_id} is already finished")
            self._insert_case(conn, run_id, case, index, row["problem"])

    def finish(self, run_id: str, geomean_ns: float | None, complete: bool, notes: Sequence[str] = (),
               bracket: str = "") -> None:
        """Mark a run finished: ``complete`` False when it was cut short; ``geomean_ns`` the geometric mean of
        the per-case mean times (ns) when every case passed, else None; ``notes`` the run-wide notes (such as a
        replaced timer); ``bracket`` the time bracket's margin (schema v4). Stored cases are never rewritten. One
        transaction.

        Raises StoreError if the run is unknown or already finished."""
        with self._tx() as conn:
            row = conn.execute("SELECT finished_at FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"finish(): no run {run_id!r} in {self.path}")
            if row["finished_at"] is not None:
                raise StoreError(f"finish(): run {run_id} was already finished at {row['finished_at']}")
            conn.execute("UPDATE runs SET finished_at = ?, complete = ?, geomean_ns = ?, notes = ?, bracket = ?"
                         " WHERE run_id = ?", (_now(), int(bool(complete)), geomean_ns, json.dumps(list(notes)),
                                               bracket, run_id))

    def save(self, run: RunRecord) -> None:
        """Store a whole finished record in one transaction (imports, tests). Raises StoreError if the run id
        is already stored."""
        with self._tx() as conn:
            self._insert_run(conn, run)
            for i, case in enumerate(run.cases):
                self._insert_case(conn, run.run_id, case, i, run.problem)
            conn.execute("UPDATE runs SET finished_at = ?, complete = ?, geomean_ns = ?, notes = ?, bracket = ?"
                         " WHERE run_id = ?", (_now(), int(run.complete), run.geomean_ns,
                                               json.dumps(list(run.notes)), run.bracket, run.run_id))

    def _insert_run(self, conn: sqlite3.Connection, run: RunRecord) -> None:
        meta = run.to_dict()
        for key in ("cases", "complete", "geomean_ns", "notes", "bracket"):
            meta.pop(key, None)
        try:
            conn.execute(
                "INSERT INTO runs (run_id, started_at, mode, data, shape_set, secret_seed, variant, submission_path,"
                " submission_sha256, git_commit, device, gpu_model, complete, geomean_ns, record_json, shape_set_id,"
                " problem) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?, ?)",
                (run.run_id, run.started_at, run.mode, run.data, run.shape_set, run.secret_seed,
                 run.submission.name, run.submission.path, run.submission.sha256, run.git_commit,
                 run.environment.device, gpu_model(run.environment.device), json.dumps(meta), run.shape_set_id,
                 run.problem))
        except sqlite3.IntegrityError:
            raise StoreError(f"run {run.run_id!r} is already in {self.path}") from None

    def _insert_case(self, conn: sqlite3.Connection, run_id: str, case: CaseResult, index: int,
                     problem: str) -> None:
        if not isinstance(case.status, Status):
            raise StoreError(f"case {index} of run {run_id}: status must be a Status, got {case.status!r}")
        body = json.loads(json.dumps(dataclasses.asdict(case)))
        body.pop("samples_ns", None)
        s = case.stats
        try:
            conn.execute(
                "INSERT INTO cases (run_id, idx, name, spec, status, message, runs, mean_ns, std_ns, err_ns,"
                " best_ns, worst_ns, record_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, index, case.case.name, plugs.get(problem).case_text(case.case), case.status.value,
                 case.message,
                 s.runs if s else None, s.mean_ns if s else None, s.std_ns if s else None,
                 s.err_ns if s else None, s.best_ns if s else None, s.worst_ns if s else None, json.dumps(body)))
        except sqlite3.IntegrityError:
            raise StoreError(f"case {index} of run {run_id} is already stored") from None
        conn.executemany("INSERT INTO samples (run_id, idx, sample_idx, duration_ns) VALUES (?, ?, ?, ?)",
                         [(run_id, index, j, float(x)) for j, x in enumerate(case.samples_ns)])

    # -- reading
    def load(self, run_id: str, with_samples: bool = True) -> RunRecord:
        """The stored run as a RunRecord, cases in index order (``with_samples=False`` leaves ``samples_ns``
        empty, for summaries of many runs). ``complete`` is False for a run never finished.

        Raises StoreError if no such run."""
        row = self._conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        return self._record(row, with_samples)

    def _record(self, row: sqlite3.Row, with_samples: bool) -> RunRecord:
        d = json.loads(row["record_json"])
        samples: dict[int, list[float]] = {}
        if with_samples:
            for s in self._conn.execute("SELECT idx, duration_ns FROM samples WHERE run_id = ?"
                                        " ORDER BY idx, sample_idx", (row["run_id"],)):
                samples.setdefault(s["idx"], []).append(s["duration_ns"])
        cases = []
        for c in self._conn.execute("SELECT idx, record_json FROM cases WHERE run_id = ? ORDER BY idx",
                                    (row["run_id"],)):
            body = json.loads(c["record_json"])
            body["samples_ns"] = samples.get(c["idx"], [])
            cases.append(body)
        d.update(cases=cases, complete=bool(row["complete"]), geomean_ns=row["geomean_ns"],
                 shape_set_id=row["shape_set_id"], notes=json.loads(row["notes"]), bracket=row["bracket"],
                 problem=row["problem"])
        try:
            return run_from_dict(d)
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"run {row['run_id']} in {self.path} cannot be read back as a RunRecord: "
                             f"{type(exc).__name__}: {exc}") from None

    def resolve(self, ref: str) -> str:
        """A run id from ``ref``: ``latest`` (the most recently started run), an exact id, or a unique prefix.

        Raises StoreError when nothing or more than one run matches."""
        if ref == "latest":
            row = self._conn.execute("SELECT run_id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 1"
                                     ).fetchone()
            if row is None:
                raise StoreError(f"no runs in {self.path} yet")
            return row["run_id"]
        if self._conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (ref,)).fetchone():
            return ref
        like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        ids = [r["run_id"] for r in self._conn.execute(
            "SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY started_at", (like,))]
        if not ids:
            raise StoreError(f"no run matches {ref!r} in {self.path}")
        if len(ids) > 1:
            raise StoreError(f"{ref!r} matches {len(ids)} runs ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}"
                             f"); give more of the id")
        return ids[0]

    def runs(self, variant: str | None = None, mode: str | None = None, shape_set: str | None = None,
             gpu: str | None = None, data: str | None = None, complete: bool | None = None,
             passed: bool | None = None, limit: int | None = None, with_samples: bool = True,
             shape_set_id: str | None = None, problem: str | None = None) -> list[RunRecord]:
        """Stored runs matching every filter given, oldest first (by ``started_at``).

        ``shape_set`` matches the label, ``shape_set_id`` the identity (harness.shapes.shape_set_id) of the shape
        set, ``problem`` the problem's name.
        ``gpu`` matches the GPU model ("H200", case-insensitive; see ``gpu_model``). ``passed=True`` keeps runs
        that finished complete with every case passing. ``limit`` keeps the newest ``limit`` runs."""
        where, args = [], []
        for column, value in (("variant", variant), ("mode", mode), ("shape_set", shape_set), ("data", data),
                              ("shape_set_id", shape_set_id), ("problem", problem)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if gpu is not None:
            where.append("gpu_model = ? COLLATE NOCASE")
            args.append(gpu)
        if complete is not None:
            where.append("complete = ?")
            args.append(int(complete))
        all_pass = "(complete = 1 AND NOT EXISTS (SELECT 1 FROM cases c WHERE c.run_id = runs.run_id" \
                   " AND c.status != 'pass'))"
        if passed is True:
            where.append(all_pass)
        elif passed is False:
            where.append(f"NOT {all_pass}")
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY started_at DESC, rowid DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self._conn.execute(sql, args).fetchall()
        return [self._record(r, with_samples) for r in reversed(rows)]

    def latest(self, variant: str | None = None, mode: str | None = None, shape_set: str | None = None,
               gpu: str | None = None, data: str | None = None, complete: bool | None = None,
               passed: bool | None = None, with_samples: bool = True,
               shape_set_id: str | None = None, problem: str | None = None) -> RunRecord | None:
        """The most recently started run matching the filters (as in ``runs``), or None."""
        found = self.runs(variant, mode, shape_set, gpu, data, complete, passed, limit=1, with_samples=with_samples,
                          shape_set_id=shape_set_id, problem=problem)
        return found[0] if found else None

    def shape_sets(self) -> list[tuple[str, str]]:
        """Every (shape_set_id, label) pair stored, sorted; the id is "" for runs recorded before ids existed
        and never finished."""
        return [(r[0], r[1]) for r in self._conn.execute(
            "SELECT DISTINCT shape_set_id, shape_set FROM runs ORDER BY shape_set_id, shape_set")]

    def finished_at(self, run_id: str) -> str | None:
        """When ``finish`` was called for the run (ISO 8601 UTC), or None if never. Raises StoreError if unknown."""
        row = self._conn.execute("SELECT finished_at FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        return row["finished_at"]


class StoreRecorder:
    """Records a run into a ResultStore as the runner reports it: the runner's Observer hooks (``on_start``,
    ``on_case``, ``on_finish``) mapped to ``begin``, ``add_case`` and ``finish``, each one transaction.
    ``inner``, if given, is another observer (e.g. a progress display) that receives every hook as well.

    Duck-typed on purpose (no import of harness.parent.runner, which pulls in torch); pass it where an Observer goes.
    A run whose ``on_finish`` never comes (killed, interrupted) stays incomplete in the store.

    A write that fails (StoreError: the disk full, the file made read-only mid-run) never stops the run: the
    recorder keeps the first failure in ``failure``, writes nothing more, and keeps forwarding every hook, so the
    caller still shows and writes out what was measured and then reports the failure."""

    def __init__(self, store: ResultStore, inner=None) -> None:
        self.store, self.inner = store, inner
        self.run_id: str | None = None
        self.finished = False
        self.failure: StoreError | None = None

    def _write(self, fn, *args) -> None:
        if self.failure is not None:
            return
        try:
            fn(*args)
        except StoreError as exc:
            self.failure = exc

    def _forward(self, name: str, *args) -> None:
        if self.inner is not None:
            getattr(self.inner, name)(*args)

    def on_start(self, record: RunRecord) -> None:
        self._write(self.store.begin, record)
        self.run_id = record.run_id
        self._forward("on_start", record)

    def on_phase(self, index: int | None, phase: str) -> None:
        self._forward("on_phase", index, phase)

    def on_case_start(self, index: int, case) -> None:
        self._forward("on_case_start", index, case)

    def on_sample(self, index: int, runs: int) -> None:
        self._forward("on_sample", index, runs)

    def on_case(self, index: int, result: CaseResult) -> None:
        self._write(self.store.add_case, self.run_id, result, index)
        self._forward("on_case", index, result)

    def on_finish(self, record: RunRecord) -> None:
        self._write(self.store.finish, record.run_id, record.geomean_ns, record.complete, record.notes,
                    record.bracket)
        self.finished = True
        self._forward("on_finish", record)

    def abandon(self) -> str | None:
        """After an interruption (Ctrl-C): mark the run begun here finished and incomplete, keeping every case
        stored so far. Returns its run id, or None when no run was begun or it had already finished."""
        if self.run_id is None or self.finished or self.failure is not None:
            return None
        self.store.finish(self.run_id, None, complete=False)
        self.finished = True
        return self.run_id
