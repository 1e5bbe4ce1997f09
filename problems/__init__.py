"""The problems fp4bench serves, one plug each (harness/problem.py states the contract a plug satisfies).

A problem lives in ``problems/<name>/`` with ``plug.py`` defining ``PROBLEM``; ``<name>`` is what a submission's
``#!POPCORN leaderboard <name>`` line says. Folders starting with ``_`` hold shared code, not problems. Its
official shape sets are ``configs/shapes/<name>/{tests,benchmarks}.yml`` (nvfp4_group_gemm's are still
``configs/shapes/{tests,benchmarks}.yml``). Nothing here imports torch.
"""
from __future__ import annotations

import importlib
from pathlib import Path


from harness.problem import CaseError

HERE = Path(__file__).resolve().parent
SHAPES = HERE.parent / "configs" / "shapes"


def names() -> tuple[str, ...]:
    """Every problem's name, sorted (folders of ``problems/`` holding a plug.py, not starting with ``_``)."""
    return tuple(sorted(p.parent.name for p in HERE.glob("*/plug.py") if not p.parent.name.startswith("_")))


def get(name: str):
    """The plug named ``name`` (its ``PROBLEM``). Raises CaseError naming the known problems for another name."""
    if name not in names():
        raise CaseError(f"unknown problem {name!r}: expected one of {', '.join(names())}")
    return importlib.import_module(f"problems.{name}.plug").PROBLEM


def data_modes() -> tuple[str, ...]:
    """Every data mode some problem offers (its plug's ``data_modes``), in first-seen order (``official`` first):
    what ``--data`` may say before the problem is known; the plug then refuses a mode it lacks."""
    return tuple(dict.fromkeys(m for n in names() for m in get(n).data_modes))


def shapes_file(name: str, shape_set: str) -> Path:
    """Where problem ``name``'s official set ``shape_set`` (``tests``, ``benchmarks``) lives."""
    if name == "nvfp4_group_gemm":
        return SHAPES / f"{shape_set}.yml"
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
    return tuple(problem.parse_case(c, where=f"{path} case {i}: ") for i, c in enumerate(doc["cases"]))
