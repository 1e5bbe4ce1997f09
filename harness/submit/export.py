"""``fp4bench export``: one self-contained ``submission.py`` from a variant, the file the official runner takes.

The runner puts only ``task.py``, ``utils.py`` and ``reference.py`` beside the submission, so the export
- inlines the variant's sibling modules (``import wgmma_sm90_host as host``: its code comes first, ``host.X``
  becomes ``X``) and the fp4bench helpers it imports (board.INLINED_HELPERS, e.g. ``task.formats``), in
  dependency order, each under a ``# ---- file ----`` line, as real code (nothing hidden in strings or exec);
- embeds the variant's kernel sources (.cu, .cuh, .cpp, .h, .hpp, .cc, .c beside submission.py) as string
  literals when a module reads ``__file__``; the file writes them to a folder named by their digest on import
  (``~/.cache/fp4bench-export/<digest>``, else the temporary folder) and ``__file__`` points into it, since nvcc
  and torch's extension builder read files;
- starts with the directives the board needs (board.LEADERBOARD, the board's GPU) and the variant's
  ``#!FP4BENCH requires`` line (the server ignores it; fp4bench reads it).
The same variant gives the same bytes. What cannot be exported safely is refused with one line (ExportError).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from harness import ROOT
from harness.parent.registry import ENTRY_FILE, Variant, problem_of
from harness.submit import board
from harness.submit.flatten import (ExportError, Module, apply_edits, check_namespace, parse, remove_statement,
                                    rewrite, scope_of)

__all__ = ["ExportError", "Exported", "export_variant", "SOURCE_SUFFIXES"]

#: Kernel source files embedded from the variant's folder.
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".h", ".hpp", ".cc", ".c")
#: Names the export's own code binds.
OWN_NAMES = {"_export_os": "import os", "_export_hashlib": "import hashlib", "_export_tempfile": "import tempfile",
             "_EXPORT_SOURCES": "the embedded sources", "_export_folder": "writes them", "_EXPORT_DIR": "their folder"}


@dataclass(frozen=True)
class Exported:
    """An export: ``text`` the file's content; ``modules`` the Python files inlined, entry last; ``sources`` the
    kernel sources embedded (as messages name them)."""

    text: str
    modules: tuple[str, ...]
    sources: tuple[str, ...]


def shown(path: Path) -> str:
    """A path as the export names it: relative to the checkout when inside it, else its last two parts (so the
    exported bytes do not depend on where the checkout lies)."""
    path = Path(path).resolve()
    if path.is_relative_to(ROOT):
        return path.relative_to(ROOT).as_posix()
    return "/".join(path.parts[-2:])


def export_variant(variant: Variant) -> Exported:
    """The export of ``variant`` (see the module docstring). Raises ExportError with a one-line reason."""
    folder = variant.path.parent
    entry = parse(None, variant.path, shown(variant.path))
    modules: dict[str | None, Module] = {}
    order: list[Module] = []
    _collect(entry, folder, modules, order, visiting=set())
    uses_file = any(isinstance(n, ast.Name) and n.id == "__file__" for m in order for n in ast.walk(m.tree))
    sources = _sources(folder) if uses_file else {}
    check_namespace(order, OWN_NAMES if sources else {})
    providers = {m.name: scope_of(m) for m in order if m.name is not None}
    for module in order:
        file_expr = (f'_export_os.path.join(_EXPORT_DIR, {module.path.name!r})' if sources else None)
        rewrite(module, providers, file_expr)
    text = _assemble(variant, order, sources)
    try:
        compile(text, ENTRY_FILE, "exec", dont_inherit=True)
    except SyntaxError as exc:  # a bug in the edits: say where, do not write a broken file
        raise ExportError(f"the exported file does not compile ({exc.msg}, line {exc.lineno}): an fp4bench bug, "
                          f"please report it with the variant") from None
    return Exported(text, tuple(m.shown for m in order), tuple(sorted(sources)))


def _collect(module: Module, folder: Path, modules: dict, order: list[Module], visiting: set) -> None:
    """Classify the module's imports, parse what it inlines (recursively, each once) and append every module after
    the ones it imports (entry last)."""
    visiting.add(module.name)
    top_level = set(map(id, module.tree.body))
    for node in ast.walk(module.tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            if id(node) not in top_level:
                raise ExportError(f"{module.where(node)}: a __future__ import not at the top of the module")
            module.futures.update(a.name for a in node.names)
            remove_statement(module, node)
            continue
        targets = _targets(module, node, folder)
        if not targets:
            continue
        if id(node) not in top_level:
            raise ExportError(f"{module.where(node)}: imports {targets[0][1]} inside a function or block; export "
                              f"inlines only imports at a module's top level")
        if len(targets) != len(node.names):
            raise ExportError(f"{module.where(node)}: one statement imports inlined and other modules: put "
                              f"{targets[0][1]} on its own import line")
        assignments = []
        for alias, target in targets:
            if target in visiting:
                raise ExportError(f"{module.where(node)}: imports {target}, which imports this module back "
                                  f"(a cycle export cannot order)")
            if target not in modules:
                child = parse(target, _target_path(target, folder), _target_shown(target, folder))
                modules[target] = child
                _collect(child, folder, modules, order, visiting)
            module.deps.append(target)
            if isinstance(node, ast.Import):
                if alias.asname is None and "." in alias.name:
                    raise ExportError(f"{module.where(node)}: import {alias.name}: write 'from {alias.name} import "
                                      f"...' or 'import {alias.name} as NAME' so export can inline it")
                module.aliases[alias.asname or alias.name] = target
            else:
                if alias.name == "*":
                    raise ExportError(f"{module.where(node)}: from {target} import *: name what you import")
                local = alias.asname or alias.name
                module.from_names[local] = (target, alias.name, node.lineno)
                if local != alias.name:
                    assignments.append(f"{local} = {alias.name}")
        remove_statement(module, node, "; ".join(assignments))
    visiting.discard(module.name)
    for name, (target, original, line) in module.from_names.items():
        if original not in scope_of(modules[target]).bound:
            raise ExportError(f"{module.shown}:{line}: from {target} import {original}: {target} defines no "
                              f"top-level {original!r}")
    modules[module.name] = module
    order.append(module)


def _targets(module: Module, node: ast.Import | ast.ImportFrom, folder: Path) -> list[tuple[ast.alias, str]]:
    """(alias, inlined module name) for each name of an import statement that export inlines; raises ExportError
    for an import the official runner cannot satisfy and export cannot inline."""
    if isinstance(node, ast.ImportFrom) and node.level:
        raise ExportError(f"{module.where(node)}: a relative import; write 'import NAME' for a module beside "
                          f"submission.py")
    names = [(a, a.name) for a in node.names] if isinstance(node, ast.Import) else [(a, node.module)
                                                                                    for a in node.names]
    found = []
    for alias, name in names:
        top = name.split(".")[0]
        if isinstance(node, ast.ImportFrom) and name == "task" and alias.name in _helper_leaves():
            raise ExportError(f"{module.where(node)}: from task import {alias.name}: write 'from task.{alias.name} "
                              f"import ...' so export can inline it")
        if name in board.INLINED_HELPERS:
            found.append((alias, name))
        elif top == "task" and name != "task":
            raise ExportError(f"{module.where(node)}: imports {name}, which the official runner does not have (its "
                              f"task is task.py); export inlines only {', '.join(board.INLINED_HELPERS)}")
        elif top in board.RUNNER_MODULES and (folder / f"{top}.py").exists():
            raise ExportError(f"{shown(folder / (top + '.py'))}: has the name of the official runner's {top}.py, "
                              f"which would replace it there: rename it")
        elif (folder / top).is_dir() and (folder / top / "__init__.py").exists():
            raise ExportError(f"{module.where(node)}: imports the package {top}/ beside submission.py; export "
                              f"inlines single modules (.py files) only")
        elif (folder / f"{top}.py").is_file() and top not in board.RUNNER_MODULES:
            if (folder / f"{top}.py").resolve() == (folder / ENTRY_FILE).resolve():
                raise ExportError(f"{module.where(node)}: imports submission.py itself")
            if name != top:
                raise ExportError(f"{module.where(node)}: imports {name} from the module {top}.py")
            found.append((alias, top))
    return found


def _helper_leaves() -> set[str]:
    return {name.rpartition(".")[2] for name in board.INLINED_HELPERS}


def _target_path(target: str, folder: Path) -> Path:
    return board.INLINED_HELPERS.get(target) or folder / f"{target}.py"


def _target_shown(target: str, folder: Path) -> str:
    """How the export names an inlined module: a helper by its import name as a path (``task/formats.py``, as the
    submission imports it, wherever fp4bench keeps it), a sibling module by its path."""
    if target in board.INLINED_HELPERS:
        return target.replace(".", "/") + ".py"
    return shown(_target_path(target, folder))


def _sources(folder: Path) -> dict[str, str]:
    """The kernel sources beside submission.py (SOURCE_SUFFIXES), name -> text. Raises ExportError for one that is
    not UTF-8 or holds a NUL (a Python file cannot carry it)."""
    found = {}
    for path in sorted(folder.iterdir()):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ExportError(f"{shown(path)}: not UTF-8 (offset {exc.start}): export embeds kernel sources as "
                              f"text") from None
        if "\0" in text:
            raise ExportError(f"{shown(path)}: holds a NUL character, which a Python file cannot carry")
        found[path.name] = text
    return found


def literal(text: str) -> str:
    """A Python literal for ``text``: a raw triple-quoted string when that spells it exactly (the text as it reads
    in its file), else ``repr``; checked by evaluating it back."""
    if '"""' not in text and not text.endswith("\\") and "\r" not in text:
        candidate = f'r"""{text}"""'
        try:
            if ast.literal_eval(candidate) == text:
                return candidate
        except (SyntaxError, ValueError):
            pass
    return repr(text)


