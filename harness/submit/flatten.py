"""One Python module's part of an export: which of its imports are inlined, and the exact edits that make its code
run in the one namespace the exported file has.

Edits are spans of the source found by ``ast`` (start and end of a node), never patterns: an inlined import is
deleted (a renamed name becomes ``alias = name``), ``alias.NAME`` of an inlined module becomes ``NAME``, a
``from __future__`` import moves to the top of the file, and ``__file__`` becomes the path the embedded sources
are written under. ``symtable`` decides which names a module reads from its globals, so that names that would
clash in one namespace are refused rather than silently bound to another module's object.
"""
from __future__ import annotations

import ast
import functools
import symtable
from dataclasses import dataclass, field
from pathlib import Path


class ExportError(ValueError):
    """A variant that cannot be exported; the message is one line naming the file, the line and the reason."""


#: Module globals whose meaning changes once a module is inlined into another's namespace.
MODULE_IDENTITY = ("__name__", "__spec__", "__loader__", "__package__", "__path__", "__doc__", "globals")
#: Prefix of the names the export's own code defines; a variant's code may not use it.
RESERVED = "_export_"


@dataclass
class Module:
    """A Python file to inline: ``name`` is its import name (``wgmma_sm90_host``, ``task.formats``; ``None`` for the
    entry, submission.py), ``shown`` how messages name it. ``edits`` are (start, end, text) character spans;
    ``inlined`` maps each import of an inlined module to it (``deps``: their names in import order)."""

    name: str | None
    path: Path
    shown: str
    text: str
    tree: ast.Module
    deps: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    from_names: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    futures: set[str] = field(default_factory=set)
    edits: list[tuple[int, int, str]] = field(default_factory=list)

    def where(self, node: ast.AST | int) -> str:
        line = node if isinstance(node, int) else node.lineno
        return f"{self.shown}:{line}"


def parse(name: str | None, path: Path, shown: str) -> Module:
    """Read and parse one Python file. Raises ExportError when it is not UTF-8 or not valid Python."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExportError(f"{shown}: not UTF-8 (offset {exc.start}); the official server takes UTF-8 only") from None
    except OSError as exc:
        raise ExportError(f"{shown}: cannot be read: {exc.strerror or exc}") from None
    try:
        tree = ast.parse(text.lstrip("\ufeff"), filename=shown)
    except SyntaxError as exc:
        raise ExportError(f"{shown}:{exc.lineno}: not valid Python: {exc.msg}") from None
    return Module(name, path, shown, text.lstrip("\ufeff"), tree)


def offset(module: Module, line: int, col: int) -> int:
    """The character offset of ``ast``'s (line, UTF-8 byte column) in the module's text."""
    starts = _line_starts(module.text)
    line_text = module.text[starts[line - 1]:]
    return starts[line - 1] + len(line_text.encode()[:col].decode())


@functools.lru_cache(maxsize=16)
def _line_starts(text: str) -> list[int]:
    starts, pos = [0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def span(module: Module, node: ast.AST) -> tuple[int, int]:
    """The node's source span as character offsets."""
    return offset(module, node.lineno, node.col_offset), offset(module, node.end_lineno, node.end_col_offset)


def remove_statement(module: Module, node: ast.stmt, replacement: str = "") -> None:
    """Delete a top-level statement: its whole lines when it stands alone on them (a trailing comment goes with it),
    else the statement only, replaced by ``pass`` so that ``;`` neighbours still parse. ``replacement`` (an
    assignment) takes its place instead when given."""
    start, end = span(module, node)
    starts = _line_starts(module.text)
    line_start = starts[node.lineno - 1]
    line_end = starts[node.end_lineno] if node.end_lineno < len(starts) else len(module.text)
    before = module.text[line_start:start]
    after = module.text[end:line_end].strip()
    if not before.strip() and (not after or after.startswith("#")):
        module.edits.append((line_start, line_end, replacement + "\n" if replacement else ""))
    else:
        module.edits.append((start, end, replacement or "pass"))


def apply_edits(module: Module) -> str:
    """The module's text with its edits applied. Raises ExportError when two edits overlap (a bug here)."""
    out, pos = [], 0
    for start, end, text in sorted(module.edits):
        if start < pos:
            raise ExportError(f"{module.shown}: overlapping export edits at offset {start}")
        out += [module.text[pos:start], text]
        pos = end
    out.append(module.text[pos:])
    return "".join(out)


@dataclass(frozen=True)
class Scope:
    """What symtable says about a module: top-level names it binds (``import_only``: bound by import statements
    alone, with their targets), names it reads from its globals, and names local to any inner scope."""

    bound: dict[str, int]
    import_only: dict[str, frozenset]
    reads: set[str]
    locals_anywhere: set[str]


def scope_of(module: Module) -> Scope:
    """The module's bindings and global reads (see Scope)."""
    table = symtable.symtable(module.text, module.shown, "exec")
    bound, import_only = {}, {}
    targets = _import_targets(module.tree)
    for sym in table.get_symbols():
        name = sym.get_name()
        if sym.is_assigned() or sym.is_imported() or sym.is_namespace():
            bound[name] = _binding_line(module.tree, name)
            if sym.is_imported() and not sym.is_assigned() and not sym.is_namespace():
                import_only[name] = frozenset(targets.get(name, ()))
    reads = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    locals_anywhere: set[str] = set()
    stack = list(table.get_children())
    while stack:
        inner = stack.pop()
        stack += inner.get_children()
        for sym in inner.get_symbols():
            if sym.is_global() and sym.is_referenced():
                reads.add(sym.get_name())
            elif sym.is_local() or sym.is_free() or sym.is_parameter():
                locals_anywhere.add(sym.get_name())
    return Scope(bound, import_only, reads, locals_anywhere)


