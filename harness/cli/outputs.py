"""The outputs a run writes besides the terminal (the results store, --json files, the POPCORN_FD stream),
checked before anything is measured so that nothing measured is lost for want of a place to put it."""
from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.cli.exits import EXIT_OUTPUT, fail
from harness.protocol import ExitCode
from harness.report import popcorn
from harness.results.store import ResultStore, StoreError, resolve_db_path


def open_store(db: Path | None, no_store: bool) -> ResultStore | None:
    """The results store a run records into (None with --no-store), checked writable before anything is
    measured; exits 1 with one line when it cannot be opened or written. Says so when it created the folder."""
    if no_store:
        return None
    try:
        store = ResultStore(resolve_db_path(db))
        store.check_writable()
    except StoreError as exc:
        fail(str(exc), EXIT_OUTPUT)
    if store.created_folder is not None:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"created folder {escape(str(store.created_folder))} for the results store {escape(str(store.path))}")
    return store


def json_target(json_path: Path | None, variants, variant) -> Path | None:
    """Where --json writes ``variant``'s record: the file itself for one submission, else FILE-<name>.json."""
    if not json_path:
        return None
    return json_path if len(variants) == 1 else json_path.with_name(f"{json_path.stem}-{variant.name}.json")


def check_writable(option: str, path: Path | None, targets=()) -> None:
    """An output file checked before anything is measured, as the store is: its folder must exist, be a folder and
    be writable, and each of ``targets`` (default: ``path``) must open for appending (one that did not exist is
    removed again: permission bits alone say nothing to root, nor about /proc); exits 1 with one line naming
    ``option`` otherwise."""
    if path is None:
        return
    if path.is_dir():
        fail(f"{option} {path}: expected a file, got a folder", EXIT_OUTPUT)
    folder = path.parent
    if not folder.exists():
        fail(f"{option} {path}: expected an existing folder, got {folder}, which does not exist", EXIT_OUTPUT)
    if not folder.is_dir():
        fail(f"{option} {path}: expected a folder, got {folder}, which is a file", EXIT_OUTPUT)
    if not os.access(folder, os.W_OK | os.X_OK):
        fail(f"{option} {path}: cannot write in folder {folder} (permission denied)", EXIT_OUTPUT)
    for target in targets or [path]:
        existed = target.exists()
        try:
            with open(target, "ab"):
                pass
        except OSError as exc:
            fail(f"{option} {path}: cannot write to {target} ({exc.strerror or exc})", EXIT_OUTPUT)
        if not existed:
            target.unlink(missing_ok=True)


def check_json(json_path: Path | None, variants) -> None:
    """--json checked before anything is measured (``check_writable``, every FILE-<name>.json target too)."""
    if json_path is not None:
        check_writable("--json", json_path, [json_target(json_path, variants, v) for v in variants])


def popcorn_fd() -> None:
    """POPCORN_FD checked before anything is measured; exits 113 with one line when it names no open, writable
    descriptor."""
    try:
        popcorn.stream_fd()
    except popcorn.PopcornError as exc:
        fail(str(exc), ExitCode.BAD_SPEC)


def kept_in(record, store: ResultStore | None) -> str:
    """``; run <id> is kept in <store>`` for an error after ``record`` was measured ('' with --no-store)."""
    return f"; run {record.run_id} is kept in {store.path}" if store else ""
