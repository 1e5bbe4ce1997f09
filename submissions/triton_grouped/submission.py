#!POPCORN leaderboard nvfp4_group_gemm
#!POPCORN gpu H200
#!FP4BENCH requires sm_90
"""NVFP4 grouped GEMM for Hopper in Triton: dequantise inside the kernel, bf16/fp16 tensor-core MMA, one launch.

For every group g: ``C_g = (A_g * SFA_g) @ (B_g * SFB_g)^T`` with e2m1 data and e4m3fn scales per 16 values.

Algorithm (see README.md beside this file):
- "Swap AB": each program computes a tile of ``C_g^T``: BN rows of N (the MMA's 64-row side, one or two
  warpgroups) by BM columns of the group's M (the MMA's N side, 64..256), so a small M is padded to 64, not 128.
- Every tile of every group is one program of a single launch; tiles are sorted by cost, largest first, so the
  hardware block scheduler hands them out longest-processing-time first.
- Per K step a program loads e2m1 bytes of B and A and their e4m3fn scales (straight from the GPU-resident
  blocked 32x4x4 tensors), decodes them to 16-bit floats in registers (each e2m1 x e4m3fn product is exact
  there) and issues ``tl.dot`` with fp32 accumulation; the low and high nibbles of each byte form two dots over
  K/2 (a consistent permutation of K on both sides, so no interleave is needed).
- On the GPU the decode is a few integer ops plus one bf16x2 FMA per two values (inline PTX): the nibble goes
  into a bf16 bit pattern worth value * 2^-126 and is multiplied by scale * 2^119, so each operand carries a
  factor 2^-7 (exact, never subnormal), undone by multiplying the fp32 accumulator by 2^14. Under
  ``TRITON_INTERPRET=1`` a pure-Triton fp16 decode with the same structure runs instead.
"""

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from task import input_t, output_t

# ----------------------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------------------

#: Bytes of a blocked scale atom (32 x 4 rows x 4 scale columns) and its rows.
_ATOM_BYTES, _ATOM_ROWS = 512, 128
#: Values per scale factor.
_SF_VEC = 16


@dataclass(frozen=True)
class TileClass:
    """One compiled tile shape: ``bm`` columns of M (the MMA's N side), ``bn`` rows of N (the MMA's M side)."""

    bm: int
    bn: int


@dataclass(frozen=True)
class Config:
    """What one launch bakes in: three tile classes (ascending bm), K step, warps, pipeline depth, decode path,
    and whether the low/high nibble halves are joined into one dot in natural K order."""

    classes: tuple = (TileClass(64, 128), TileClass(128, 128), TileClass(256, 128))
    bk: int = 128
    num_warps: int = 8
    num_stages: int = 3
    decode: str = "bf16"  # "bf16" (1 FMA per pair), "f16" (2 multiplies per pair); interpreter: "pure"
    join: bool = True


DEFAULT_CONFIG = Config()

# ----------------------------------------------------------------------------------------------------------
# Kernel
# ----------------------------------------------------------------------------------------------------------

# e2m1 pairs (4 bytes per call) and their per-byte scales -> decoded low nibbles ($0, $1) and high nibbles
# ($2, $3), each register two bf16 values in element order. y = [0, b0, 0, b1]: each byte sits in bits 15..8
# of a half; the high nibble's sign is already bit 15 and its magnitude (bits 14..12) moves to 8..6; the low
# nibble's sign (bit 11) moves to 15 and its magnitude (10..8) to 8..6. Bits 8..6 as a bf16 pattern are the
# e2m1 value times 2^-126 (code 1 is the subnormal 2^-127); times scale * 2^119 gives value * scale * 2^-7.
_ASM_BF16 = tl.constexpr("""
{
.reg .b32 y, t, u, v, z;
mov.b32 z, 0x80008000;
prmt.b32 y, $4, 0, 0x1404;
shr.b32 t, y, 6;
and.b32 t, t, 0x01C001C0;
and.b32 u, y, 0x80008000;
or.b32 v, u, t;
fma.rn.bf16x2 $2, v, $5, z;
shl.b32 t, y, 4;
and.b32 t, t, 0x80008000;
shr.b32 u, y, 2;
and.b32 u, u, 0x01C001C0;
or.b32 v, u, t;
fma.rn.bf16x2 $0, v, $5, z;
prmt.b32 y, $4, 0, 0x3424;
shr.b32 t, y, 6;
and.b32 t, t, 0x01C001C0;
and.b32 u, y, 0x80008000;
or.b32 v, u, t;
fma.rn.bf16x2 $3, v, $6, z;
shl.b32 t, y, 4;
and.b32 t, t, 0x80008000;
shr.b32 u, y, 2;
and.b32 u, u, 0x01C001C0;
or.b32 v, u, t;
fma.rn.bf16x2 $1, v, $6, z;
}
""")

