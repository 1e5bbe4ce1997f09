"""Exact products of block-scaled NVFP4 operands, in fp64.

An e2m1 value is h/2 (|h| <= 12) and a finite e4m3fn scale q * 2^-9 (|q| <= 448 * 2^9), so every decoded element
is an integer multiple of 2^-10 with at most 6 significant bits, and every product of two is a multiple of
u = 2^-20, exact in fp64. A dot product's partial sums are then multiples of u too, and stay exact in fp64 (53-bit
significand) while their magnitude is below 2^33: every official draw (gemm's largest: K = 16384 products of at
most 6 * 3 * 6 * 3 = 324, under 2^23) and every full-range draw (partial sums bounded by 65504,
problems._nvfp4.draw) is far inside. So ``products`` returns the exact dot products, in any summation order.
"""
from __future__ import annotations

import torch

from problems._nvfp4.formats import SF_VEC, decode_e2m1, decode_e4m3fn


def dequantize(packed: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """e2m1 pairs [R, K/2] (uint8 or float4_e2m1fn_x2) and e4m3fn scales [R, K/16] -> fp64 [R, K], exact, on
    ``packed``'s device. Raises ValueError when the scales do not cover K in blocks of 16."""
    k = packed.shape[-1] * 2
    if sf.shape[-1] * SF_VEC != k or sf.shape[0] != packed.shape[0]:
        raise ValueError(f"expected scales [{packed.shape[0]}, {k // SF_VEC}] for data [{packed.shape[0]}, "
                         f"{k // 2}] (K={k}), got {list(sf.shape)}")
    values = decode_e2m1(packed)
    scales = decode_e4m3fn(sf.to(packed.device))
    return values * scales.repeat_interleave(SF_VEC, dim=-1)


def products(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    """fp64 [M, N, L] = (A * SFA) @ (B * SFB)^T per batch, exact (module docstring).

    ``a`` [M, K/2, L], ``b`` [N, K/2, L] e2m1 pairs; ``sfa`` [M, K/16, L], ``sfb`` [N, K/16, L] e4m3fn, any device
    (the result is on ``a``'s). One batch is decoded at a time.
    """
    out = [dequantize(a[:, :, i], sfa[:, :, i]) @ dequantize(b[:, :, i], sfb[:, :, i]).T for i in range(a.shape[2])]
    return torch.stack(out, dim=-1)
