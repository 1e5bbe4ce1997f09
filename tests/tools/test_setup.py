"""Setting up and starting on a machine without a GPU: the installer's choice of torch build, commands that start
without importing torch, the GPU-test skip text, and what the usage page promises."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from tests.conftest import GPU_SKIP_REASON, ROOT

from harness.parent.hostinfo import nvidia_gpu_present
from harness.results.record import CaseResult, Environment, RunRecord, Status, SubmissionInfo
from harness.results.stats import summarize
from harness.results.store import ResultStore
from problems.nvfp4_group_gemm.spec import K_MULTIPLE, MN_MULTIPLE, load_shapes

sys.path.insert(0, str(ROOT / "tools"))
import install_torch  # noqa: E402


# --- the installer's torch step (tools/install_torch.py, called by the Makefile) ---------------------------
def test_torch_comes_from_the_cpu_index_only_on_linux_without_a_gpu_or_a_pin():
    assert install_torch.choose({}, "linux", gpu=False) is None
    assert install_torch.choose({}, "linux", gpu=True) == (
        "NVIDIA GPU found: torch (CUDA build) comes from the default index with the project")
    assert install_torch.choose({"PIP_CONSTRAINT": "/ci/c.txt"}, "linux", gpu=False) == (
        "torch pinned by PIP_CONSTRAINT (/ci/c.txt): installed with the project")  # CI stays offline
    assert install_torch.choose({}, "darwin", gpu=False) == (
        "no CPU-only index needed on darwin: the default index's torch is a CPU build")


def test_the_range_is_pyprojects():
    requirement = install_torch.torch_requirement()
    assert requirement.startswith("torch") and f'"{requirement}"' in (ROOT / "pyproject.toml").read_text()


def test_cpu_index_is_tried_fast_then_the_default_index():
    said, ran = [], []

    def pip(code):
        return lambda cmd: ran.append(cmd) or SimpleNamespace(returncode=code)

    requirement = install_torch.torch_requirement()
    assert install_torch.install({}, "linux", gpu=False, run=pip(0), python="py", say=said.append) is True
    assert ran == [["py", "-m", "pip", "install", "--quiet", "--timeout", "10", "--retries", "0", "--index-url",
                    "https://download.pytorch.org/whl/cpu", requirement]]
    assert said == [f"no NVIDIA GPU: installing {requirement} (CPU build) from https://download.pytorch.org/whl/cpu"]
    said.clear()
    assert install_torch.install({}, "linux", gpu=False, run=pip(1), python="py", say=said.append) is False
    assert said[1] == ("https://download.pytorch.org/whl/cpu could not be reached (or has no wheel for this "
                       "Python): torch comes from the default index with the project")
    ran.clear()
    assert install_torch.install({}, "linux", gpu=True, run=pip(0), say=said.append) is False and ran == []


def test_the_build_installed_is_reported():
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU"
    assert install_torch.report() == f"torch {torch.__version__}: {build} build"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_installs_torch_before_the_project_and_says_which(tmp_path):
    steps = subprocess.run(["make", "-n", "-B", "install", f"VENV={tmp_path / 'v'}"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    py = f"{tmp_path / 'v'}/bin/python"
    assert steps.index(f"{py} tools/install_torch.py") < steps.index(f'{py} -m pip install --quiet -e ".[dev]"') \
        < steps.index(f"{py} tools/install_torch.py --report")


# --- commands that do not need torch do not import it ----------------------------------------------------
_PROBE = """
import sys
from harness.cli.commands import main
try:
    main({args!r}, standalone_mode=False)
except SystemExit:
    pass
