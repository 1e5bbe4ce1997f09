#!POPCORN leaderboard nvfp4_gemv
#!POPCORN gpu H200
#!FP4BENCH requires sm_90
"""nvfp4_gemv for Hopper in Triton: e2m1 and e4m3fn decoded in registers, fp32 multiply-adds (no tensor cores:
one output column), one rounding to fp16.

Each program computes BM outputs of one batch: per K step it loads BKB bytes of each of its rows of A and of
the vector (row 0 of ``b``) with their plain scales (one e4m3fn per 8 bytes), decodes each nibble to its value
times its scale in fp32 (exact), multiplies low nibbles with low and high with high, and sums along K in fp32.
"""
import torch
import triton
import triton.language as tl

from task import input_t, output_t

#: BM rows of A per program, BKB bytes (2 * BKB values) of K per step.
BM, BKB = 32, 128
NUM_WARPS, NUM_STAGES = 4, 3


@triton.jit
def _decode(byte_ptrs, scale_ptrs, mask):
    """[R, BKB] bytes and their scales -> (low nibbles, high nibbles) as fp32 value * scale, exact."""
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
    return lo, hi


@triton.jit
def _gemv(a_ptr, b_ptr, sfa_ptr, sfb_ptr, c_ptr, M, KB,
          sa_m, sa_k, sa_l, sb_k, sb_l, ssa_m, ssa_k, ssa_l, ssb_k, ssb_l, sc_m, sc_l,
          BM: tl.constexpr, BKB: tl.constexpr):
    pid_m, batch = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    kb = tl.arange(0, BKB)
    mask_m = (rm < M)[:, None]
    a_rows = a_ptr + batch * sa_l + rm[:, None] * sa_m
    sfa_rows = sfa_ptr + batch * ssa_l + rm[:, None] * ssa_m
    acc = tl.zeros((BM,), dtype=tl.float32)
    for k0 in range(0, KB, BKB):
        kk = (k0 + kb)[None, :]
        a_lo, a_hi = _decode(a_rows + kk * sa_k, sfa_rows + (kk // 8) * ssa_k, mask_m)
        v_lo, v_hi = _decode(b_ptr + batch * sb_l + kk * sb_k, sfb_ptr + batch * ssb_l + (kk // 8) * ssb_k,
                             kk >= 0)
        acc += tl.sum(a_lo * v_lo + a_hi * v_hi, axis=1)
    tl.store(c_ptr + batch * sc_l + rm * sc_m, acc.to(tl.float16), mask=rm < M)


def custom_kernel(data: input_t) -> output_t:
    a, b, sfa, sfb, _sfa_p, _sfb_p, c = data
    m, kb, l = a.shape
    if kb % BKB:
        block = 64
        while kb % block:
            block //= 2
        bkb = block
    else:
        bkb = BKB
    a8, b8 = a.view(torch.uint8), b.view(torch.uint8)
    sa, sb = sfa.view(torch.uint8), sfb.view(torch.uint8)
    grid = (triton.cdiv(m, BM), l)
    _gemv[grid](a8, b8, sa, sb, c, m, kb, *a8.stride(), b8.stride(1), b8.stride(2), *sa.stride(), sb.stride(1),
                sb.stride(2), c.stride(0), c.stride(2), BM=BM, BKB=bkb, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return c
