"""Every plug in problems/ satisfies harness/problem.py's contract, and the layers hold: harness/problem.py imports
neither task nor problems nor torch; problems import from harness only its facts (harness.problem,
harness.hardware, harness.shapes); plugs load without torch."""
from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from harness import plugs
from harness import problem as contract
from harness.problem import CaseError, OutputSpec, TensorSpec, TimingLoop, validate_outputs

ROOT = Path(__file__).resolve().parents[2]
METHODS = [n for n, v in vars(contract.Problem).items() if callable(v) and not n.startswith("_")]


def test_the_four_problems_are_found():
    assert plugs.names() == ("nvfp4_dual_gemm", "nvfp4_gemm", "nvfp4_gemv", "nvfp4_group_gemm")
    with pytest.raises(CaseError, match="unknown problem 'nvfp4_x': expected one of nvfp4_dual_gemm, nvfp4_gemm"):
        plugs.get("nvfp4_x")


@pytest.mark.parametrize("name", plugs.names())
def test_plug_satisfies_the_contract(name):
    plug = plugs.get(name)
    assert isinstance(plug, contract.Problem) and plug.name == name
    for method in METHODS:  # same parameter names as the contract
        want = list(inspect.signature(getattr(contract.Problem, method)).parameters)[1:]
        assert list(inspect.signature(getattr(plug, method)).parameters) == want, method
    assert isinstance(plug.timing, TimingLoop) and plug.data_modes[0] == "official"
    for shape_set in ("tests", "benchmarks"):
        cases = plugs.load_cases(name, shape_set)
        for case in cases:
            assert isinstance(case, contract.Case) and case.seed == 1111
            again = plug.parse_case(dict(zip(plug.case_fields, (getattr(case, f) for f in plug.case_fields))))
            assert again == case and plug.case_id(again) == plug.case_id(case)
            assert len(plug.case_id(case)) == 12 and plug.label(case)
            spec = plug.output_spec(case)
            assert isinstance(spec, OutputSpec) and all(t.dtype == "torch.float16" for t in spec.tensors)
            assert plug.flops(case) > 0 and plug.input_bytes(case) > plug.bytes_moved(case) / 2
            assert plug.reference_bytes(case) > 0
            plug.check_drawable(case, "official")


def test_official_timing_loops():
    loops = {n: plugs.get(n).timing for n in plugs.names()}
    assert {n: (t.calls_per_sample, t.fresh_inputs_each_sample, t.seed_step) for n, t in loops.items()} == {
        "nvfp4_gemv": (1, True, 13), "nvfp4_gemm": (50, False, 42), "nvfp4_dual_gemm": (50, False, 42),
        "nvfp4_group_gemm": (15, False, 42)}


def test_case_ids_and_texts_are_stable():
    gemm = plugs.get("nvfp4_gemm")
    case = gemm.parse_case({"m": 128, "n": 256, "k": 256, "l": 1, "seed": 1111})
    assert gemm.case_text(case) == "m: 128; n: 256; k: 256; l: 1; seed: 1111"
    assert gemm.case_id(case) == "fbf81e18287a" and gemm.label(case) == "M=128 N=256 K=256 L=1"


class Meta:
    def __init__(self, dtype="torch.float16", shape=(4, 2, 1), device="cuda:0", plain=True):
        self.type_name, self.plain_tensor = "torch.Tensor", plain
        self.dtype, self.shape, self.device = dtype, shape, device


def test_validate_outputs_says_what_is_wrong():
    one = OutputSpec("tensor", (TensorSpec((4, 2, 1), "torch.float16"),))
    assert validate_outputs(one, "torch.Tensor", [Meta()], "cuda:0") is None
    assert validate_outputs(one, "builtins.list", [Meta()], "cuda:0") == \
        "expected a torch.Tensor (output_t), got builtins.list"
    assert validate_outputs(one, "torch.Tensor", [Meta("torch.float32", (4, 2))], "cuda") == \
        "dtype torch.float32 (expected torch.float16), shape [4, 2] (expected [4, 2, 1])"
    two = OutputSpec("list", (TensorSpec((4, 2, 1), "torch.float16"),) * 2)
    assert validate_outputs(two, "builtins.list", [Meta(), Meta(device="cpu")], "cuda:0") == \
        "output 1: device cpu (expected cuda:0)"
    assert two.nbytes == 32
    assert validate_outputs(two, "builtins.list", [Meta()], "cuda:0") == "expected 2 outputs, got 1"


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
    return found


def test_layers():
    banned = ("task", "problems", "torch")
    assert not [m for m in _imports(ROOT / "harness" / "problem.py") if m.split(".")[0] in banned]
    facts = ("harness.problem", "harness.hardware", "harness.shapes")
    for path in (ROOT / "problems").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith("harness") and m not in facts]
        assert not bad, f"{path}: {bad}"


def test_plugs_load_without_torch():
    code = ("import sys\nfrom harness import plugs\n"
            "for n in plugs.names():\n"
            "    p = plugs.get(n); p.label(plugs.load_cases(n, 'tests')[0])\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "False", out.stderr
