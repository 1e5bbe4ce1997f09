"""What the official GPU MODE server accepts, checked on one file, each finding with its file and line.

The rules, as gpu-mode/kernelbot applies them (``kernelbot/api/api_utils.py``, ``libkernelbot/submission.py``)
and docs/submitting.md lists them: one non-empty UTF-8 file of at most 1,000,000 bytes named ``.py``, ``.cu``,
``.cuh`` or ``.cpp``; ``#!POPCORN`` (``//!POPCORN`` in C++) directives read only from the leading comment block
(the lines from the first that start with ``#`` or ``//``; any other line, a blank one included, ends it), a
directive without an argument, an unknown one or a repeated one refused; any occurrence of "stream" in any case,
comments and strings included, refused. Then the file must run in the official image: its imports may name only
the runner's files (board.RUNNER_MODULES), the image's packages (IMAGE_PACKAGES) and the standard library, and bind
``custom_kernel`` at its top level (the runner calls it). And the
board must be able to run it: a ``#!FP4BENCH requires`` header that the board's GPUs cannot meet is a finding.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import plugs
from harness.parent.registry import DeviceFacts, RegistryError, parse_requirement
from harness.submit import board

#: The server's size limit in bytes (``len(content) > 1_000_000`` is refused).
MAX_BYTES = 1_000_000
#: What the runner calls in a Python submission.
ENTRY_NAME = "custom_kernel"
#: File name endings the server takes.
EXTENSIONS = (".py", ".cu", ".cuh", ".cpp")
#: The substring the server refuses anywhere in the file, compared in lower case.
FORBIDDEN = "stream"
#: Directive keys the server knows (``gpus`` is the same as ``gpu``).
DIRECTIVES = ("leaderboard", "gpu", "gpus")
#: Top-level import names of the official image's packages: torch, triton, nvidia-cutlass-dsl (``cutlass``),
#: cuda-python (``cuda``), numpy.
IMAGE_PACKAGES = ("torch", "triton", "cutlass", "cuda", "numpy")


@dataclass(frozen=True)
class Finding:
    """One reason the server (or the board) would refuse or fail a file: ``rule`` names the rule (size, encoding,
    extension, directive, stream, import, syntax, gpu, kernelguard), ``line`` is 1-based or None for the whole
    file."""

    rule: str
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message} [{self.rule}]"


def check_file(path: Path, shown: str | None = None) -> list[Finding]:
    """The findings of ``path`` (see the module docstring), named ``shown`` (default: the path as given). Raises
    OSError when the file cannot be read."""
    return check_bytes(Path(path).read_bytes(), shown or str(path), Path(path).name)


def check_bytes(data: bytes, shown: str, file_name: str) -> list[Finding]:
    """The findings of a file's content ``data``; ``file_name`` is the name it would be submitted under (its
    ending decides the language) and ``shown`` how findings name it."""
    found: list[Finding] = []

    def add(rule: str, line: int | None, message: str) -> None:
        found.append(Finding(rule, shown, line, message))

    if not file_name.endswith(EXTENSIONS):
        add("extension", None, f"the server takes only {', '.join(EXTENSIONS)} files, got {file_name!r}")
    if not data:
        add("size", None, "the file is empty; the server refuses an empty submission")
    elif len(data) > MAX_BYTES:
        add("size", None, f"{len(data):,} bytes; the server takes at most {MAX_BYTES:,}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        add("encoding", data[:exc.start].count(b"\n") + 1, f"not UTF-8 (byte {data[exc.start]:#04x} at offset "
                                                            f"{exc.start}); the server takes UTF-8 only")
        return found
    lines = text.splitlines()
    cpp = file_name.endswith(EXTENSIONS[1:])
    _directives(lines, cpp, add)
    for number, line in enumerate(lines, 1):
        count = line.lower().count(FORBIDDEN)
        if count:
            add("stream", number, f"contains {FORBIDDEN!r} ({count}x, any case counts, comments and strings too; the "
                                  f"server refuses the file): {line.strip()[:100]}")
    if file_name.endswith(".py"):
        tree = _imports(text, add)
        if tree is not None:
            _entry(tree, add)
    return found


def _entry(tree: ast.Module, add) -> None:
    """The runner calls ``custom_kernel(data)`` from the module: a file that binds no such name at its top level
    (a def, an assignment or an import) fails every case there."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == ENTRY_NAME:
            return
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == ENTRY_NAME for t in targets):
                return
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name) == ENTRY_NAME for a in node.names):
            return
    add("entry", None, f"defines no {ENTRY_NAME}(data) at the top level: the runner calls it for every case")


