"""The exact nvfp4_gemv reference: c = (A * SFA) @ (b * SFB)^T per batch with b the first row of ``b``, products
and sums exact in fp64 (problems._nvfp4.exact), rounded once to fp16."""
from __future__ import annotations

import torch

from problems._nvfp4.exact import products
from problems._nvfp4.formats import round_to_fp16


def ref_kernel(data) -> torch.Tensor:
    """fp16 [M, 1, L] on ``c``'s device for an nvfp4_gemv ``input_t``; reads the plain scales, writes nothing."""
    a, b, sfa, sfb, _sfa_p, _sfb_p, c = data
    return round_to_fp16(products(a, sfa, b[:1], sfb[:1])).to(c.device)
