"""What the CLI tests share: a tiny case and ways to invoke ``fp4bench run`` on torch_reference in-process
(click's CliRunner; output is stdout and stderr together)."""
from __future__ import annotations

from click.testing import CliRunner

from harness.cli.commands import main

#: One group, M = 64, N = 128, K = 256, seed 1: the small case these tests run and store.
TINY = "m: [64]; n: [128]; k: [256]; g: 1; seed: 1"


def _run(*args):
    """``fp4bench run --submission torch_reference --no-store`` + ``args``; returns click's Result."""
    return CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--no-store", *args])


def _flat(text: str) -> str:
    """``text`` with every run of whitespace (rich's line wrapping included) as one space."""
    return " ".join(text.split())


def _store_run(*args):
    """``fp4bench run --submission torch_reference --shapes TINY`` + ``args``, storing (give ``--db``, or the
    run lands in the test's own default store, conftest.own_default_store); returns click's Result."""
    return CliRunner().invoke(main, ["run", "--submission", "torch_reference", "--shapes", TINY, *args])
