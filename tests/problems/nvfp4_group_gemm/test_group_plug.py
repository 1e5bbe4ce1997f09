"""The nvfp4_group_gemm plug puts its package's modules behind the contract: the same cases, inputs, reference,
memory and cost figures; its check sums the per-group evidence; its sample buffers are the package's own."""
from __future__ import annotations

import pytest
import torch

from harness import plugs
from harness.parent import memory
from harness.problem import CaseError
from problems.nvfp4_group_gemm import cost
from problems.nvfp4_group_gemm.inputs import generate_input
from problems.nvfp4_group_gemm.reference import ref_kernel
from problems.nvfp4_group_gemm.spec import load_shapes

P = plugs.get("nvfp4_group_gemm")
CASE = P.parse_case({"m": [72, 128], "n": [128, 256], "k": [256, 512], "g": 2, "seed": 1111})


def test_cases_match_task_spec():
    assert plugs.load_cases("nvfp4_group_gemm", "tests") == load_shapes("tests").cases
    assert P.case_text(CASE) == "m: [72, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111"
    assert P.label(CASE) == "G=2 M=[72,128] N=[128,256] K=[256,512]"
    with pytest.raises(CaseError, match="k must be a multiple of 64, got 100"):
        P.parse_case({"m": 64, "n": 64, "k": 100, "g": 1, "seed": 1})
    with pytest.raises(CaseError, match="full-range data cannot bound the fp16 output for K=530048"):
        P.check_drawable(P.parse_case({"m": 64, "n": 64, "k": 530048, "g": 1, "seed": 1}), "full-range")


@pytest.mark.parametrize("data", ["official", "full-range"])
def test_inputs_and_reference_are_tasks(data):
    ours, theirs = P.generate(CASE, 5, data), generate_input(CASE.m, CASE.n, CASE.k, CASE.g, 5, data)
    flat = lambda x: [t for part in x[:3] for pair in part for t in pair]  # noqa: E731
    assert all(torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a, b.view(torch.uint8)
                           if b.element_size() == 1 else b) for a, b in zip(flat(ours), flat(theirs)))
    assert all(torch.equal(a, b) for a, b in zip(P.reference(ours), ref_kernel(theirs)))


def test_check_sums_the_groups_evidence():
    expected = P.reference(P.generate(CASE, 5))
    got = [e.clone() for e in expected]
    got[1][3, 4, 0] += 100
    ev = P.check(got, expected)
    assert (ev.mismatches, ev.total) == (1, 72 * 128 + 128 * 256)
    assert ev.first == (((1, 3, 4, 0), float(got[1][3, 4, 0]), float(expected[1][3, 4, 0])),)
    assert P.check(expected, expected).ok


def test_memory_and_cost_are_the_harness_figures():
    for case in plugs.load_cases("nvfp4_group_gemm", "benchmarks"):
        assert P.input_bytes(case) == memory.input_bytes(case)
        assert P.reference_bytes(case) == memory.reference_bytes(case)
        assert (P.flops(case), P.bytes_moved(case)) == (cost.flops(case), cost.bytes_moved(case))
        spec = P.output_spec(case)
        assert spec.container == "list" and spec.nbytes == memory.output_bytes(case)


def test_its_sample_buffers_are_the_packages_own_and_the_dense_plugs_have_none():
    from problems.nvfp4_group_gemm import check, reference, sample_buffers as sb
    from problems.nvfp4_group_gemm.spec import Case

    kit = plugs.get("nvfp4_group_gemm").sample_buffers
    assert (kit.layout, kit.views, kit.draw_official, kit.write_input, kit.copy_plain, kit.reference_inputs) == (
        sb.Layout, sb.Views, sb.draw_official, sb.write_input, sb.copy_plain, sb.reference_inputs)
    assert (kit.reference_plan, kit.ref_kernel_many, kit.check) == (reference.ReferencePlan,
                                                                     reference.ref_kernel_many, check)
    case = Case((96, 128), (256, 128), (512, 256), 2, 1111)
    assert kit.sizes_of(case) == ((96, 256, 512), (128, 128, 256))
    layout = kit.layout_of_sizes(kit.sizes_of(case), 15)  # the worker's: sizes alone, seed 0
    assert layout == sb.Layout.of(Case((96, 128), (256, 128), (512, 256), 2, 0), 15)
    assert layout.device_bytes == sb.Layout.of(case, 15).device_bytes
    assert layout.output_shapes == ((96, 256, 1), (128, 128, 1))
    g0, g1 = layout.groups  # A and B of each group, e2m1: K/2 bytes a row
    assert layout.operand_regions == ((g0.a, 96 * 256), (g0.b, 256 * 256), (g1.a, 128 * 128), (g1.b, 128 * 128))
    with pytest.raises(ValueError, match=r"expected \(M, N, K\) per group, got \(\(96, 256\),\)"):
        kit.layout_of_sizes(((96, 256),), 15)
    good = [check.describe(torch.zeros(m, n, 1, dtype=torch.float16)) for m, n in ((96, 256), (128, 128))]
    assert kit.validate_outputs("builtins.list", good, case, "cpu") is None
    assert kit.validate_outputs("builtins.list", good[:1], case, "cpu") == "expected 2 outputs (one per group), got 1"
    assert [plugs.get(n).sample_buffers for n in ("nvfp4_dual_gemm", "nvfp4_gemm", "nvfp4_gemv")] == [None] * 3
