"""nvfp4_gemv on the GPU: the draw bit-identical to the official generator's code path (official_gemv.py, a
faithful copy), and the Triton variant equal to the exact reference on every official tests shape, both data
modes."""
from __future__ import annotations

import pytest
import torch
from official_gemv import generate_input as official_generate
from tests.problems.family_gpu import assert_triton_matches_reference, same

from harness import plugs

pytestmark = pytest.mark.gpu
P = plugs.get("nvfp4_gemv")
TESTS = plugs.load_cases("nvfp4_gemv", "tests")


@pytest.mark.parametrize("sizes", [(136, 192, 2, 7), (128, 256, 1, 1111), (2432, 4608, 2, 1124)])
def test_draw_is_bit_identical_to_the_official_generator(sizes):
    ours = P.generate(P.parse_case(dict(zip(P.case_fields, sizes))), sizes[-1])
    theirs = official_generate(*sizes)
    assert all(same(x, y) for x, y in zip(ours, theirs))


@pytest.mark.parametrize("data", ["official", "full-range"])
@pytest.mark.parametrize("index", range(len(TESTS)))
def test_triton_matches_the_reference_on_every_official_test(index, data):
    assert_triton_matches_reference("nvfp4_gemv", index, data)
