"""Shape sets of any problem: the official one-case-a-line text, YAML files, and ``--shapes`` resolution.

What a case holds belongs to its problem (``harness/problem.py``: ``parse_case``, ``case_text``); this module
knows only the forms cases travel in. The official text form (task.yml ``tests``/``benchmarks`` as they reach the
evaluator) is one case a line, ``key: value`` pairs separated by ``;``, values an integer or a bracketed list:
``m: 128; n: 256; k: 256; l: 1; seed: 1111``, or task.yml's flow mapping ``{"m": 128, "n": 256, ...}``. A YAML
shape file is ``{cases: [{key: value, ...}, ...]}`` or an official task.yml (its ``tests`` and ``benchmarks``
lists). After a source, ``#`` picks a task.yml's list and then one case by number from 1 or by name
(``task.yml#benchmarks``, ``benchmarks#2``, ``tests#3``).
A shape set's problem is named, not held, so a set pickles to a pool worker as plain data; the registry
(harness.plugs) is imported only where a plug is needed, so a problem may import this module.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from harness.problem import DEFAULT_PROBLEM, CaseError

#: Hex digits of a shape set's id (``shape_set_id``): 48 bits, short enough to type, and two sets in one store
#: collide with odds of about n^2 / 2^49.
SHAPE_SET_ID_DIGITS = 12

#: The lists of cases an official task.yml holds, in the order they are offered.
TASK_YML_SETS = ("tests", "benchmarks")
#: Separates a --shapes source from what is picked in it (``task.yml#benchmarks#2``).
PICK = "#"

_PAIR = re.compile(r"^\s*([a-z_]+)\s*:\s*(.+?)\s*$")


def shape_set_id(case_texts: Iterable[str]) -> str:
    """A shape set's identity: the first ``SHAPE_SET_ID_DIGITS`` hex digits of the sha256 of its cases' official
    lines (sizes and seeds, not names) joined by newlines, in order."""
    return hashlib.sha256("\n".join(case_texts).encode()).hexdigest()[:SHAPE_SET_ID_DIGITS]


@dataclass(frozen=True)
class ShapeSet:
    """A list of cases of problem ``problem`` (a name ``plugs.get`` knows), identified by its content (``id``);
    ``name`` is only a label (the file stem, or ``inline``)."""

    name: str
    cases: tuple
    problem: str = DEFAULT_PROBLEM

    @property
    def id(self) -> str:
        """``shape_set_id`` of the plug's official lines of ``cases``."""
        from harness import plugs

        plug = plugs.get(self.problem)
        return shape_set_id(plug.case_text(c) for c in self.cases)


def parse_line(line: str, fields: Sequence[str] = ()) -> dict[str, Any]:
    """One official text line as a mapping (values read as YAML: ``128``, ``[96, 128]``), or task.yml's flow
    mapping (``{"m": 128, ...}``). ``fields``: the problem's case fields, named when a flow mapping does not
    parse. Raises CaseError quoting the line and the part that did not parse, or a key given twice."""
    if line.lstrip().startswith("{"):
        try:
            value = yaml.safe_load(line)
        except yaml.YAMLError as exc:
            value = getattr(exc, "problem", None) or " ".join(str(exc).split())
        if not isinstance(value, dict):
            why = f" ({value})" if isinstance(value, str) else ""
            keys = f" of {', '.join(fields)}" if fields else ""
            raise CaseError(f"expected a mapping{keys}, got {line.strip()!r}{why}")
        return value
    fields: dict[str, Any] = {}
    for part in line.split(";"):
        if not part.strip():
            continue
        match = _PAIR.match(part)
        if not match:
            raise CaseError(f"expected 'key: value' in {part.strip()!r} of line {line.strip()!r}")
        key, raw = match.groups()
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise CaseError(f"cannot read value {raw!r} for {key!r} in line {line.strip()!r}") from None
        if key in fields:
            raise CaseError(f"key {key!r} given twice in line {line.strip()!r}")
        fields[key] = value
    return fields


def parse_text(text: str, plug, source: str = "") -> list:
    """Cases of ``plug`` from the official text form, one a line; blank lines and ``#`` comments are skipped.
    Raises CaseError; with ``source`` (the file name) its message starts ``<source>:<line number>: ``, without it
    ``line '<line>': ``."""
    cases = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        inline = "case" if line.lstrip().startswith("{") else "line"
        where = f"{source}:{lineno}: " if source else f"{inline} {line.strip()!r}: "
        mapping = None
        try:
            mapping = parse_line(line, plug.case_fields)
            cases.append(plug.parse_case(mapping, where=where))
        except CaseError as exc:
            message = str(exc)
            hint = _other_problem_hint([mapping], plug) if isinstance(mapping, dict) else ""
            raise CaseError((message if message.startswith(where) else where + message) + hint) from None
    return cases


