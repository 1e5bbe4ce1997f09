"""The exact nvfp4_dual_gemm reference: H1 = (A * SFA) @ (B1 * SFB1)^T and H2 likewise exact in fp64
(problems._nvfp4.exact), then silu(H1) * H2 in fp64, rounded once to fp16 (the one step that is not exact is fp64's
silu and product, 2^-52 relative, far below fp16's rounding)."""
from __future__ import annotations

import torch

from problems._nvfp4.exact import products
from problems._nvfp4.formats import round_to_fp16


def ref_kernel(data) -> torch.Tensor:
    """fp16 [M, N, L] on ``c``'s device for an nvfp4_dual_gemm ``input_t``; reads the plain scales, writes
    nothing."""
    a, b1, b2, sfa, sfb1, sfb2, _pa, _pb1, _pb2, c = data
    h1 = products(a, sfa, b1, sfb1)
    h2 = products(a, sfa, b2, sfb2)
    return round_to_fp16(torch.nn.functional.silu(h1) * h2).to(c.device)
