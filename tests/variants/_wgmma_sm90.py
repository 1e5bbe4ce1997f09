"""What every test file of submissions/wgmma_sm90 shares: its submission module and host, kernel.cu, the official
shape sets, and a reader for kernel.cu's ``constexpr int`` constants."""
from __future__ import annotations

import re

from problems.nvfp4_group_gemm.spec import load_shapes

from ._load import load_submission, variant_dir

VARIANT = "wgmma_sm90"
sub = load_submission(VARIANT)
host = sub.host
KERNEL_CU = variant_dir(VARIANT) / "kernel.cu"
TEST_CASES = load_shapes("tests").cases
BENCHMARK_CASES = load_shapes("benchmarks").cases


def _constexpr(name: str) -> int:
    match = re.search(rf"constexpr int {name} = (\d+);", KERNEL_CU.read_text())
    assert match, f"{name} not found in kernel.cu"
    return int(match.group(1))