def read_text_file(path: Path) -> str:
    """The text of ``path`` as UTF-8. Raises CaseError naming the file for one that is not UTF-8 text (e.g. a
    binary file) or cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CaseError(f"{path}: not a UTF-8 text file (byte {exc.object[exc.start]:#04x} at offset "
                        f"{exc.start})") from None
    except OSError as exc:
        raise CaseError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_yaml_file(path: Path):
    """The YAML document in ``path`` (None for an empty file). Raises CaseError in one line naming the file, and
    the line and column where the parser stopped, for a file that is not UTF-8 text or not valid YAML."""
    text = read_text_file(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise CaseError(f"{path}: not valid YAML{where}: {problem}") from None


def _case_lists(doc, path) -> dict[str, list]:
    """The lists of cases a shape file holds: ``{"cases": [...]}`` or an official task.yml's ``tests`` and
    ``benchmarks`` (TASK_YML_SETS). Raises CaseError naming the file and what it holds instead."""
    if doc is None:
        raise CaseError(f"{path}: the file is empty (expected a mapping with a 'cases' list, or an official task.yml)")
    if isinstance(doc, dict) and "cases" in doc:
        if not isinstance(doc["cases"], list):
            raise CaseError(f"{path}: expected a mapping with a 'cases' list, got 'cases' of type "
                            f"{type(doc['cases']).__name__}")
        return {"cases": doc["cases"]}
    if isinstance(doc, dict):
        found = {name: doc[name] for name in TASK_YML_SETS if isinstance(doc.get(name), list)}
        if found:
            return found
    got = type(doc).__name__ if not isinstance(doc, dict) else \
        f"a mapping with keys {', '.join(map(repr, doc)) or 'none'}"
    raise CaseError(f"{path}: expected a mapping with a 'cases' list, or an official task.yml with 'tests' or "
                    f"'benchmarks' lists, got {got}")


def load_yaml(path: Path, plug, picks: tuple[str, ...] = ()) -> ShapeSet:
    """A YAML shape file, ``{cases: [mapping, ...]}``, or an official task.yml, whose ``tests`` or
    ``benchmarks`` list is taken (``picks[0]`` names it; needed only when the file holds both); each case parsed
    by ``plug``; a further pick selects one case (``pick_case``). Raises CaseError with the file name (and case
    index) for a malformed document, an empty list, a bad case, or a pick that matches nothing."""
    lists, picks = _case_lists(read_yaml_file(path), path), list(picks)
    if "cases" in lists:
        part, name = "cases", Path(path).stem
    elif picks and picks[0] in lists:
        part = name = picks.pop(0)
    elif len(lists) == 1:
        part = name = next(iter(lists))
    else:
        choices = " or ".join(f"{path}{PICK}{n}" for n in lists)
        got = f"{path}{PICK}{picks[0]}" if picks else str(path)
        raise CaseError(f"{path} holds {' and '.join(repr(n) for n in lists)}: expected {choices}, got {got}")
    label = f"{path} case" if part == "cases" else f"{path} {part}"
    for i, c in enumerate(lists[part], 1):  # numbered from 1, as reports and ``#`` picks number shapes
        if not isinstance(c, dict):
            raise CaseError(f"{label} {i}: expected a mapping of {', '.join(plug.case_fields)}, got "
                            f"{type(c).__name__} {c!r}")
    try:
        cases = tuple(plug.parse_case(c, where=f"{label} {i}: ") for i, c in enumerate(lists[part], 1))
    except CaseError as exc:
        raise CaseError(f"{exc}{_other_problem_hint(lists[part], plug)}") from None
    if not cases:
        raise CaseError(f"{path}: {part!r} is empty")
    if len(picks) > 1:
        raise CaseError(f"--shapes {path}{PICK}{PICK.join(picks)}: expected at most one case after the set "
                        f"(e.g. {path}{PICK}2), got {len(picks)} picks")
    shape_set = ShapeSet(name, cases, plug.name)
    return pick_case(shape_set, picks[0]) if picks else shape_set


def _other_problem_hint(items: list, plug) -> str:
    """``; these are nvfp4_gemv cases: --problem nvfp4_gemv`` when the items' keys are another problem's case
    fields and not ``plug``'s (a shape file of another problem run without ``--problem``; the problems whose
    fields they are exactly, else those holding them), else ``""``."""
    from harness import plugs

    keys = {k for c in items for k in c} - {"name"}
    if not keys or keys <= set(plug.case_fields):
        return ""
    others = [n for n in plugs.names() if n != plug.name and keys <= set(plugs.get(n).case_fields)]
    exact = [n for n in others if keys == set(plugs.get(n).case_fields)]
    others = exact or others
    if not others:
        return ""
    return f"; these are {others[0]} cases: --problem {others[0]}" if len(others) == 1 else \
        f"; these are cases of {' or '.join(others)}: --problem with one of them"


def pick_case(shape_set: ShapeSet, pick: str) -> ShapeSet:
    """The one case of ``shape_set`` that ``pick`` names: its number, counted from 1 as reports number shapes,
    or its name; the set is named ``<set>#<pick>``. Raises CaseError naming the numbers and names there are."""
    cases = shape_set.cases
    if pick.isdigit() and 1 <= int(pick) <= len(cases):
        chosen = cases[int(pick) - 1]
    else:
        chosen = next((c for c in cases if c.name and c.name == pick), None)
    if chosen is None:
        names = [c.name for c in cases if c.name]
        named = f" or a case name ({', '.join(names)})" if names else ""
        raise CaseError(f"--shapes {shape_set.name}{PICK}{pick}: expected a case number from 1 to {len(cases)}"
                        f"{named}, got {pick!r}")
    return ShapeSet(f"{shape_set.name}{PICK}{pick}", (chosen,), shape_set.problem)


