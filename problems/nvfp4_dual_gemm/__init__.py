"""nvfp4_dual_gemm: block-scaled NVFP4 dual GEMM with SiLU, C = silu(A B1^T) * (A B2^T) per batch, fp16 out.

A submission defines ``custom_kernel(data: input_t) -> output_t`` (reference-kernels
problems/nvidia/nvfp4_dual_gemm, task.py and reference.py). ``input_t`` is a 10-tuple
``(a, b1, b2, sfa, sfb1, sfb2, sfa_permuted, sfb1_permuted, sfb2_permuted, c)``, all on the GPU (the CPU when
there is none):

- ``a`` float4_e2m1fn_x2 [M, K/2, L], ``b1``, ``b2`` [N, K/2, L]: K-major (views of (L, rows, K/2) storage);
  element 2i is the LOW nibble of byte i. Official data: 0, +-0.5, +-1, +-1.5.
- ``sfa`` float8_e4m3fn [M, K/16, L], ``sfb1``, ``sfb2`` [N, K/16, L]: one scale per 16 values; official data
  draws them uniform in [0, 1) and rounds to e4m3fn (subnormals included).
- ``sfa_permuted``, ``sfb1_permuted``, ``sfb2_permuted``: the blocked 32x4x4 layout, [32, 4, ceil(rows/128), 4,
  ceil(K/64), L]. The official generator leaves their padding uninitialised (``torch.empty``); here it is zero.
- ``c`` float16 [M, N, L]: an output buffer.

``output_t`` is one float16 tensor [M, N, L]: with H1 = (A * SFA) @ (B1 * SFB1)^T and H2 likewise with B2,
C = silu(H1) * H2, rounded once to fp16. Types are built on first use (PEP 562), so the plug loads without torch.
"""
from typing import Tuple

__all__ = ["input_t", "output_t"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import torch

    types = {"input_t": Tuple[(torch.Tensor,) * 10], "output_t": torch.Tensor}
    globals().update(types)
    return types[name]