def _directives(lines: list[str], cpp: bool, add) -> None:
    """The server's reading of ``#!POPCORN`` / ``//!POPCORN`` lines, then this board's expectations of them."""
    seen: dict[str, tuple[int, list[str]]] = {}
    block_end = None
    if lines and lines[0].startswith("\ufeff"):
        add("directive", 1, "the file starts with a byte-order mark: the server then reads no directive at all")
    for number, line in enumerate(lines, 1):
        if block_end is None and not (line.startswith("//") or line.startswith("#")):
            block_end = number
        args = line.split()
        if not args or args[0] not in ("#!POPCORN", "//!POPCORN"):
            continue
        if block_end is not None:
            add("directive", number, f"{args[0]} after the leading comment block (line {block_end} ends it): the "
                                     f"server ignores it")
            continue
        if cpp and args[0] == "#!POPCORN":
            add("directive", number, "a C++ file takes //!POPCORN (a #! line does not compile)")
        if len(args) < 2:
            add("directive", number, f"{args[0]} without a key: the server refuses it")
            continue
        key = args[1].lower()
        key = "gpus" if key == "gpu" else key
        if key not in ("leaderboard", "gpus"):
            add("directive", number, f"unknown directive {args[1]!r} (known: {', '.join(DIRECTIVES)}); the server "
                                     f"refuses it")
        elif len(args) < 3:
            add("directive", number, f"{args[0]} {args[1]} without a value: the server refuses it")
        elif key in seen:
            add("directive", number, f"{key} given again (first on line {seen[key][0]}): the server refuses it")
        else:
            seen[key] = (number, args[2:])
    if "leaderboard" not in seen:
        add("directive", None, f"no '#!POPCORN leaderboard <problem>' in the leading comment block (problems: "
                               f"{', '.join(plugs.names())})")
    elif seen["leaderboard"][1][0] not in plugs.names():
        number, values = seen["leaderboard"]
        add("directive", number, f"leaderboard {values[0]!r}: the boards fp4bench knows are "
                                 f"{', '.join(plugs.names())}")
    gpus = ", ".join(board.BOARD_GPUS)  # every NVFP4 board ran on B200
    named = seen.get("leaderboard", (0, [""]))[1][0]
    which = named if named in plugs.names() else board.LEADERBOARD
    if "gpus" not in seen:
        add("directive", None, f"no '#!POPCORN gpu' in the leading comment block (the board runs {gpus})")
    else:
        number, values = seen["gpus"]
        if len(values) > 1:
            add("directive", number, f"gpu names {len(values)} GPUs ({' '.join(values)}): a submission runs on one")
        elif values[0] not in board.BOARD_GPUS:
            add("directive", number, f"gpu {values[0]!r}: the {which} board runs {gpus}")
    _requirement(lines, add, which)


def _requirement(lines: list[str], add, which: str) -> None:
    """A ``#!FP4BENCH requires`` header in the leading block that none of the GPUs of board ``which`` meets."""
    for number, line in enumerate(lines, 1):
        if not line.startswith("#"):
            return
        args = line.split(maxsplit=2)
        if len(args) < 3 or args[:2] != ["#!FP4BENCH", "requires"]:
            continue
        try:
            need = parse_requirement(args[2])
        except RegistryError as exc:
            add("gpu", number, str(exc))
            return
        reasons = [need.unmet_reason(DeviceFacts(True, board.GPU_NAMES[name], *cc))
                   for name, cc in board.BOARD_GPUS.items()]
        if all(reasons):
            add("gpu", number, f"built for another GPU: {reasons[0]}; the {which} board runs only "
                               f"{', '.join(board.BOARD_GPUS)}, so it would fail there")
        return


def _imports(text: str, add) -> ast.Module | None:
    """Imports the official runner's folder and image cannot satisfy, and Python it cannot parse; the parsed
    module (None when it does not parse)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        add("syntax", exc.lineno, f"not valid Python: {exc.msg}")
        return None
    allowed = set(board.RUNNER_MODULES) | set(IMAGE_PACKAGES) | set(sys.stdlib_module_names) | {"__future__"}
    where = (f"the runner's {', '.join(m + '.py' for m in board.RUNNER_MODULES)}, the official image's packages "
             f"({', '.join(IMAGE_PACKAGES)}) or the standard library")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            add("import", node.lineno, "a relative import: the runner's submission.py is not in a package")
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in allowed:
                add("import", node.lineno, f"imports {name!r}, which the official runner lacks: a submission may "
                                           f"import only {where}")
            elif top == "task" and name != "task":
                add("import", node.lineno, f"imports {name!r}: the runner's task is a module (task.py), not the "
                                           f"package fp4bench's task is (fp4bench export inlines task.formats)")
            elif name == "task" and isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name not in board.TASK_NAMES:
                        add("import", node.lineno, f"from task import {alias.name}: the runner's task.py defines "
                                                   f"only {', '.join(board.TASK_NAMES)}")
    return tree
