#!POPCORN leaderboard nvfp4_dual_gemm
#!POPCORN gpu H200
#!FP4BENCH requires sm_90
"""nvfp4_dual_gemm for Hopper in Triton: C = silu(A B1^T) * (A B2^T), e2m1 and e4m3fn decoded in registers,
fp16 tensor-core dots, fp32 sums, the SiLU and product in fp32 before one rounding to fp16.

Each program computes a BM x BN tile of C for one batch: per K step it decodes its A tile once and the B1 and B2
tiles (BKB bytes a row, one e4m3fn scale per 8 bytes; each nibble becomes an fp16 value times its scale, exact:
at most 6 significant bits, within [2^-10, 2688]) and issues two dots per product, low nibbles with low, high
with high (the same permutation of K on both sides). Two fp32 accumulators, one per product.
"""
import torch
import triton
import triton.language as tl

from task import input_t, output_t

#: Tile: BM rows of A by BN rows of B1 and B2 (two accumulators), BKB bytes (2 * BKB values) of K per step.
BM, BN, BKB = 128, 64, 32
NUM_WARPS, NUM_STAGES = 8, 3


@triton.jit
def _decode(byte_ptrs, scale_ptrs, mask):
    """[R, BKB] bytes and their scales -> (low nibbles, high nibbles) as fp16 value * scale, exact."""
    u = tl.load(byte_ptrs, mask=mask, other=0).to(tl.int32)
    s = tl.load(scale_ptrs, mask=mask, other=0).to(tl.int32)
    # e4m3fn -> fp32: normal (e > 0) from its bits, subnormal m * 2^-9; times 2^14 to undo the nibbles' 2^-14.
    e = (s >> 3) & 0xF
    m = s & 0x7
    normal = ((s & 0x80) << 24) | ((e + 120) << 23) | (m << 20)
    scale = tl.where(e > 0, normal.to(tl.float32, bitcast=True),
                     tl.where((s & 0x80) != 0, -1.0, 1.0) * m.to(tl.float32) * 0.001953125) * 16384.0
    # a nibble's sign to bit 15, its 3 magnitude bits to bits 11..9: an fp16 pattern worth value * 2^-14.
    lo = ((u & 0x8) << 12) | ((u & 0x7) << 9)
    hi = ((u & 0x80) << 8) | ((u & 0x70) << 5)
    lo = lo.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * scale
    hi = hi.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * scale
    return lo.to(tl.float16), hi.to(tl.float16)


@triton.jit
def _dual(a_ptr, b1_ptr, b2_ptr, sfa_ptr, sfb1_ptr, sfb2_ptr, c_ptr, M, N, KB,
          sa_m, sa_k, sa_l, sb_n, sb_k, sb_l, ssa_m, ssa_k, ssa_l, ssb_n, ssb_k, ssb_l, sc_m, sc_n, sc_l,
          BM: tl.constexpr, BN: tl.constexpr, BKB: tl.constexpr):
    pid_m, pid_n, batch = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    kb = tl.arange(0, BKB)
    mask_m, mask_n = (rm < M)[:, None], (rn < N)[:, None]
    a_rows = a_ptr + batch * sa_l + rm[:, None] * sa_m
    sfa_rows = sfa_ptr + batch * ssa_l + rm[:, None] * ssa_m
    b_off = batch * sb_l + rn[:, None] * sb_n
    sfb_off = batch * ssb_l + rn[:, None] * ssb_n
    acc1 = tl.zeros((BM, BN), dtype=tl.float32)
    acc2 = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, KB, BKB):
        kk = (k0 + kb)[None, :]
        a_lo, a_hi = _decode(a_rows + kk * sa_k, sfa_rows + (kk // 8) * ssa_k, mask_m)
        b_lo, b_hi = _decode(b1_ptr + b_off + kk * sb_k, sfb1_ptr + sfb_off + (kk // 8) * ssb_k, mask_n)
        acc1 = tl.dot(a_lo, tl.trans(b_lo), acc1)
        acc1 = tl.dot(a_hi, tl.trans(b_hi), acc1)
        b_lo, b_hi = _decode(b2_ptr + b_off + kk * sb_k, sfb2_ptr + sfb_off + (kk // 8) * ssb_k, mask_n)
        acc2 = tl.dot(a_lo, tl.trans(b_lo), acc2)
        acc2 = tl.dot(a_hi, tl.trans(b_hi), acc2)
    out = acc1 / (1.0 + tl.exp(-acc1)) * acc2
    c_ptrs = c_ptr + batch * sc_l + rm[:, None] * sc_m + rn[None, :] * sc_n
    tl.store(c_ptrs, out.to(tl.float16), mask=mask_m & (rn < N)[None, :])


def custom_kernel(data: input_t) -> output_t:
    a, b1, b2, sfa, sfb1, sfb2, _pa, _pb1, _pb2, c = data
    m, kb, l = a.shape
    n = b1.shape[0]
    if kb % BKB:
        raise ValueError(f"K must be a multiple of {2 * BKB}, got {2 * kb}")
    if b1.stride() != b2.stride() or sfb1.stride() != sfb2.stride():
        raise ValueError("b1 and b2 (and their scales) must share one layout")
    a8, b18, b28 = a.view(torch.uint8), b1.view(torch.uint8), b2.view(torch.uint8)
    sa, sb1, sb2 = sfa.view(torch.uint8), sfb1.view(torch.uint8), sfb2.view(torch.uint8)
    grid = (triton.cdiv(m, BM), triton.cdiv(n, BN), l)
    _dual[grid](a8, b18, b28, sa, sb1, sb2, c, m, n, kb, *a8.stride(), *b18.stride(), *sa.stride(), *sb1.stride(),
                *c.stride(), BM=BM, BN=BN, BKB=BKB, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return c