def _import_targets(tree: ast.Module) -> dict[str, set]:
    """Top-level-scope import bindings: name -> {("import", "torch") or ("from", "dataclasses", "dataclass")}."""
    found: dict[str, set] = {}
    for node in _module_level(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.asname or a.name.split(".")[0]
                found.setdefault(bound, set()).add(("import", a.name if a.asname else bound))
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                found.setdefault(a.asname or a.name, set()).add(("from", node.module, node.level, a.name))
    return found


def _module_level(tree: ast.Module):
    """Every node of the module's own scope (not inside a def, class or lambda body)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack += list(ast.iter_child_nodes(node))


def _binding_line(tree: ast.Module, name: str) -> int:
    """The first line that binds ``name`` at module level (for messages); 1 if none is found."""
    for node in sorted(_module_level(tree), key=lambda n: getattr(n, "lineno", 0)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node.lineno
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return node.lineno
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names):
            return node.lineno
    return 1


def rewrite(module: Module, providers: dict[str, Scope], sources_file: str | None) -> None:
    """Add the edits of the module's uses of inlined modules and of module identity: ``alias.NAME`` -> ``NAME``
    (NAME a top-level name of the aliased module), ``__file__`` -> ``sources_file`` (an expression) when not None.
    Raises ExportError for a use that cannot be rewritten safely."""
    scope = scope_of(module)
    rewritten: set[str] = set()
    parents = {id(child): node for node in ast.walk(module.tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in module.aliases:
            alias, target = node.value.id, module.aliases[node.value.id]
            if not isinstance(node.ctx, ast.Load):
                raise ExportError(f"{module.where(node)}: assigns {alias}.{node.attr}; once {target} is inlined "
                                  f"there is no module object to assign to: keep such state in {target} itself")
            if node.attr not in providers[target].bound:
                raise ExportError(f"{module.where(node)}: {alias}.{node.attr}: {target} defines no top-level "
                                  f"{node.attr!r}")
            module.edits.append((*span(module, node), node.attr))
            rewritten.add(node.attr)
        elif isinstance(node, ast.Name):
            parent = parents.get(id(node))
            if node.id in module.aliases and not (isinstance(parent, ast.Attribute) and parent.value is node):
                raise ExportError(f"{module.where(node)}: uses {node.id} (the inlined module "
                                  f"{module.aliases[node.id]}) other than as {node.id}.NAME, which export cannot "
                                  f"inline")
            if node.id == "__file__" and sources_file is not None:
                module.edits.append((*span(module, node), sources_file))
            if node.id in MODULE_IDENTITY and module.name is not None:
                raise ExportError(f"{module.where(node)}: reads {node.id}, which changes meaning once "
                                  f"{module.name} is inlined into submission.py")
            if node.id.startswith(RESERVED) or node.id.startswith(RESERVED.upper()):
                raise ExportError(f"{module.where(node)}: the name {node.id!r} is reserved for the exported file's "
                                  f"own code ({RESERVED}*)")
    for alias in module.aliases:
        if alias in scope.locals_anywhere:
            raise ExportError(f"{module.shown}: {alias!r} names the inlined module {module.aliases[alias]} and "
                              f"also a local or parameter: rename one")
    shadowed = sorted(rewritten & scope.locals_anywhere)
    if shadowed:
        raise ExportError(f"{module.shown}: {shadowed[0]!r} is read through an inlined module and is also a local "
                          f"or parameter name there; after inlining the two would be one name: rename the local")


def check_namespace(modules: list[Module], extra_bound: dict[str, str]) -> None:
    """Refuse names that would clash once every module shares one namespace: a top-level name two modules bind
    (unless both bind it by the same import), or a name one module reads from its globals or the builtins that
    another binds. ``extra_bound``: names the export's own code binds, with what binds them."""
    scopes = [(m, scope_of(m)) for m in modules]
    owner: dict[str, tuple[Module, int, frozenset | None]] = {}
    for module, scope in scopes:
        inlined_from = set(module.from_names)
        for name, line in scope.bound.items():
            if name in module.aliases or (name in inlined_from and module.from_names[name][1] == name):
                continue  # bound by an import that the export deletes
            if name in extra_bound:
                raise ExportError(f"{module.shown}:{line}: the name {name!r} is reserved for the exported file's "
                                  f"own code ({extra_bound[name]})")
            here = scope.import_only.get(name)
            if name in owner:
                first, first_line, first_import = owner[name]
                if here is None or first_import is None or here != first_import:
                    raise ExportError(f"{module.shown}:{line}: the top-level name {name!r} is also bound in "
                                      f"{first.shown}:{first_line}; export puts both modules in one namespace: "
                                      f"rename one")
            else:
                owner[name] = (module, line, here)
    for module, scope in scopes:
        own = set(scope.bound) | set(module.from_names)
        for name in sorted(scope.reads - own):
            if name in owner and owner[name][0] is not module:
                other, line, _ = owner[name]
                raise ExportError(f"{module.shown}: reads {name!r} from its globals or the builtins, but "
                                  f"{other.shown}:{line} binds that name at top level; export puts both modules in "
                                  f"one namespace: rename it")