def load_shapes(spec: str, problem: str = DEFAULT_PROBLEM, aliases: tuple[str, ...] = ()) -> ShapeSet:
    """Resolve ``--shapes`` for ``problem``: a name of one of its sets (``tests``, ``benchmarks``, ``smoke``: the
    YAML files in its folder of configs/shapes, ``plugs.shapes_file``), a .yml/.yaml path, a text file (one case
    a line), or one inline case in the text form (holds ``:`` and ``;``). ``aliases``: names the caller resolves
    before calling (the CLI's ``auto``), listed among the names when nothing matches.

    Raises CaseError when nothing matches, naming what was tried, or for a bad file or case."""
    from harness import plugs

    plug = plugs.get(problem)
    folder = plugs.shapes_file(problem, "tests").parent
    if spec.lstrip().startswith("{") or (":" in spec and ";" in spec):
        return ShapeSet("inline", tuple(parse_text(spec, plug)), problem)
    source, picks = spec, ()
    if not Path(spec).is_file() and PICK in spec:
        source, *rest = spec.split(PICK)
        picks = tuple(rest)
        if not source or not all(picks):
            raise CaseError(f"--shapes {spec!r}: expected SOURCE{PICK}PICK with nothing empty (e.g. benchmarks"
                            f"{PICK}2 or task.yml{PICK}tests)")
    named = folder / f"{source}.yml"
    if "/" not in source and named.is_file():
        return load_yaml(named, plug, picks)
    path = Path(source)
    if path.is_file():
        if path.suffix in (".yml", ".yaml"):
            return load_yaml(path, plug, picks)
        cases = parse_text(read_text_file(path), plug, str(path))
        if not cases:
            raise CaseError(f"{path}: no cases in the file")
        if len(picks) > 1:
            raise CaseError(f"--shapes {spec!r}: expected at most one case after the file, got {len(picks)} picks")
        shape_set = ShapeSet(path.stem, tuple(cases), problem)
        return pick_case(shape_set, picks[0]) if picks else shape_set
    if path.is_dir():
        raise CaseError(f"shape file {source}: expected a .yml or text file, got a folder")
    if path.suffix in (".yml", ".yaml", ".txt") or "/" in source:
        raise CaseError(f"shape file {source} does not exist")
    known = [*aliases, *sorted(p.stem for p in folder.glob("*.yml"))]
    example = plug.case_text(load_yaml(plugs.shapes_file(problem, "tests"), plug).cases[0])
    raise CaseError(f"--shapes {spec!r}: expected a shape-set name of {problem} ({', '.join(known)}), a .yml or "
                    f"text file (an official task.yml too), one case of a set (benchmarks{PICK}2), or an inline "
                    f"case like {example!r}")
