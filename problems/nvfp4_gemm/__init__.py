"""nvfp4_gemm: block-scaled NVFP4 GEMM, C = (A * SFA) @ (B * SFB)^T per batch, fp16 out.

A submission defines ``custom_kernel(data: input_t) -> output_t`` (reference-kernels
problems/nvidia/nvfp4_gemm, task.py and reference.py). ``input_t`` is a 7-tuple
``(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)``, all on the GPU (the CPU when there is none):

- ``a`` float4_e2m1fn_x2 [M, K/2, L], ``b`` float4_e2m1fn_x2 [N, K/2, L]: K-major (views of (L, rows, K/2)
  storage); element 2i of a row is the LOW nibble of byte i.
- ``sfa`` float8_e4m3fn [M, K/16, L], ``sfb`` [N, K/16, L]: one scale per 16 values (views of (L, rows, K/16)).
- ``sfa_permuted``, ``sfb_permuted``: the same scales in the blocked 32x4x4 layout, [32, 4, ceil(rows/128), 4,
  ceil(K/64), L] (problems._nvfp4.formats); padding holds other values.
- ``c`` float16 [M, N, L]: an output buffer (random values) a kernel may write and return.

``output_t`` is one float16 tensor [M, N, L]: C = (A * SFA) @ (B * SFB)^T per batch, rounded once to fp16 (the
official reference rounds torch._scaled_mm's fp32 sum; within rtol = atol = 1e-3 of the exact value either way).

The types are built on first use (PEP 562), so the plug loads without torch.
"""
from typing import Tuple

__all__ = ["input_t", "output_t"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import torch

    types = {"input_t": Tuple[(torch.Tensor,) * 7], "output_t": torch.Tensor}
    globals().update(types)
    return types[name]
