"""nvfp4_group_gemm: block-scaled NVFP4 grouped GEMM, and the types a submission sees.

A submission does ``from task import input_t, output_t`` (the worker makes ``task`` this package, as the official
runner's task.py; harness.worker.task_alias) and defines ``custom_kernel(data: input_t) -> output_t``.
Meaning (docs/problem.md; GPU MODE reference-kernels problems/nvidia/nvfp4_group_gemm):

``input_t = (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes)``, one entry per group g:

- ``abc_tensors[g] = (a, b, c)``: a float4_e2m1fn_x2 [M, K/2, 1] (K-major), b float4_e2m1fn_x2 [N, K/2, 1]
  (K-major), c float16 [M, N, 1] (pre-filled output buffer); all on the GPU (the CPU when there is none).
- ``sfasfb_tensors[g] = (sfa, sfb)``: float8_e4m3fn [M, K/16, 1] and [N, K/16, 1], always on the CPU.
- ``sfasfb_reordered_tensors[g] = (sfa_reordered, sfb_reordered)``: float8_e4m3fn
  [32, 4, ceil(M/128), 4, ceil(K/64), 1] and the same with N, the blocked 32x4x4 layout (formats).
- ``problem_sizes[g] = (M, N, K, 1)``, K the logical reduction length.

``output_t`` is a list of G float16 tensors C_g [M, N, 1] on the inputs' device, with
``C_g = (A_g * SFA_g) @ (B_g * SFB_g)^T`` accumulated in fp32 and rounded once to fp16.

The types are built on first use (PEP 562 ``__getattr__``), so ``spec``, ``cost`` and ``plug`` load without
torch: commands that only read shape sets or the results store start in a fraction of a second. ``plug.PROBLEM``
is the problem behind harness/problem.py's contract; ``sample_buffers`` lays one timed sample's inputs out in flat
byte buffers (the plug's ``sample_buffers`` capability).
"""
from typing import List, Tuple

ProblemSize = Tuple[int, int, int, int]

__all__ = ["input_t", "output_t", "ProblemSize"]


def __getattr__(name: str):
    if name not in ("input_t", "output_t"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import torch

    types = {
        "input_t": Tuple[
            List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
            List[Tuple[torch.Tensor, torch.Tensor]],
            List[Tuple[torch.Tensor, torch.Tensor]],
            List[ProblemSize],
        ],
        "output_t": List[torch.Tensor],
    }
    globals().update(types)
    return types[name]
