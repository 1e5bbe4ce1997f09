"""e2m1 / e4m3fn decoding, the blocked 32x4x4 scale layout, fp4 packing, the one rounding to fp16 and the
elementwise check, shared by the NVFP4 problems.

Re-exported from nvfp4_group_gemm's modules (``formats``, ``check``, ``reference``), where they were written first
and where that problem's variants import them (``task.formats``); the names stay.
"""
import torch

from problems.nvfp4_group_gemm.check import Evidence, compare
from problems.nvfp4_group_gemm.formats import (
    ATOM_BYTES,
    ATOM_COLS,
    ATOM_K,
    ATOM_ROWS,
    BLOCKED_PERMUTE,
    E2M1_VALUES,
    E4M3FN_MAX,
    SF_VEC,
    blocked_index,
    blocked_offset,
    blocked_rest,
    blocked_shape,
    blocked_view_shape,
    decode_e2m1,
    decode_e4m3fn,
    e4m3fn_value,
    unblock,
)
from problems.nvfp4_group_gemm.reference import round_to_fp16

__all__ = [
    "ATOM_BYTES", "ATOM_COLS", "ATOM_K", "ATOM_ROWS", "BLOCKED_PERMUTE", "E2M1_VALUES", "E4M3FN_MAX", "SF_VEC",
    "Evidence", "blocked_index", "blocked_offset", "blocked_rest", "blocked_shape", "blocked_view_shape", "compare",
    "decode_e2m1", "decode_e4m3fn", "e4m3fn_codes", "e4m3fn_value", "pack_e2m1", "round_to_fp16", "unblock",
]


def pack_e2m1(values):
    """Pack e2m1 values into bytes: float tensor [..., K] (every entry one of ``E2M1_VALUES``; K even) -> uint8
    [..., K/2], element 2i in the LOW nibble of byte i (the inverse of ``decode_e2m1``). -0.0 packs as code 8.
    Raises ValueError naming the first value that is not an e2m1 value."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float64)
    v = values.to(torch.float64).cpu()
    if v.shape[-1] % 2:
        raise ValueError(f"expected an even number of values in the last dimension, got {v.shape[-1]}")
    match = (v.unsqueeze(-1) == table) & (torch.signbit(v).unsqueeze(-1) == torch.signbit(table))
    bad = ~match.any(-1)
    if bad.any():
        raise ValueError(f"{float(v[bad][0])!r} is not an e2m1 value (expected one of {sorted(set(E2M1_VALUES))})")
    codes = match.to(torch.uint8).argmax(-1).to(torch.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(values.device)


def e4m3fn_codes(values):
    """float tensor of exactly representable e4m3fn values -> uint8 codes (``torch.float8_e4m3fn`` bits). Raises
    ValueError naming the first value that float8_e4m3fn cannot hold exactly."""
    v = values.to(torch.float32)
    f8 = v.to(torch.float8_e4m3fn)
    inexact = f8.to(torch.float32) != v
    if inexact.any():
        raise ValueError(f"{float(v[inexact][0])!r} is not exactly an e4m3fn value")
    return f8.view(torch.uint8)
