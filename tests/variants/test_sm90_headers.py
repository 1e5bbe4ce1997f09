"""The Hopper-only variants' entry files: the leaderboard, the GPU the headers name, and an exact sm_90a
requirement (wgmma exists only on compute capability 9.0), as the harness reads them."""
from __future__ import annotations

import pytest

from harness.parent.registry import read_variant

from ._load import variant_dir


@pytest.mark.parametrize("name", ["wgmma_sm90", "cute_wgmma_sm90"])
def test_entry_file_declares_leaderboard_gpu_and_exact_sm90a(name):
    lines = (variant_dir(name) / "submission.py").read_text().splitlines()
    assert lines[:3] == ["#!POPCORN leaderboard nvfp4_group_gemm", "#!POPCORN gpu H200",
                         "#!FP4BENCH requires sm_90a"]
    variant = read_variant(variant_dir(name) / "submission.py")
    assert (variant.requires.major, variant.requires.minor, variant.requires.exact) == (9, 0, True)