_WRITER = '''

def _export_folder(sources):
    """A folder holding ``sources`` (file name -> text), named by their digest so that a later process finds it
    written: under ~/.cache/fp4bench-export, else the temporary folder. A file already there with the same
    bytes is left as it is (a build cache keyed on its time stays valid)."""
    digest = _export_hashlib.sha256(repr(sorted(sources.items())).encode()).hexdigest()[:16]
    bases = (_export_os.path.join(_export_os.path.expanduser("~"), ".cache", "fp4bench-export"),
             _export_tempfile.gettempdir())
    for base in bases:
        folder = _export_os.path.join(base, digest)
        try:
            _export_os.makedirs(folder, exist_ok=True)
            for name, text in sources.items():
                path, data = _export_os.path.join(folder, name), text.encode()
                if _export_os.path.isfile(path):
                    with open(path, "rb") as old:
                        if old.read() == data:
                            continue
                part = f"{path}.{_export_os.getpid()}.part"
                with open(part, "wb") as new:
                    new.write(data)
                _export_os.replace(part, path)
            return folder
        except OSError:
            continue
    raise OSError(f"cannot write the embedded kernel sources under {' or '.join(bases)}")


_EXPORT_DIR = _export_folder(_EXPORT_SOURCES)
'''


def _assemble(variant: Variant, order: list[Module], sources: dict[str, str]) -> str:
    """The exported file's text: directives, a note of what it holds, hoisted __future__ imports, the sources'
    writer, then each module's edited code."""
    entry = order[-1]
    inlined = [m.shown for m in order[:-1]]
    head = [f"#!POPCORN leaderboard {problem_of(variant)}", f"#!POPCORN gpu {next(iter(board.BOARD_GPUS))}"]
    if variant.requires.kind != "any":
        head.append(f"#!FP4BENCH requires {variant.requires.text}")
    what = f"# fp4bench export of {shown(variant.path.parent) if variant.path.name == ENTRY_FILE else entry.shown}"
    if inlined:
        what += f"; inlined: {', '.join(inlined)}"
    if sources:
        what += f"; embedded: {', '.join(sorted(sources))}"
    head += [what + ".", "# Generated: edit the variant and export again rather than this file."]
    parts = ["\n".join(head) + "\n"]
    futures = sorted(set().union(*(m.futures for m in order)))
    if futures:
        parts.append(f"from __future__ import {', '.join(futures)}\n")
    if sources:
        body = ",\n".join(f"    {name!r}: {literal(text)}" for name, text in sorted(sources.items()))
        parts.append("import hashlib as _export_hashlib\nimport os as _export_os\nimport tempfile as _export_tempfile"
                     f"\n\n#: The kernel sources beside the variant's submission.py, by file name.\n"
                     f"_EXPORT_SOURCES = {{\n{body},\n}}\n" + _WRITER)
    _drop_directives(entry)
    for module in order:
        code = apply_edits(module).strip("\n")
        parts.append(f"# ---- {module.shown} ----\n{code}\n")
    return "\n".join(parts)


def _drop_directives(entry: Module) -> None:
    """Delete the entry's ``#!POPCORN`` / ``#!FP4BENCH`` lines of its leading comment block (the export writes its
    own)."""
    pos = 0
    for line in entry.text.splitlines(keepends=True):
        if not line.startswith("#"):
            break
        if line.split()[:1] in (["#!POPCORN"], ["#!FP4BENCH"]):
            entry.edits.append((pos, pos + len(line), ""))
        pos += len(line)