# The same in fp16: magnitude to bits 11..9 (value * 2^-14, code 1 subnormal), times 2^14 (exact), times the
# scale (exact: at most 6 significant bits, within [2^-10, 2688]).
_ASM_F16 = tl.constexpr("""
{
.reg .b32 y, t, u, v, w;
mov.b32 w, 0x74007400;
prmt.b32 y, $4, 0, 0x1404;
shr.b32 t, y, 3;
and.b32 t, t, 0x0E000E00;
and.b32 u, y, 0x80008000;
or.b32 v, u, t;
mul.rn.f16x2 v, v, w;
mul.rn.f16x2 $2, v, $5;
shl.b32 t, y, 4;
and.b32 t, t, 0x80008000;
shl.b32 u, y, 1;
and.b32 u, u, 0x0E000E00;
or.b32 v, u, t;
mul.rn.f16x2 v, v, w;
mul.rn.f16x2 $0, v, $5;
prmt.b32 y, $4, 0, 0x3424;
shr.b32 t, y, 3;
and.b32 t, t, 0x0E000E00;
and.b32 u, y, 0x80008000;
or.b32 v, u, t;
mul.rn.f16x2 v, v, w;
mul.rn.f16x2 $3, v, $6;
shl.b32 t, y, 4;
and.b32 t, t, 0x80008000;
shl.b32 u, y, 1;
and.b32 u, u, 0x0E000E00;
or.b32 v, u, t;
mul.rn.f16x2 v, v, w;
mul.rn.f16x2 $1, v, $6;
}
""")

#: bf16 decode: each operand value carries 2^-7, so the accumulator is multiplied by 2^14 at the end.
_BF16_SCALE_BIAS = 2.0**119
_BF16_ACC_SCALE = 2.0**14


@triton.jit
def _e2m1_to_f16(code):
    """Pure Triton: e2m1 codes (uint8 0..15) -> fp16 values, exact (magnitude bits to 11..9, times 2^14)."""
    c = code.to(tl.uint16)
    bits = ((c & 7) << 9) | ((c & 8) << 12)
    return bits.to(tl.float16, bitcast=True) * 16384.0


@triton.jit
def _e4m3_to_f16(code):
    """Pure Triton: e4m3fn bytes -> fp16 values, exact (bits 6..0 to 13..7, times 2^8; 0x7F/0xFF -> NaN)."""
    c = code.to(tl.uint16)
    bits = ((c & 0x7F) << 7) | ((c & 0x80) << 8)
    value = bits.to(tl.float16, bitcast=True) * 256.0
    return tl.where((c & 0x7F) == 0x7F, float("nan"), value)


