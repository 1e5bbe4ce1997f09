"""The registry of problem plugs: find a problem by name and import its plug, by name, through importlib.

A problem lives in ``problems/<name>/`` with ``plug.py`` defining ``PROBLEM`` (harness/problem.py states the
contract a plug satisfies); ``<name>`` is what a submission's ``#!POPCORN leaderboard <name>`` line says. Folders
of ``problems/`` starting with ``_`` hold shared code, not problems. A problem's official shape sets are
``configs/shapes/<name>/{tests,benchmarks}.yml``, beside fp4bench's own small ``smoke.yml``.

This is the harness's only way to a problem (tests/harness/test_layering.py): no harness module imports
``problems`` or ``task`` by an import statement. Nothing here imports torch.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from harness import ROOT
from harness.problem import CaseError

#: Where the problems live, and the package their plugs are imported from.
PROBLEMS, PACKAGE = ROOT / "problems", "problems"
SHAPES = ROOT / "configs" / "shapes"


def names() -> tuple[str, ...]:
    """Every problem's name, sorted (folders of ``problems/`` holding a plug.py, not starting with ``_``)."""
    return tuple(sorted(p.parent.name for p in PROBLEMS.glob("*/plug.py") if not p.parent.name.startswith("_")))


def get(name: str):
    """The plug named ``name`` (its ``PROBLEM``). Raises CaseError naming the known problems for another name."""
    if name not in names():
        raise CaseError(f"unknown problem {name!r}: expected one of {', '.join(names())}")
    return importlib.import_module(f"{PACKAGE}.{name}.plug").PROBLEM


def data_modes() -> tuple[str, ...]:
    """Every data mode some problem offers (its plug's ``data_modes``), in first-seen order (``official`` first):
    what ``--data`` may say before the problem is known; the plug then refuses a mode it lacks."""
    return tuple(dict.fromkeys(m for n in names() for m in get(n).data_modes))


def shapes_file(name: str, shape_set: str) -> Path:
    """Where problem ``name``'s official set ``shape_set`` (``tests``, ``benchmarks``) lives."""
    return SHAPES / name / f"{shape_set}.yml"


def load_cases(name: str, shape_set: str) -> tuple:
    """The cases of problem ``name``'s shape set ``shape_set``: ``{cases: [mapping, ...]}`` in YAML, each parsed
    by the plug. Raises CaseError naming the file for a missing file, a malformed document or a bad case."""
    problem, path = get(name), shapes_file(name, shape_set)
    if not path.is_file():
        raise CaseError(f"{path}: no such shape set for {name}")
    import yaml  # here, not at the top: tools/install_torch.py reads the registry before pyyaml is installed

    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list) or not doc["cases"]:
        raise CaseError(f"{path}: expected a mapping with a non-empty 'cases' list")
    return tuple(problem.parse_case(c, where=f"{path} case {i}: ") for i, c in enumerate(doc["cases"], 1))
