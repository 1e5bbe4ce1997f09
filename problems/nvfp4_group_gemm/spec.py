"""nvfp4_group_gemm's cases: frozen records, parsed from a mapping or the official text format. Loading a shape set
(configs/shapes/*.yml, an official task.yml, a text file, inline, ``#`` picks) is harness.shapes' for every
problem; ``load_shapes`` here is it for this problem.

A case is one nvfp4_group_gemm problem: per-group M, N, K (tuples of length G) and the seed its inputs are drawn
from. The official text format (task.yml "tests"/"benchmarks" as they travel to the evaluator) is one case a
line, ``key: value`` pairs separated by ``;``, values an integer or a bracketed list:
``m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111``. The official task.yml writes the same case as
a JSON-style mapping, ``{"m": [96, 128], "n": [128, 256], "k": [256, 512], "g": 2, "seed": 1111}``; both forms
are read wherever a case is. ``g`` may be left out (the length of the m/n/k lists), and so may ``seed``
(DEFAULT_SEED, the official sets' seed).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import yaml

import harness.shapes as _shapes
from harness.problem import CaseError

#: Every case's K must be a multiple of this (one e4m3fn scale per 16 e2m1 values, two values a byte, and the
#: blocked scale layout groups 4 scale columns: 64). The official shapes all use multiples of 256.
K_MULTIPLE = 64
#: M and N must be multiples of this (the official benchmarks use M in steps of 4, e.g. 76 and 148).
MN_MULTIPLE = 4

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "shapes" / "nvfp4_group_gemm"
#: How a case's inputs are drawn: ``official`` (the official generator) or ``full-range`` (all 16 e2m1 codes,
#: scales over e4m3fn's range; inputs). Kept here, free of torch, so the command line can offer them.
DATA_MODES: tuple[str, ...] = ("official", "full-range")
#: Hex digits of a shape set's id (``shape_set_id``): 48 bits, short enough to type, and two sets in one store
#: collide with odds of about n^2 / 2^49.
SHAPE_SET_ID_DIGITS = _shapes.SHAPE_SET_ID_DIGITS
#: A case's seed when it names none: 1111, the seed of every case of the official tests and benchmarks (task.yml).
DEFAULT_SEED = 1111


#: A shape specification is malformed or describes an impossible problem (the message says which): the
#: contract's CaseError, so one except clause catches what the harness and this problem raise.
SpecError = CaseError


@dataclass(frozen=True)
class Case:
    """One problem: ``m``, ``n``, ``k`` hold one entry per group (length ``g``); ``seed`` seeds its inputs."""

    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    g: int
    seed: int
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.g < 1:
            raise SpecError(f"g must be >= 1, got {self.g}")
        for key in ("m", "n", "k"):
            values = getattr(self, key)
            if len(values) != self.g:
                raise SpecError(f"{key} has {len(values)} entries but g is {self.g}")
            for v in values:
                if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                    raise SpecError(f"{key} entries must be positive integers, got {v!r}")
        for v in self.k:
            if v % K_MULTIPLE:
                raise SpecError(f"k must be a multiple of {K_MULTIPLE}, got {v}")
        for key in ("m", "n"):
            for v in getattr(self, key):
                if v % MN_MULTIPLE:
                    raise SpecError(f"{key} must be a multiple of {MN_MULTIPLE}, got {v}")

    @property
    def problem_sizes(self) -> list[tuple[int, int, int, int]]:
        """(M, N, K, 1) per group, as ``input_t`` carries them."""
        return [(m, n, k, 1) for m, n, k in zip(self.m, self.n, self.k)]

    def text(self) -> str:
        """The official one-line form, e.g. ``m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111``."""
        lst = lambda xs: "[" + ", ".join(str(x) for x in xs) + "]"  # noqa: E731
        return f"m: {lst(self.m)}; n: {lst(self.n)}; k: {lst(self.k)}; g: {self.g}; seed: {self.seed}"


def shape_set_id(cases: Iterable[Case]) -> str:
    """A shape set's identity: the first ``SHAPE_SET_ID_DIGITS`` hex digits of the sha256 of its cases' official
    lines (``Case.text()``: sizes and seeds, not names) joined by newlines, in order. Two files with the same cases
    share an id whatever they are called; two files called ``smoke.yml`` with different cases do not."""
    return _shapes.shape_set_id(c.text() for c in cases)


#: A shape set of this problem: harness.shapes.ShapeSet, whose ``problem`` defaults to nvfp4_group_gemm.
ShapeSet = _shapes.ShapeSet


def case_from_mapping(d: Mapping, where: str = "") -> Case:
    """Build a Case from ``{m, n, k, g?, seed?, name?}``: scalars for m/n/k are broadcast to g groups; ``g``
    defaults to the length of the m/n/k lists (1 when all three are integers), ``seed`` to DEFAULT_SEED.

    Raises SpecError naming the missing or unexpected keys, or what makes the case impossible, after ``where``
    the mapping came from.
    """
    required, optional = {"m", "n", "k"}, {"g", "seed", "name"}
    keys = set(d)
    missing, unexpected = required - keys, keys - required - optional
    if missing or unexpected:
        raise SpecError(
            f"{where}expected keys {sorted(required)} (and optionally g, seed, name), got {sorted(keys)}"
            + (f" (missing {sorted(missing)})" if missing else "")
            + (f" (unexpected {sorted(unexpected)})" if unexpected else "")
        )
    for key in ("m", "n", "k"):
        v = d[key]
        if not (isinstance(v, (list, tuple)) or isinstance(v, int) and not isinstance(v, bool)):
            raise SpecError(f"{where}{key} must be an integer or a list, got {v!r}")
    if "g" in d:
        g = d["g"]
        if not isinstance(g, int) or isinstance(g, bool):
            raise SpecError(f"{where}g must be an integer, got {g!r}")
    else:
        lengths = {key: len(d[key]) for key in ("m", "n", "k") if isinstance(d[key], (list, tuple))}
        if len(set(lengths.values())) > 1:
            got = ", ".join(f"{key} {n}" for key, n in lengths.items())
            raise SpecError(f"{where}expected m, n and k lists of one length (g, the group count), got {got} "
                            f"entries")
        g = next(iter(lengths.values()), 1)
    seed = d.get("seed", DEFAULT_SEED)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise SpecError(f"{where}seed must be a non-negative integer, got {seed!r}")

    def per_group(key: str) -> tuple[int, ...]:
        v = d[key]
        return tuple(v) if isinstance(v, (list, tuple)) else (v,) * g

    try:
        return Case(per_group("m"), per_group("n"), per_group("k"), g, seed, str(d.get("name", "")))
    except SpecError as exc:
        raise SpecError(f"{where}{exc}") from None


def parse_case_line(line: str, where: str | None = None) -> Case:
    """Parse one case: the official text line (``m: [96, 128]; n: [...]; k: [...]; g: 2; seed: 1111``) or the
    JSON-style mapping of task.yml (``{"m": [96, 128], "n": [...], "k": [...], "g": 2, "seed": 1111}``); g and
    seed may be left out (``case_from_mapping``).

    Raises SpecError quoting the line and the part that did not parse; a case that is impossible (e.g. g: 0) is
    reported after ``where`` (default ``line '<line>': ``).
    """
    if line.lstrip().startswith("{"):
        return _parse_mapping_line(line, where)
    fields = _shapes.parse_line(line)  # the harness's reading of the official text form (SpecError is CaseError)
    return case_from_mapping(fields, where=f"line {line.strip()!r}: " if where is None else where)


def _parse_mapping_line(line: str, where: str | None) -> Case:
    """One case written as a flow mapping, ``{"m": [..], "n": [..], "k": [..], "g": 2, "seed": 1111}``."""
    try:
        value = yaml.safe_load(line)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise SpecError(f"expected a mapping like {{\"m\": [96], \"n\": [128], \"k\": [256]}}, got "
                        f"{line.strip()!r} ({problem})") from None
    if not isinstance(value, dict):
        raise SpecError(f"expected a mapping like {{\"m\": [96], \"n\": [128], \"k\": [256]}}, got "
                        f"{line.strip()!r}")
    return case_from_mapping(value, where=f"case {line.strip()!r}: " if where is None else where)


def parse_text(text: str, source: str = "") -> list[Case]:
    """Parse the official text format: one case a line; blank lines and ``#`` comments are skipped.

    Raises SpecError; with ``source`` (the file name) its message starts ``<source>:<line number>: ``.
    """
    cases = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not source:
            cases.append(parse_case_line(line))
            continue
        try:
            cases.append(parse_case_line(line, where=""))
        except SpecError as exc:
            raise SpecError(f"{source}:{lineno}: {exc}") from None
    return cases


def load_shapes(spec: str, aliases: tuple[str, ...] = ()) -> ShapeSet:
    """Resolve ``--shapes`` for this problem: harness.shapes.load_shapes (a set name, a .yml or text file, an
    official task.yml with ``#`` picks, one inline case). Raises SpecError naming what was tried."""
    return _shapes.load_shapes(spec, _shapes.DEFAULT_PROBLEM, aliases)
