#!POPCORN leaderboard nvfp4_group_gemm
#!POPCORN gpu B200
#!FP4BENCH requires cpu-ok
"""Portable baseline: dequantise A and B in torch (fp32, exact), one fp32 matmul per group, round to fp16.

Reads the GPU-resident reordered scales (the plain ones live on the CPU). Correct on any device; slow, because
it writes dequantised fp32 copies of A and B to memory. Every other variant is compared with this one.
"""
import torch

from task import input_t, output_t
from task.formats import SF_VEC, decode_e2m1, unblock


def _dequantize(packed: torch.Tensor, sf_reordered: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    values = decode_e2m1(packed[:, :, 0], torch.float32)
    scales = unblock(sf_reordered, rows, k // SF_VEC).view(torch.float8_e4m3fn).float()
    return values * scales.repeat_interleave(SF_VEC, dim=1)


def custom_kernel(data: input_t) -> output_t:
    abc, _, sf_reordered, sizes = data
    out = []
    for (a, b, c), (sfa, sfb), (m, n, k, _) in zip(abc, sf_reordered, sizes):
        prod = _dequantize(a, sfa, m, k) @ _dequantize(b, sfb, n, k).T
        c[:, :, 0] = prod.to(torch.float16)
        out.append(c)
    return out
