"""nvfp4_dual_gemm inputs: the official draw (reference-kernels problems/nvidia/nvfp4_dual_gemm/reference.py
``generate_input``) bit for bit on CUDA, and a full-range mode.

Official order, all on the CUDA generator after ``torch.manual_seed(seed)``: A, B1, B2 (uint8 in [0, 255), each
nibble masked to its sign and two low bits), C (randn fp16), then SFA, SFB1, SFB2 (``torch.rand`` fp32 in [0, 1)
rounded to e4m3fn). The blocked copies' storage comes from ``torch.empty`` there (no draw, contents undefined);
here it is zero, which differs from the official tensors only in padding, and the official sets have none
(every M and N a multiple of 128, every K of 256).
"""
from __future__ import annotations

import torch

from problems._nvfp4.draw import device_and_generators, full_range_scales, official_scales, with_blocked

#: The official data keeps each nibble's sign bit and two low bits: codes 0..3 and 8..11.
NIBBLE_MASK = 0b1011_1011
#: Full-range data bounds each product's sums by this, so |silu(H1) * H2| <= 255^2 = 65025 stays finite in fp16.
FULL_RANGE_BOUND = 255.0


def generate_input(m: int, n: int, k: int, l: int, seed: int, data: str = "official", device=None):
    """One nvfp4_dual_gemm input (problems.nvfp4_dual_gemm: ``input_t``'s shapes, dtypes and layouts).
    ``data``: ``"official"`` or ``"full-range"`` (every byte value of A, B1, B2; scales from problems._nvfp4.draw
    ``full_range_scales`` with every sum below FULL_RANGE_BOUND, padding zero). Raises ValueError for another mode
    or a K full-range cannot bound."""
    if data not in ("official", "full-range"):
        raise ValueError(f"data mode must be 'official' or 'full-range', got {data!r}")
    dev, gen = device_and_generators(seed, device)
    sf_k = k // 16

    def fp4(rows: int) -> torch.Tensor:
        raw = torch.randint(255 if data == "official" else 256, (l, rows, k // 2), dtype=torch.uint8, device=dev,
                            generator=gen)
        if data == "official":
            raw = raw & NIBBLE_MASK
        return raw.permute(1, 2, 0).view(torch.float4_e2m1fn_x2)

    a, b1, b2 = fp4(m), fp4(n), fp4(n)
    c = torch.randn((l, m, n), dtype=torch.float16, device=dev, generator=gen).permute(1, 2, 0)
    if data == "official":
        def draw(shape):
            return torch.rand(shape, dtype=torch.float32, device=dev, generator=gen).to(torch.float8_e4m3fn)

        def pad(shape):
            return torch.zeros(shape, dtype=torch.float8_e4m3fn, device=dev)

        scales = [official_scales(l, rows, sf_k, draw, pad) for rows in (m, n, n)]
    else:
        scales = [with_blocked(p) for p in full_range_scales(l, sf_k, k, m, [n, n], gen, dev, FULL_RANGE_BOUND)]
    (sfa, sfa_p), (sfb1, sfb1_p), (sfb2, sfb2_p) = scales
    return a, b1, b2, sfa, sfb1, sfb2, sfa_p, sfb1_p, sfb2_p, c
