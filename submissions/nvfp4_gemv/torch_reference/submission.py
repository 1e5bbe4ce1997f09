#!POPCORN leaderboard nvfp4_gemv
#!POPCORN gpu H200
#!FP4BENCH requires cpu-ok
"""Portable baseline for nvfp4_gemv: dequantise A and the vector (row 0 of ``b``) in torch (fp32, exact), one
fp32 matrix-vector product per batch, round to fp16 into ``c``.

Reads the blocked (``*_permuted``) scales, as a kernel would. Correct on any device; slow, because it writes
a dequantised fp32 copy of A to memory. Self-contained: nothing but torch and the problem's types.
"""
import torch

from task import input_t, output_t

SF_VEC = 16
#: e2m1 code -> value (sign bit 3, two exponent bits with bias 1, one mantissa bit).
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def decode_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[R, K/2] e2m1 pairs -> fp32 [R, K]; element 2i is the low nibble of byte i."""
    u = packed.view(torch.uint8).long()
    lut = torch.tensor(E2M1, dtype=torch.float32, device=packed.device)
    return torch.stack((lut[u & 0xF], lut[u >> 4]), dim=-1).flatten(-2)


def unblock(blocked: torch.Tensor, rows: int, sf_k: int) -> torch.Tensor:
    """One batch's blocked scales [32, 4, rest_rows, 4, rest_k] -> fp32 [rows, sf_k]: scale (r, j) sits at
    ((r // 128) * rest_k + j // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + j % 4 of the storage."""
    rest_k = blocked.shape[4]
    storage = blocked.permute(2, 4, 0, 1, 3).reshape(-1)
    r = torch.arange(rows, device=blocked.device).unsqueeze(1)
    j = torch.arange(sf_k, device=blocked.device).unsqueeze(0)
    offset = ((r // 128) * rest_k + j // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + j % 4
    return storage[offset].float()


def dequantize(packed: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
    """[R, K/2] e2m1 pairs with their blocked scales -> fp32 [R, K] (exact)."""
    rows, k = packed.shape[0], packed.shape[1] * 2
    return decode_e2m1(packed) * unblock(blocked, rows, k // SF_VEC).repeat_interleave(SF_VEC, dim=1)


def custom_kernel(data: input_t) -> output_t:
    a, b, _sfa, _sfb, sfa_p, sfb_p, c = data
    for i in range(c.shape[2]):
        vector = dequantize(b[:1, :, i], sfb_p[..., i])[0]
        c[:, 0, i] = (dequantize(a[:, :, i], sfa_p[..., i]) @ vector).to(torch.float16)
    return c
