"""nvfp4_gemv: block-scaled NVFP4 batched matrix-vector product, c = (A * SFA) @ (b * SFB)^T per batch, fp16 out.

A submission defines ``custom_kernel(data: input_t) -> output_t`` (reference-kernels
problems/nvidia/nvfp4_gemv, task.py and reference.py). ``input_t`` is a 7-tuple
``(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)``, all on the GPU (the CPU when there is none):

- ``a`` float4_e2m1fn_x2 [M, K/2, L] (K-major, a view of (L, M, K/2) storage; element 2i is the LOW nibble of
  byte i). The official draw gives every byte a value 0..3: low elements 0, 0.5, 1 or 1.5, high elements 0.
- ``b`` float4_e2m1fn_x2 [128, K/2, L]: the vector is row 0; rows 1..127 are padding the official reference
  needs for torch._scaled_mm (task.yml's description says 1 x K x L: the tensor is 128 rows).
- ``sfa`` float8_e4m3fn [M, K/16, L], ``sfb`` [128, K/16, L] (row 0 is the vector's); scales 0, 1 or 2.
- ``sfa_permuted``, ``sfb_permuted``: the blocked 32x4x4 layout, [32, 4, ceil(rows/128), 4, ceil(K/64), L].
- ``c`` float16 [M, 1, L]: an output buffer.

``output_t`` is one float16 tensor [M, 1, L]: c[i, 0, l] = sum_k A[i, k, l] SFA[i, k/16, l] b[0, k, l]
SFB[0, k/16, l], rounded once to fp16. Types are built on first use (PEP 562), so the plug loads without torch.
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
