"""harness.worker.task_alias: ``task`` is the run's problem package for a submission, its submodules the same
objects as under their own names, and another problem's alias replaces the first."""
from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

from harness import ROOT
from harness.problem import CaseError
from harness.worker import task_alias


@pytest.fixture(autouse=True)
def _restore():
    """Leave ``task`` as it was: other tests' variants import it."""
    saved = {k: v for k, v in sys.modules.items() if k == "task" or k.startswith("task.")}
    package, finder_on = task_alias._finder.package, task_alias._finder in sys.meta_path
    yield
    for k in [k for k in sys.modules if k == "task" or k.startswith("task.")]:
        del sys.modules[k]
    sys.modules.update(saved)
    task_alias._finder.package = package
    if not finder_on and task_alias._finder in sys.meta_path:
        sys.meta_path.remove(task_alias._finder)


def test_task_is_the_group_gemm_package_and_its_submodules_are_shared():
    import problems.nvfp4_group_gemm as group
    import problems.nvfp4_group_gemm.formats as formats

    assert task_alias.alias_task("nvfp4_group_gemm") is group
    task = importlib.import_module("task")
    from task import input_t  # noqa: PLC0415
    from task.formats import SF_VEC  # noqa: PLC0415

    assert task is group and input_t is group.input_t and SF_VEC == 16
    assert sys.modules["task.formats"] is formats and importlib.import_module("task.formats") is formats


def test_a_second_problem_replaces_the_first():
    import problems.nvfp4_gemm as gemm

    task_alias.alias_task("nvfp4_group_gemm")
    importlib.import_module("task.formats")
    task_alias.alias_task("nvfp4_gemm")
    assert importlib.import_module("task") is gemm and "task.formats" not in sys.modules
    assert importlib.import_module("task.inputs") is importlib.import_module("problems.nvfp4_gemm.inputs")
    missing = r"^No module named 'task\.formats' \(task is problems\.nvfp4_gemm\)$"
    with pytest.raises(ModuleNotFoundError, match=missing):
        importlib.import_module("task.formats")


def test_an_unknown_problem_is_refused():
    with pytest.raises(CaseError, match=r"^unknown problem 'nvfp4_x': expected one of nvfp4_dual_gemm, nvfp4_gemm"):
        task_alias.alias_task("nvfp4_x")


def test_a_submission_file_sees_its_problems_types_and_nothing_is_loaded_twice():
    """In a fresh interpreter, as the worker does: alias, then import a file that says ``from task import ...``
    and ``import task.formats``; the package's submodule is loaded once (one module object, one file read)."""
    code = textwrap.dedent("""
        import sys, pathlib, tempfile, importlib.util
        from harness.worker.task_alias import alias_task
        alias_task("nvfp4_group_gemm")
        folder = pathlib.Path(tempfile.mkdtemp())
        (folder / "submission.py").write_text(
            "from task import input_t, output_t\\nimport task.formats as f\\nfrom task.spec import Case\\n")
        spec = importlib.util.spec_from_file_location("submission", folder / "submission.py")
        sub = importlib.util.module_from_spec(spec); spec.loader.exec_module(sub)
        import problems.nvfp4_group_gemm.formats as real, problems.nvfp4_group_gemm.spec as spec_mod
        loaded = [m for m in sys.modules.values() if getattr(m, "__file__", "") == real.__file__]
        print(sub.f is real, sub.Case is spec_mod.Case, len(set(map(id, loaded))))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["True", "True", "1"], out.stderr
