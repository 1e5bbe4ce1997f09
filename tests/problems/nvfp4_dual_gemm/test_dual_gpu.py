"""nvfp4_dual_gemm on the GPU: the draw bit-identical to the official generator's code path (official_dual.py, a
faithful copy; the blocked copies' padding aside), and the Triton variant equal to the exact reference on every
official tests shape, both data modes."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from official_dual import generate_input as official_generate

from harness import plugs
from harness.worker.task_alias import alias_task
from problems._nvfp4.formats import unblock

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[3]
P = plugs.get("nvfp4_dual_gemm")
TESTS = plugs.load_cases("nvfp4_dual_gemm", "tests")


def load(variant: str):
    path = ROOT / "submissions" / "nvfp4_dual_gemm" / variant / "submission.py"
    alias_task("nvfp4_dual_gemm")  # its ``from task import``, as the worker resolves it
    spec = importlib.util.spec_from_file_location(f"fp4bench_nvfp4_dual_gemm_{variant}_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same(x: torch.Tensor, y: torch.Tensor) -> bool:
    u = (lambda t: t.view(torch.uint8)) if x.element_size() == 1 else (lambda t: t.view(torch.int16))
    return x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride() and x.device == y.device \
        and torch.equal(u(x), u(y))


@pytest.mark.parametrize("sizes", [(136, 72, 192, 2, 7), (256, 512, 256, 1, 1111), (512, 768, 7168, 1, 1153)])
def test_draw_is_bit_identical_to_the_official_generator(sizes):
    ours = P.generate(P.parse_case(dict(zip(P.case_fields, sizes))), sizes[-1])
    theirs = official_generate(*sizes)
    assert all(same(x, y) for x, y in zip(ours[:6] + ours[9:], theirs[:6] + theirs[9:]))
    sizes_of = (sizes[0], sizes[1], sizes[1])
    for ours_p, theirs_p, rows in zip(ours[6:9], theirs[6:9], sizes_of):  # padding is torch.empty's there
        assert ours_p.shape == theirs_p.shape and ours_p.stride() == theirs_p.stride()
        for i in range(sizes[3]):
            assert torch.equal(unblock(ours_p[..., i:i + 1], rows, sizes[2] // 16).view(torch.uint8),
                               unblock(theirs_p[..., i:i + 1], rows, sizes[2] // 16).view(torch.uint8))


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