print({module!r} in sys.modules)
"""


def _imports_torch(*args: str, module: str = "torch") -> bool:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(args=list(args), module=module)], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()[-1] == "True"


def test_help_reports_and_list_start_without_torch(tmp_path):
    db = tmp_path / "r.sqlite"
    smoke = load_shapes("smoke")
    cases = tuple(CaseResult(c, Status.PASS, "", (1000.0, 1010.0, 990.0), summarize([1000.0, 1010.0, 990.0]), 46)
                  for c in smoke.cases)
    env = Environment("CPU (x86_64)", "none", "none", "2.13.0", "-", "-", "3.11", "box", "cpu-monotonic")
    with ResultStore(db) as store:
        store.save(RunRecord("r1", "2026-11-30T10:00:00+00:00", "leaderboard", "official", "smoke", None,
                             SubmissionInfo("alpha", "a.py", "ab" * 32), env, cases, True, "", 1000.0, smoke.id))
    assert not _imports_torch("--help")
    assert not _imports_torch("run", "--help")
    assert not _imports_torch("leaderboard", "--db", str(db), "--shapes", "smoke")
    assert not _imports_torch("history", "alpha", "--db", str(db))
    assert not _imports_torch("report", "--db", str(db), "--format", "md")
    assert _imports_torch("list") == nvidia_gpu_present()  # on a GPU machine list asks torch what it can run


def test_dask_is_imported_only_for_a_pool_run():
    assert not _imports_torch("run", "--help", module="distributed")
    assert not _imports_torch("run", "--submission", "torch_reference", "--no-store", "--shapes",
                              "m: [64]; n: [128]; k: [128]; g: 1; seed: 1", module="distributed")


def test_commands_that_measure_still_import_it():
    assert _imports_torch("run", "--submission", "torch_reference", "--no-store", "--shapes",
                          "m: [64]; n: [128]; k: [128]; g: 1; seed: 1")



def test_a_missing_dependency_is_named_in_one_line():
    """``python -m harness`` without a dependency installed (msgspec here, hidden from the import system): one
    line naming it and how to install it, exit status 1, no traceback."""
    code = ("import runpy, sys; sys.modules['msgspec'] = None; sys.argv = ['harness', 'run', '--help']; "
            "runpy.run_module('harness', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("fp4bench: the Python package 'msgspec' is missing; install the project (pip "
                                   "install -e .) or that package (pip install msgspec; pyproject.toml lists every "
                                   "dependency)")


# --- what a user reads --------------------------------------------------------------------------------------
def test_gpu_tests_say_only_what_they_need():
    if torch.cuda.is_available():
        pytest.skip("GPU tests run here; nothing is skipped")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          "tests/trust/test_gpu.py"], cwd=ROOT, capture_output=True, text=True).stdout
    assert GPU_SKIP_REASON == "needs a CUDA GPU (sm_90)"
    reasons = re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", out, re.M)
    assert reasons and set(reasons) == {GPU_SKIP_REASON}, out


def test_usage_page_gives_the_shape_rules_and_the_cpu_recipe():
    usage = " ".join((ROOT / "docs" / "usage.md").read_text().split())
    assert f"M and N multiples of {MN_MULTIPLE}" in usage and f"K a multiple of {K_MULTIPLE}" in usage
    assert "K above 529,920" in usage
    recipe = next(line for line in (ROOT / "docs" / "usage.md").read_text().splitlines() if "--index-url" in line)
    assert f"--index-url {install_torch.CPU_INDEX}" in recipe and 'pip install -e ".[dev]"' in recipe


def test_install_torch_runs_before_the_projects_dependencies_are_installed():
    """make runs tools/install_torch.py in a fresh venv that holds only pip: nothing it imports may need a
    dependency (a top-level `import yaml` in problems/ broke `make` on a fresh machine, 2026-12-04). The
    interpreter here refuses every third-party import the project declares."""
    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in {'yaml', 'torch', 'click', 'rich', 'msgspec', 'numpy', 'scipy',\n"
               "                                  'jinja2', 'distributed', 'dask', 'cutlass', 'triton'}:\n"
               "            raise ImportError('not installed yet: ' + name)\n"
               "sys.meta_path.insert(0, Block())\n"
               f"sys.argv = ['install_torch.py', '--help']\n"
               f"sys.path.insert(0, {str(ROOT / 'tools')!r})\n"
               "import runpy\n"
               f"runpy.run_path({str(ROOT / 'tools' / 'install_torch.py')!r}, run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-I", "-c", blocker], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: install_torch.py" in proc.stdout
