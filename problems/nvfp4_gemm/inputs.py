"""nvfp4_gemm inputs: the official draw (reference-kernels problems/nvidia/nvfp4_gemm/reference.py
``generate_input``) bit for bit on CUDA, and a full-range mode.

Official order, all on the CUDA generator after ``torch.manual_seed(seed)``: A (int8 in [-128, 128): every e2m1
code), B, C (randn fp16), then for SFA and then SFB: the plain scales (int8 in [0, 4) -> e4m3fn: 0, 1, 2, 3)
followed by the blocked storage's own draw of the same kind (its padding keeps it). The official code moves the
plain scales to the CPU and back, which keeps their values and strides.
"""
from __future__ import annotations

import torch

from problems._nvfp4.draw import device_and_generators, full_range_scales, official_scales, with_blocked

#: The official scale draw: randint(0, 4) as int8, converted to e4m3fn (0, 1, 2 or 3).
SCALE_LOW, SCALE_HIGH = 0, 4


def generate_input(m: int, n: int, k: int, l: int, seed: int, data: str = "official", device=None):
    """One nvfp4_gemm input (problems.nvfp4_gemm: ``input_t``'s shapes, dtypes and layouts). ``data``:
    ``"official"`` or ``"full-range"`` (every byte value of A and B; scales from problems._nvfp4.draw
    ``full_range_scales``, padding zero). Raises ValueError for another mode or a K full-range cannot bound."""
    if data not in ("official", "full-range"):
        raise ValueError(f"data mode must be 'official' or 'full-range', got {data!r}")
    dev, gen = device_and_generators(seed, device)
    sf_k = k // 16

    def fp4(rows: int) -> torch.Tensor:
        if data == "official":
            raw = torch.randint(-128, 128, (l, rows, k // 2), dtype=torch.int8, device=dev, generator=gen)
        else:
            raw = torch.randint(0, 256, (l, rows, k // 2), dtype=torch.uint8, device=dev, generator=gen)
        return raw.permute(1, 2, 0).view(torch.float4_e2m1fn_x2)

    a, b = fp4(m), fp4(n)
    c = torch.randn((l, m, n), dtype=torch.float16, device=dev, generator=gen).permute(1, 2, 0)
    if data == "official":
        def draw(shape):
            return torch.randint(SCALE_LOW, SCALE_HIGH, shape, dtype=torch.int8, device=dev,
                                 generator=gen).to(torch.float8_e4m3fn)

        sfa, sfa_p = official_scales(l, m, sf_k, draw, draw)
        sfb, sfb_p = official_scales(l, n, sf_k, draw, draw)
    else:
        plain_a, plain_b = full_range_scales(l, sf_k, k, m, [n], gen, dev)
        (sfa, sfa_p), (sfb, sfb_p) = with_blocked(plain_a), with_blocked(plain_b)
    return a, b, sfa, sfb, sfa_p, sfb_p, c
