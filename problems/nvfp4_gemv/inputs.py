"""nvfp4_gemv inputs: the official draw (reference-kernels problems/nvidia/nvfp4_gemv/reference.py
``generate_input``) bit for bit on CUDA, and a full-range mode.

Official order, all on the CUDA generator after ``torch.manual_seed(seed)``: A (uint8 in [0, 4)), B padded to
B_ROWS rows (the same), C (randn fp16, [M, 1, L]), then for SFA and then SFB: the plain scales (int8 in [0, 3)
-> e4m3fn) followed by the blocked storage's own draw of the same kind.
"""
from __future__ import annotations

import torch

from problems._nvfp4.draw import device_and_generators, full_range_scales, official_scales, with_blocked

#: Rows of b and sfb: the vector padded to 128 rows, as the official generator makes it.
B_ROWS = 128
#: The official data draw: randint(0, 4) bytes (the high nibble always 0).
DATA_HIGH = 4
#: The official scale draw: randint(0, 3) as int8, converted to e4m3fn (0, 1 or 2).
SCALE_LOW, SCALE_HIGH = 0, 3


def generate_input(m: int, k: int, l: int, seed: int, data: str = "official", device=None):
    """One nvfp4_gemv input (problems.nvfp4_gemv: ``input_t``'s shapes, dtypes and layouts). ``data``:
    ``"official"`` or ``"full-range"`` (every byte value of A and b; scales from problems._nvfp4.draw
    ``full_range_scales``, padding zero). Raises ValueError for another mode or a K full-range cannot bound."""
    if data not in ("official", "full-range"):
        raise ValueError(f"data mode must be 'official' or 'full-range', got {data!r}")
    dev, gen = device_and_generators(seed, device)
    sf_k = k // 16
    high = DATA_HIGH if data == "official" else 256

    def fp4(rows: int) -> torch.Tensor:
        raw = torch.randint(0, high, (l, rows, k // 2), dtype=torch.uint8, device=dev, generator=gen)
        return raw.permute(1, 2, 0).view(torch.float4_e2m1fn_x2)

    a, b = fp4(m), fp4(B_ROWS)
    c = torch.randn((l, m, 1), dtype=torch.float16, device=dev, generator=gen).permute(1, 2, 0)
    if data == "official":
        def draw(shape):
            return torch.randint(SCALE_LOW, SCALE_HIGH, shape, dtype=torch.int8, device=dev,
                                 generator=gen).to(torch.float8_e4m3fn)

        sfa, sfa_p = official_scales(l, m, sf_k, draw, draw)
        sfb, sfb_p = official_scales(l, B_ROWS, sf_k, draw, draw)
    else:
        plain_a, plain_b = full_range_scales(l, sf_k, k, m, [B_ROWS], gen, dev)
        (sfa, sfa_p), (sfb, sfb_p) = with_blocked(plain_a), with_blocked(plain_b)
    return a, b, sfa, sfb, sfa_p, sfb_p, c
