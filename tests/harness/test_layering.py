"""Data flows one way through the tree (harness/__init__.py): problems -> facts; boundary <- worker | parent ->
results <- report <- cli; and the harness imports no problem: harness.plugs finds a plug by name through importlib,
the only way in. Each rule is checked over every import statement (function-level ones too) by reading the
source, and the checker itself is tested on a planted violation so a rule cannot pass by matching nothing."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The leaves both sides share. ``harness`` itself is one (it holds ROOT) but only by exact name: it is no prefix.
BOUNDARY = ("harness", "harness.protocol", "harness.channel", "harness.buffers", "harness.confine",
            "harness.plan", "harness.hardware", "harness.problem", "harness.shapes", "harness.plugs")
#: Machine facts, the problem contract and shape-text parsing: leaves a problem may read too.
FACTS = ("harness.hardware", "harness.problem", "harness.shapes")
#: The packages the harness must not import by a statement: the problems, and ``task``, which is a problem's
#: package under a submission's name (harness.worker.task_alias).
PROBLEM_PACKAGES = ("problems", "task")
#: Where the harness calls importlib to reach a problem by name: the registry, and the worker's ``task`` alias.
IMPORTERS = ("harness.plugs", "harness.worker.task_alias")

#: (layer prefix, the prefixes it may import from harness/problems/task/submissions). A module matches its longest
#: prefix.
RULES: dict[str, tuple[str, ...]] = {
    "problems": ("problems",) + FACTS,
    "harness.hardware": (),
    "harness.plan": (),
    "harness.problem": (),
    "harness.shapes": ("harness.problem", "harness.plugs"),
    "harness.plugs": ("harness", "harness.problem"),
    "harness.protocol": BOUNDARY,
    "harness.channel": BOUNDARY,
    "harness.buffers": BOUNDARY,
    "harness.confine": BOUNDARY,
    "harness.worker": ("harness.worker",) + BOUNDARY,
    "harness.results": ("harness.results",) + BOUNDARY,
    "harness.parent": ("harness.parent", "harness.results", "harness.worker") + BOUNDARY,
    "harness.report": ("harness.report", "harness.results") + BOUNDARY,
    "harness.submit": ("harness.submit", "harness.parent") + BOUNDARY,
    "harness.cli": ("harness.cli", "harness.parent", "harness.results", "harness.report", "harness.worker",
                    "harness.submit") + BOUNDARY,
    "harness.__main__": ("harness.cli",),
}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str) -> list[tuple[int, str]]:
    """Every module ``path`` imports by name (``from x import y`` gives ``x.y`` where y may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return found


def _within(module: str, prefix: str) -> bool:
    if prefix == "harness":
        return module in ("harness", "harness.ROOT")
    return module == prefix or module.startswith(prefix + ".")


def violations(root: Path) -> list[str]:
    """One line per import that breaks RULES, or that brings a submission into code outside harness.worker."""
    out = []
    for path in sorted(list((root / "problems").rglob("*.py")) + list((root / "harness").rglob("*.py"))):
        name = module_name(path, root)
        layer = max((p for p in RULES if _within(name, p)), key=len, default=None)
        if layer is None:
            continue
        for line, target in imports_of(path, name):
            if target.startswith("submissions") and layer != "harness.worker":
                out.append(f"{name}:{line} imports a submission ({target})")
            if not target.split(".")[0] in ("harness",) + PROBLEM_PACKAGES:
                continue
            allowed = RULES[layer]
            if not any(_within(target, a) for a in allowed):
                out.append(f"{name}:{line} imports {target} ({layer} may import {', '.join(allowed)})")
    return out


def test_the_tree_keeps_its_layers():
    assert violations(ROOT) == []


@pytest.mark.parametrize("where,line,expected", [
    ("harness/results/extra.py", "from harness.parent.runner import run_case\n",
     "harness.results.extra:1 imports harness.parent.runner.run_case"),
    ("problems/extra.py", "import harness.results.store\n", "problems.extra:1 imports harness.results.store"),
    ("harness/worker/extra.py", "import task\n", "harness.worker.extra:1 imports task"),
    ("harness/worker/extra.py", "from harness.results import record\n",
     "harness.worker.extra:1 imports harness.results.record"),
    ("harness/parent/extra.py", "def f():\n    from submissions.wgmma_sm90 import submission\n",
     "harness.parent.extra:2 imports a submission (submissions.wgmma_sm90.submission)"),
    ("harness/report/extra.py", "from ..parent import runner\n", "harness.report.extra:1 imports harness.parent.runner"),
])
def test_a_planted_violation_is_reported(tmp_path, where, line, expected):
    for part in ("problems", "harness/results", "harness/worker", "harness/parent", "harness/report"):
        (tmp_path / part).mkdir(parents=True, exist_ok=True)
        (tmp_path / part / "__init__.py").write_text("")
    (tmp_path / where).write_text(line)
    found = violations(tmp_path)
    assert len(found) == 1 and found[0].startswith(expected), found


def problem_imports(root: Path) -> list[str]:
    """One line per way a module under harness/ (the worker included) reaches a problem other than through
    harness.plugs: an import statement of ``problems`` or ``task`` (or a submodule), or, outside IMPORTERS, an
    importlib call naming one in its text."""
    out = []
    for path in sorted((root / "harness").rglob("*.py")):
        name = module_name(path, root)
        for line, target in imports_of(path, name):
            if target.split(".")[0] in PROBLEM_PACKAGES:
                out.append(f"{name}:{line} imports {target}")
        if name not in IMPORTERS:
            out += [f"{name}:{line} calls {call}({text!r})" for line, call, text in _importlib_calls(path)]
    return out


def _importlib_calls(path: Path) -> list[tuple[int, str, str]]:
    """(line, function, the name's leading text) of every call of ``import_module`` or ``__import__`` in ``path``
    whose name starts with a problem package (a string or an f-string's leading text)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f, arg = node.func, node.args[0]
        called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if isinstance(arg, ast.JoinedStr) and arg.values:
            arg = arg.values[0]
        text = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else ""
        if called in ("import_module", "__import__") and text.split(".")[0] in PROBLEM_PACKAGES:
            found.append((node.lineno, called, text))
    return found


def test_the_harness_imports_no_problem():
    assert problem_imports(ROOT) == []


@pytest.mark.parametrize("where,line,expected", [
    ("harness/parent/extra.py", "from task.spec import Case\n", "harness.parent.extra:1 imports task.spec.Case"),
    ("harness/worker/extra.py", "import problems\n", "harness.worker.extra:1 imports problems"),
    ("harness/report/extra.py", "def f():\n    from problems.nvfp4_gemm import plug\n",
     "harness.report.extra:2 imports problems.nvfp4_gemm.plug"),
    ("harness/cli/extra.py", "import importlib\nP = importlib.import_module('problems.nvfp4_gemm.plug')\n",
     "harness.cli.extra:2 calls import_module('problems.nvfp4_gemm.plug')"),
    ("harness/cli/extra.py", "def f(n):\n    return __import__(f'task.{n}')\n",
     "harness.cli.extra:2 calls __import__('task.')"),
])
def test_a_planted_problem_import_is_reported(tmp_path, where, line, expected):
    (tmp_path / where).parent.mkdir(parents=True)
    (tmp_path / "harness" / "plugs.py").write_text("import importlib\nimportlib.import_module('problems.x.plug')\n")
    (tmp_path / where).write_text(line)
    found = problem_imports(tmp_path)
    assert found == [expected], found
