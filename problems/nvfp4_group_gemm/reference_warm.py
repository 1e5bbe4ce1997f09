"""Compile warm-up of the reference: build and load the kernels ``ReferencePlan`` and ``ref_kernel_many`` will
launch, before the first sample needs them."""
from __future__ import annotations

from typing import Sequence

import torch

from problems.nvfp4_group_gemm.reference_bound import _key_table
from problems.nvfp4_group_gemm.reference_paths import _int_mm_pays, _triton_decoder, _triton_groups

#: Rows of A and B per group of ``warm_up``'s inputs: small, a multiple of spec.MN_MULTIPLE.
WARM_ROWS = 128


def warm_up(kinds: Sequence[tuple[Sequence[int], int]], device: torch.device | str) -> None:
    """Compile and load what ``ReferencePlan`` and ``ref_kernel_many`` will launch on ``device`` for samples of
    these ``kinds``: (K per group, inputs per sample). On CUDA the Triton kernels are specialised by the
    sample's total group count (n inputs x G, rounded up to a power of two), by whether every K/2 is a multiple
    of reference_triton.GEMM_BYTES and by alignment, so each kind's launches are built over official inputs
    of WARM_ROWS rows per group and compiled, all kinds at once on a thread pool where triton allows
    (reference_triton.compiling); the first kind is then run once, which builds triton's launchers. A fresh
    H200 spent 3.4 s on the reference's first compile (2026-12-02, docs/journal.md), and 8.0 s compiling
    the benchmarks' kinds one after another; triton then caches them on disk. On the CPU only the integer path's
    choice (``_int_mm_pays``) is made. For a caller with time to spare (the parent while its worker
    starts). Raises what ``ref_kernel_many`` raises."""
    from problems.nvfp4_group_gemm.inputs import generate_many

    device = torch.device(device)
    decoder = _triton_decoder() if device.type == "cuda" else None
    if decoder is None:
        _int_mm_pays()
        return
    gemms = []
    for ks, count in dict.fromkeys((tuple(ks), count) for ks, count in kinds):
        rows = [WARM_ROWS] * len(ks)
        inputs = generate_many(rows, rows, ks, len(ks), list(range(1, count + 1)), device=device)
        groups = [g for x in inputs for g in _triton_groups(x, "plain", device)[1]]
        gemms.append(decoder.PreparedGemm(groups, _key_table(device)))
    with decoder.compiling(2 * len(gemms)):
        for gemm in gemms:
            gemm.compile()
    if gemms:  # one real launch of each kernel builds triton's launcher for its signature (the same for all kinds)
        gemms[0].run()
        torch.cuda.synchronize(device)
