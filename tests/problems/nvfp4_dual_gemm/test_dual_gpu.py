"""nvfp4_dual_gemm on the GPU: the draw bit-identical to the official generator's code path (official_dual.py, a
faithful copy; the blocked copies' padding aside), and the Triton variant equal to the exact reference on every
official tests shape, both data modes."""
from __future__ import annotations

import pytest
import torch
from official_dual import generate_input as official_generate
from tests.problems.family_gpu import assert_triton_matches_reference, same

from harness import plugs
from problems._nvfp4.formats import unblock

pytestmark = pytest.mark.gpu
P = plugs.get("nvfp4_dual_gemm")
TESTS = plugs.load_cases("nvfp4_dual_gemm", "tests")


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
    assert_triton_matches_reference("nvfp4_dual_gemm", index, data)
