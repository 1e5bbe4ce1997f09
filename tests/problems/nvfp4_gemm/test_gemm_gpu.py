"""nvfp4_gemm on the GPU: the draw bit-identical to the official generator's code path (official_gemm.py, a
faithful copy), and the Triton variant equal to the exact reference on every official tests shape, both data
modes."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from official_gemm import generate_input as official_generate

from harness import plugs
from harness.worker.task_alias import alias_task

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[3]
P = plugs.get("nvfp4_gemm")
TESTS = plugs.load_cases("nvfp4_gemm", "tests")


def load(variant: str):
    path = ROOT / "submissions" / "nvfp4_gemm" / variant / "submission.py"
    alias_task("nvfp4_gemm")  # its ``from task import``, as the worker resolves it
    spec = importlib.util.spec_from_file_location(f"fp4bench_nvfp4_gemm_{variant}_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Equal bits, shape, strides and device."""
    u = (lambda t: t.view(torch.uint8)) if x.element_size() == 1 else (lambda t: t.view(torch.int16))
    return x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride() and x.device == y.device \
        and torch.equal(u(x), u(y))


@pytest.mark.parametrize("sizes", [(136, 72, 192, 2, 7), (128, 256, 256, 1, 1111), (256, 7168, 2048, 1, 1153)])
def test_draw_is_bit_identical_to_the_official_generator(sizes):
    ours = P.generate(P.parse_case(dict(zip(P.case_fields, sizes))), sizes[-1])
    theirs = official_generate(*sizes)
    assert all(same(x, y) for x, y in zip(ours, theirs))


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("index", range(len(TESTS)))
def test_triton_matches_the_reference_on_every_official_test(index, data):
    case = TESTS[index]
    x = P.generate(case, case.seed, data)
    expected = P.reference(x)
    out = load("triton").custom_kernel(tuple(t.clone() for t in x))
    torch.cuda.synchronize()
    evidence = P.check(out, expected)
    assert evidence.ok, evidence.describe(f"{P.label(case)} {data}: ")


def test_reference_same_on_gpu_and_cpu():
    x = P.generate(TESTS[0], 3, "full-range")
    on_gpu = P.reference(x)
    on_cpu = P.reference(tuple(t.cpu() for t in x))
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu().view(torch.int16), on_cpu.view(torch.int16))
