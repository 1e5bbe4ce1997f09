"""The exact reference: decode e2m1 and e4m3fn exactly, accumulate in fp64, round once to fp16.

Every product of two (e2m1 x e4m3fn) values has at most 12 significant bits, so fp64 products are exact; for
official data the sums are exact too (multiples of 1/4 well inside 2^53). The fp64 -> fp16 step goes through
fp32 with round-to-odd, which makes it a single correct rounding (fp32 keeps 13 more bits than fp16).
"""
from __future__ import annotations

import torch

from task import input_t, output_t
from task.formats import SF_VEC, decode_e2m1, decode_e4m3fn


def dequantize(packed: torch.Tensor, sf: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """[R, K/2, 1] e2m1 pairs and [R, K/16, 1] e4m3fn scales -> [R, K] values of ``dtype`` (exact in fp32+)."""
    values = decode_e2m1(packed[:, :, 0], dtype)
    scales = decode_e4m3fn(sf[:, :, 0].to(packed.device), dtype)
    return values * scales.repeat_interleave(SF_VEC, dim=1)


def round_to_fp16(x: torch.Tensor) -> torch.Tensor:
    """Round fp64 ``x`` to fp16 once (round to nearest even), via fp32 with round-to-odd."""
    f = x.to(torch.float32)
    inexact = f.to(torch.float64) != x
    too_far = inexact & (f.to(torch.float64).abs() > x.abs())
    bits = f.view(torch.int32)
    bits = torch.where(too_far, bits - 1, bits)  # step toward zero: truncation
    bits = torch.where(inexact, bits | 1, bits)  # sticky bit
    return bits.view(torch.float32).to(torch.float16)


def ref_kernel(data: input_t) -> output_t:
    """Expected outputs for ``data``: one fp16 [M, N, 1] tensor per group, on the device of ``a``.

    Uses the plain scales (sfasfb_tensors), not the reordered ones.
    """
    abc, sfs, _, _ = data
    out = []
    for (a, b, _c), (sfa, sfb) in zip(abc, sfs):
        prod = dequantize(a, sfa) @ dequantize(b, sfb).T
        out.append(round_to_fp16(prod).unsqueeze(-1))
    return out
