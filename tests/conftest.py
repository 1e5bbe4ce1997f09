"""Shared test set-up: GPU tests are skipped without CUDA; helpers to run the harness on a submission file."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
CASES = Path(__file__).resolve().parent / "cases"
SHARED_CASES = CASES / "shared"
ADVERSARIAL = CASES / "adversarial"
#: Why a test marked ``gpu`` is skipped on a machine without CUDA.
GPU_SKIP_REASON = "needs a CUDA GPU (sm_90)"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def own_default_store(tmp_path_factory, monkeypatch) -> Path:
    """Every test's default results store ($FP4BENCH_DB) is a file of its own under pytest's temporary folder, so
    no test reads or writes the checkout's results/ and none depends on it staying untouched while fp4bench is
    used in the same checkout. Yields the path (not created)."""
    path = tmp_path_factory.mktemp("store") / "fp4bench.sqlite"
    monkeypatch.setenv("FP4BENCH_DB", str(path))
    yield path


def _cases_stored(db: Path) -> bool:
    """Whether the store at ``db`` holds at least one case (read-only; a store still being made reads as no)."""
    import sqlite3
    if not db.exists():
        return False
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute("SELECT count(*) FROM cases").fetchone()[0] >= 1
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def interrupt_after_first_case(argv: list[str], db: Path, settle_s: float = 0.0,
                               extra_env: dict | None = None, signum: int | None = None) -> tuple[int, str, str]:
    """Run ``python -m harness`` + ``argv`` from the repo root (no POPCORN_* from this process, plus ``extra_env``),
    send
    ``signum`` (default SIGINT) ``settle_s`` seconds after the first case lands in ``db``; returns (exit code,
    stdout, stderr)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    env = {k: v for k, v in os.environ.items() if k not in ("POPCORN_FD", "POPCORN_SEED")}
    env.update(extra_env or {})
    # A suite started in the background of a non-interactive shell (`make test &`) ignores SIGINT, and a child
    # inherits that, so Python would install no Ctrl-C handler: the run gets the default disposition back.
    proc = subprocess.Popen([sys.executable, "-m", "harness", *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not _cases_stored(db):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(settle_s)
        proc.send_signal(signal.SIGINT if signum is None else signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, stdout, stderr


def assert_kept_incomplete(db: Path, code: int, stderr: str, expected_code: int = 130):
    """Exit ``expected_code``, the one run in ``db`` finished but incomplete with one passed case, and stderr
    saying so; returns the run."""
    from harness.results.record import Status
    from harness.results.store import ResultStore
    assert code == expected_code, stderr
    with ResultStore(db, create=False) as store:
        (run,) = store.runs()
        assert run.complete is False and store.finished_at(run.run_id) is not None
        assert [c.status for c in run.cases] == [Status.PASS]
    assert f"interrupted: run {run.run_id} kept as incomplete in {db}" in stderr
    assert "Traceback" not in stderr
    return run
