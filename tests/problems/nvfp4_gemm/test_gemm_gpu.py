"""nvfp4_gemm on the GPU: the draw bit-identical to the official generator's code path (official_gemm.py, a
faithful copy), and the Triton variant equal to the exact reference on every official tests shape, both data
modes."""
from __future__ import annotations

import pytest
import torch
from official_gemm import generate_input as official_generate
from tests.problems.family_gpu import assert_reference_same_on_gpu_and_cpu, assert_triton_matches_reference, same

from harness import plugs

pytestmark = pytest.mark.gpu
P = plugs.get("nvfp4_gemm")
TESTS = plugs.load_cases("nvfp4_gemm", "tests")


@pytest.mark.parametrize("sizes", [(136, 72, 192, 2, 7), (128, 256, 256, 1, 1111), (256, 7168, 2048, 1, 1153)])
def test_draw_is_bit_identical_to_the_official_generator(sizes):
    ours = P.generate(P.parse_case(dict(zip(P.case_fields, sizes))), sizes[-1])
    theirs = official_generate(*sizes)
    assert all(same(x, y) for x, y in zip(ours, theirs))


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("index", range(len(TESTS)))
def test_triton_matches_the_reference_on_every_official_test(index, data):
    assert_triton_matches_reference("nvfp4_gemm", index, data)


def test_reference_same_on_gpu_and_cpu():
    assert_reference_same_on_gpu_and_cpu("nvfp4_gemm")
