"""The fast reference on CUDA (bf16 operands, fp32 output) against the fp64 path, bit for bit, on the full official
shapes; run on the H200 through the device tool (skipped without CUDA)."""
from __future__ import annotations

import pytest
import torch

from task.inputs import generate_input
from task.reference import _operand_dtype, exact_in_fp32, ref_kernel, ref_kernel_fp64
from task.spec import load_shapes

pytestmark = pytest.mark.gpu

CASES = [*load_shapes("tests").cases, *load_shapes("benchmarks").cases]


def test_cuda_takes_bf16_operands_with_fp32_output():
    assert _operand_dtype(torch.device("cuda", torch.cuda.current_device())) == torch.bfloat16


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name or c.text())
def test_fast_equals_fp64_on_cuda(case, data):
    for seed in (case.seed, 7, 123457):
        inputs = generate_input(case.m, case.n, case.k, case.g, seed, data=data)
        exact = ref_kernel_fp64(inputs)
        expected_fast = data == "official"
        assert [exact_in_fp32(k, sfa, sfb) for k, (sfa, sfb) in zip(case.k, inputs[1])] == [expected_fast] * case.g
        for scales in ("plain", "reordered"):
            fast = ref_kernel(inputs, scales=scales)
            for g, (f, e) in enumerate(zip(fast, exact)):
                assert f.is_cuda and f.dtype == torch.float16 and f.shape == e.shape
                differ = int((f.view(torch.int16) != e.view(torch.int16)).sum())
                assert differ == 0, f"seed {seed} scales {scales} group {g}: {differ} outputs differ"
