"""Data flows one way through the tree (harness/__init__.py): task <- boundary <- worker | parent -> results <- report
<- cli. Each rule is checked over every import statement (function-level ones too) by reading the source, and
the checker itself is tested on a planted violation so a rule cannot pass by matching nothing."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The leaves both sides share. ``harness`` itself is one (it holds ROOT) but only by exact name: it is no prefix.
BOUNDARY = ("harness", "harness.protocol", "harness.channel", "harness.buffers", "harness.confine",
            "harness.plan", "harness.hardware", "harness.problem", "harness.shapes")
#: Machine facts, the problem contract and shape-text parsing: leaves a problem (and task) may read too.
FACTS = ("harness.hardware", "harness.problem", "harness.shapes")

#: (layer prefix, the prefixes it may import from harness/task/submissions). A module matches its longest prefix.
RULES: dict[str, tuple[str, ...]] = {
    "task": ("task",) + FACTS,
    "harness.hardware": (),
    "harness.plan": (),
    "harness.problem": (),
    "harness.shapes": ("harness.problem",),
    "harness.protocol": ("task",) + BOUNDARY,
    "harness.channel": BOUNDARY,
    "harness.buffers": BOUNDARY,
    "harness.confine": BOUNDARY,
    "harness.worker": ("task", "harness.worker") + BOUNDARY,
    "harness.results": ("task", "harness.results") + BOUNDARY,
    "harness.parent": ("task", "harness.parent", "harness.results", "harness.worker") + BOUNDARY,
    "harness.report": ("task", "harness.report", "harness.results") + BOUNDARY,
    "harness.submit": ("harness.submit", "harness.parent") + BOUNDARY,
    "harness.cli": ("task", "harness.cli", "harness.parent", "harness.results", "harness.report", "harness.worker",
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
    for path in sorted(list((root / "task").rglob("*.py")) + list((root / "harness").rglob("*.py"))):
        name = module_name(path, root)
        layer = max((p for p in RULES if _within(name, p)), key=len, default=None)
        if layer is None:
            continue
        for line, target in imports_of(path, name):
            if target.startswith("submissions") and layer != "harness.worker":
                out.append(f"{name}:{line} imports a submission ({target})")
            if not target.split(".")[0] in ("task", "harness"):
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
    ("task/extra.py", "import harness.results.store\n", "task.extra:1 imports harness.results.store"),
    ("harness/worker/extra.py", "from harness.results import record\n",
     "harness.worker.extra:1 imports harness.results.record"),
    ("harness/parent/extra.py", "def f():\n    from submissions.wgmma_sm90 import submission\n",
     "harness.parent.extra:2 imports a submission (submissions.wgmma_sm90.submission)"),
    ("harness/report/extra.py", "from ..parent import runner\n", "harness.report.extra:1 imports harness.parent.runner"),
])
def test_a_planted_violation_is_reported(tmp_path, where, line, expected):
    for part in ("task", "harness/results", "harness/worker", "harness/parent", "harness/report"):
        (tmp_path / part).mkdir(parents=True, exist_ok=True)
        (tmp_path / part / "__init__.py").write_text("")
    (tmp_path / where).write_text(line)
    found = violations(tmp_path)
    assert len(found) == 1 and found[0].startswith(expected), found


#: Where the harness may still import ``task`` (nvfp4_group_gemm's own code): the parent's side of its arena
#: (harness/parent/samples.py, through which the judge and the runner reach its checks and compiles) and the
#: worker's (which rebuilds its arena views). Every other problem goes through its plug.
TASK_SEAMS = ("harness.parent.samples", "harness.worker.__main__")


def problem_imports(root: Path) -> list[str]:
    """One line per import in harness/ of ``task`` outside TASK_SEAMS, or of a problem's own module
    (``problems.<name>``; the registry ``problems`` and ``harness.problem`` are the only ways in)."""
    out = []
    for path in sorted((root / "harness").rglob("*.py")):
        name = module_name(path, root)
        for line, target in imports_of(path, name):
            head = target.split(".")[0]
            if head == "task" and name not in TASK_SEAMS:
                out.append(f"{name}:{line} imports {target}")
            if head == "problems" and target.count(".") and target.split(".")[1] in _problem_names(root):
                out.append(f"{name}:{line} imports {target} (a problem's own module)")
    return out


def _problem_names(root: Path) -> set[str]:
    return {p.name for p in (root / "problems").iterdir() if p.is_dir()} if (root / "problems").is_dir() else set()


def test_the_harness_knows_no_problem_but_through_the_registry():
    assert problem_imports(ROOT) == []


@pytest.mark.parametrize("line,expected", [
    ("from task.spec import Case\n", "harness.parent.extra:3 imports task.spec.Case"),
    ("import problems.nvfp4_gemm.plug\n", "harness.parent.extra:3 imports problems.nvfp4_gemm.plug (a problem's"),
])
def test_a_planted_problem_import_is_reported(tmp_path, line, expected):
    (tmp_path / "harness" / "parent").mkdir(parents=True)
    (tmp_path / "problems" / "nvfp4_gemm").mkdir(parents=True)
    (tmp_path / "harness" / "parent" / "extra.py").write_text("import problems\nfrom harness import problem\n" + line)
    found = problem_imports(tmp_path)
    assert len(found) == 1 and found[0].startswith(expected), found