@triton.jit
def _decode(x, s8, DECODE: tl.constexpr):
    """e2m1 bytes x [R, KB] and their e4m3fn scale bytes s8 [R, KB // 8] -> (low nibbles, high nibbles), each
    [R, KB] of 16-bit floats holding value * scale (times 2^-7 for the bf16 decode)."""
    R: tl.constexpr = x.shape[0]
    KB: tl.constexpr = x.shape[1]
    if DECODE == "pure":
        s = _e4m3_to_f16(s8)
        s = tl.reshape(tl.broadcast_to(s[:, :, None], (R, KB // 8, 8)), (R, KB))
        lo = _e2m1_to_f16(x & 0xF) * s
        hi = _e2m1_to_f16(x >> 4) * s
    elif DECODE == "bf16":
        s = (s8.to(tl.float8e4nv, bitcast=True).to(tl.float32) * 6.646139978924579e35).to(tl.bfloat16)
        s = tl.reshape(tl.broadcast_to(s[:, :, None], (R, KB // 8, 8)), (R, KB))
        lo, hi = tl.inline_asm_elementwise(_ASM_BF16, "=r,=r,=r,=r,r,r,r", [x, s],
                                           dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
    else:
        s = s8.to(tl.float8e4nv, bitcast=True).to(tl.float16)
        s = tl.reshape(tl.broadcast_to(s[:, :, None], (R, KB // 8, 8)), (R, KB))
        lo, hi = tl.inline_asm_elementwise(_ASM_F16, "=r,=r,=r,=r,r,r,r", [x, s],
                                           dtype=(tl.float16, tl.float16), is_pure=True, pack=4)
    return lo, hi


@triton.jit
def _tile(a_ptr, b_ptr, c_ptr, sfa_ptr, sfb_ptr, M, N, K, m0, n0, acc_scale,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, DECODE: tl.constexpr,
          JOIN: tl.constexpr = False):
    """One tile of C^T: rows n0..n0+BN of N by columns m0..m0+BM of M, over all of K."""
    KB: tl.constexpr = BK // 2          # bytes of e2m1 per row per K step
    SC: tl.constexpr = BK // 16         # scale columns per K step
    half_k = tl.multiple_of(K // 2, 32)
    rest_k = K // 64                    # blocked-layout atoms along K
    rn = n0 + tl.arange(0, BN)
    rm = m0 + tl.arange(0, BM)
    n_ok = rn < N
    m_ok = rm < M
    rb = tl.arange(0, KB)
    rs = tl.arange(0, SC)
    b_ptrs = b_ptr + rn[:, None] * half_k + rb[None, :]
    a_ptrs = a_ptr + rm[:, None] * half_k + rb[None, :]
    sb_rows = (rn // 128) * (rest_k * 512) + (rn % 32) * 16 + ((rn % 128) // 32) * 4
    sa_rows = (rm // 128) * (rest_k * 512) + (rm % 32) * 16 + ((rm % 128) // 32) * 4
    acc = tl.zeros((BN, BM), dtype=tl.float32)
    for k0 in range(0, K, BK):
        j = k0 // 16 + rs
        sc = (j // 4) * 512 + (j % 4)
        b = tl.load(b_ptrs, mask=n_ok[:, None], other=0)
        sb = tl.load(sfb_ptr + sb_rows[:, None] + sc[None, :], mask=n_ok[:, None], other=0)
        a = tl.load(a_ptrs, mask=m_ok[:, None], other=0)
        sa = tl.load(sfa_ptr + sa_rows[:, None] + sc[None, :], mask=m_ok[:, None], other=0)
        b_lo, b_hi = _decode(b, sb, DECODE)
        a_lo, a_hi = _decode(a, sa, DECODE)
        if JOIN:
            # Natural K order (value 2j is byte j's low nibble): one dot of depth BK.
            bd = tl.reshape(tl.join(b_lo, b_hi), (BN, BK))
            ad = tl.reshape(tl.join(a_lo, a_hi), (BM, BK))
            acc = tl.dot(bd, tl.trans(ad), acc)
        else:
            acc = tl.dot(b_lo, tl.trans(a_lo), acc)
            acc = tl.dot(b_hi, tl.trans(a_hi), acc)
        b_ptrs += KB
        a_ptrs += KB
    out = (acc * acc_scale).to(tl.float16)
    c_ptrs = c_ptr + rm[None, :] * N + rn[:, None]
    tl.store(c_ptrs, out, mask=n_ok[:, None] & m_ok[None, :])


@triton.jit
def _group_gemm_kernel(tab_ptr, tile_ptr, acc_scale,
                       BM0: tl.constexpr, BN0: tl.constexpr, BM1: tl.constexpr, BN1: tl.constexpr,
                       BM2: tl.constexpr, BN2: tl.constexpr, BK: tl.constexpr, DECODE: tl.constexpr,
                       JOIN: tl.constexpr):
    """One program per tile. tile row: (group, m0, n0, class); table row: (a, b, c, sfa, sfb, M, N, K)."""
    t = tl.program_id(0)
    g = tl.load(tile_ptr + t * 4)
    m0 = tl.load(tile_ptr + t * 4 + 1)
    n0 = tl.load(tile_ptr + t * 4 + 2)
    cls = tl.load(tile_ptr + t * 4 + 3)
    row = tab_ptr + g * 8
    # The host checked: every pointer 16-byte aligned, K a multiple of 64 (so K/2 rows are 32-byte aligned).
    a_ptr = tl.multiple_of(tl.load(row).to(tl.pointer_type(tl.uint8)), 16)
    b_ptr = tl.multiple_of(tl.load(row + 1).to(tl.pointer_type(tl.uint8)), 16)
    c_ptr = tl.multiple_of(tl.load(row + 2).to(tl.pointer_type(tl.float16)), 16)
    sfa_ptr = tl.multiple_of(tl.load(row + 3).to(tl.pointer_type(tl.uint8)), 16)
    sfb_ptr = tl.multiple_of(tl.load(row + 4).to(tl.pointer_type(tl.uint8)), 16)
    M = tl.load(row + 5).to(tl.int32)
    N = tl.load(row + 6).to(tl.int32)
    K = tl.multiple_of(tl.load(row + 7).to(tl.int32), 64)
    if cls == 0:
        _tile(a_ptr, b_ptr, c_ptr, sfa_ptr, sfb_ptr, M, N, K, m0, n0, acc_scale, BM0, BN0, BK, DECODE, JOIN)
    elif cls == 1:
        _tile(a_ptr, b_ptr, c_ptr, sfa_ptr, sfb_ptr, M, N, K, m0, n0, acc_scale, BM1, BN1, BK, DECODE, JOIN)
    else:
        _tile(a_ptr, b_ptr, c_ptr, sfa_ptr, sfb_ptr, M, N, K, m0, n0, acc_scale, BM2, BN2, BK, DECODE, JOIN)


# ----------------------------------------------------------------------------------------------------------
# Host side: validation, plans (cached), launch
# ----------------------------------------------------------------------------------------------------------


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _expect(cond: bool, what: str, expected, got) -> None:
    if not cond:
        raise ValueError(f"triton_grouped: {what}: expected {expected}, got {got}")


def _blocked_view_ok(sf: torch.Tensor, rows: int, k: int) -> None:
    rest_mn, rest_k = -(-rows // _ATOM_ROWS), k // 64
    shape = (32, 4, rest_mn, 4, rest_k, 1)
    _expect(tuple(sf.shape) == shape, "blocked scale shape [32, 4, ceil(rows/128), 4, K/64, 1]", shape,
            tuple(sf.shape))
    strides = (16, 4, rest_k * _ATOM_BYTES, 1, _ATOM_BYTES)
    _expect(tuple(sf.stride())[:5] == strides, "blocked scale strides (storage (L, rest_mn, rest_k, 32, 4, 4))",
            strides, tuple(sf.stride())[:5])
    _expect(sf.dtype in (torch.float8_e4m3fn, torch.uint8), "scale dtype", "float8_e4m3fn", sf.dtype)


def validate(data: input_t) -> None:
    """Raise ValueError (naming expected vs got) for anything this kernel cannot do."""
    _expect(isinstance(data, (tuple, list)) and len(data) == 4, "input_t", "a 4-tuple", type(data).__name__)
    abc, _, sf_r, sizes = data
    g = len(sizes)
    _expect(g >= 1, "group count", ">= 1", g)
    _expect(len(abc) == g and len(sf_r) == g, "entries per group list", g, (len(abc), len(sf_r)))
    dev = abc[0][0].device
    for i, ((a, b, c), (sfa, sfb), size) in enumerate(zip(abc, sf_r, sizes)):
        _expect(len(size) == 4, f"group {i} problem size", "(M, N, K, L)", size)
        m, n, k, l = size
        _expect(l == 1, f"group {i} L", 1, l)
        _expect(m >= 1 and n >= 1, f"group {i} M, N", ">= 1", (m, n))
        _expect(k % 64 == 0 and k >= 64, f"group {i} K", "a positive multiple of 64", k)
        _expect(m * (k // 2) < 2**31 and n * (k // 2) < 2**31 and m * n < 2**31, f"group {i} sizes",
                "each operand under 2^31 elements", (m, n, k))
        for name, t, rows, cols, dt in (("a", a, m, k // 2, (torch.float4_e2m1fn_x2, torch.uint8)),
                                        ("b", b, n, k // 2, (torch.float4_e2m1fn_x2, torch.uint8)),
                                        ("c", c, m, n, (torch.float16,))):
            _expect(t.dtype in dt, f"group {i} {name} dtype", dt[0], t.dtype)
            _expect(tuple(t.shape) == (rows, cols, 1), f"group {i} {name} shape", (rows, cols, 1),
                    tuple(t.shape))
            _expect(tuple(t.stride())[:2] == (cols, 1), f"group {i} {name} strides (row-major)", (cols, 1),
                    tuple(t.stride())[:2])
            _expect(t.device == dev, f"group {i} {name} device", dev, t.device)
            _expect(t.data_ptr() % 16 == 0, f"group {i} {name} address", "16-byte aligned", hex(t.data_ptr()))
        _blocked_view_ok(sfa, m, k)
        _blocked_view_ok(sfb, n, k)
        _expect(sfa.data_ptr() % 16 == 0 and sfb.data_ptr() % 16 == 0, f"group {i} reordered scale addresses",
                "16-byte aligned", (hex(sfa.data_ptr()), hex(sfb.data_ptr())))
        _expect(sfa.device == dev and sfb.device == dev, f"group {i} reordered scales device", dev,
                (sfa.device, sfb.device))


def _pick_bk(cfg: Config, ks) -> int:
    bk = cfg.bk
    while any(k % bk for k in ks):
        bk //= 2
    return bk


def plan_tiles(sizes, cfg: Config) -> list[tuple[int, int, int, int]]:
    """Tiles (group, m0, n0, class), most expensive first. Each group's M is covered by the smallest class
    that holds what is left, taking the largest class while more than it remains."""
    classes = cfg.classes
    tiles = []
    for g, (m, n, k, _) in enumerate(sizes):
        m0 = 0
        while m0 < m:
            rem = m - m0
            ci = next((i for i, c in enumerate(classes) if c.bm >= rem), len(classes) - 1)
            cl = classes[ci]
            for n0 in range(0, n, cl.bn):
                cost = k * (cl.bm + 64) * min(cl.bn, n - n0)
                tiles.append((cost, g, m0, n0, ci))
            m0 += cl.bm
    tiles.sort(key=lambda t: -t[0])
    return [t[1:] for t in tiles]


class _Plans:
    """Device tables cached by what they depend on: tiles by (sizes, config); pointers by (pointers, sizes)."""

    MAX_ENTRIES = 64

    def __init__(self) -> None:
        self.tiles: dict = {}
        self.tables: dict = {}

    def tile_table(self, sizes, cfg: Config, dev) -> tuple[torch.Tensor, int]:
        key = (sizes, cfg, dev)
        hit = self.tiles.get(key)
        if hit is None:
            tiles = plan_tiles(sizes, cfg)
            hit = (torch.tensor(tiles, dtype=torch.int32, device=dev).reshape(-1), len(tiles))
            if len(self.tiles) >= self.MAX_ENTRIES:
                self.tiles.clear()
            self.tiles[key] = hit
        return hit

    def pointer_table(self, data: input_t, sizes) -> torch.Tensor:
        abc, _, sf_r, _ = data
        ptrs = tuple((a.data_ptr(), b.data_ptr(), c.data_ptr(), sa.data_ptr(), sb.data_ptr())
                     for (a, b, c), (sa, sb) in zip(abc, sf_r))
        key = (ptrs, sizes)
        hit = self.tables.get(key)
        if hit is None:
            validate(data)
            rows = [list(p) + [m, n, k] for p, (m, n, k, _) in zip(ptrs, sizes)]
            hit = torch.tensor(rows, dtype=torch.int64).to(abc[0][0].device, non_blocking=False)
            if len(self.tables) >= self.MAX_ENTRIES:
                self.tables.clear()
            self.tables[key] = hit
        return hit


_PLANS = _Plans()


def grouped_gemm(data: input_t, cfg: Config = DEFAULT_CONFIG) -> output_t:
    """Compute every group's C into its ``c`` buffer with one kernel launch; returns the list of ``c``."""
    abc, _, _, sizes = data
    sizes = tuple(tuple(s) for s in sizes)
    tab = _PLANS.pointer_table(data, sizes)
    dev = abc[0][0].device
    interp = _interpreting()
    if dev.type != "cuda" and not interp:
        raise ValueError(f"triton_grouped: device: expected cuda (or TRITON_INTERPRET=1), got {dev}")
    decode = "pure" if interp else cfg.decode
    bk = _pick_bk(cfg, [s[2] for s in sizes])
    tiles, n_tiles = _PLANS.tile_table(sizes, cfg, dev)
    c0, c1, c2 = cfg.classes
    acc_scale = _BF16_ACC_SCALE if decode == "bf16" else 1.0
    _group_gemm_kernel[(n_tiles,)](tab, tiles, acc_scale, c0.bm, c0.bn, c1.bm, c1.bn, c2.bm, c2.bn, bk, decode,
                                   cfg.join, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return [c for (_, _, c) in abc]


def custom_kernel(data: input_t) -> output_t:
    return grouped_gemm(data)
