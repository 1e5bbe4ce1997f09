// NVFP4 grouped GEMM for Hopper (sm_90a): e2m1/e4m3fn decoded in registers, wgmma with fp32 accumulation (or, for
// scales of 1 and 2, int8 operands and int32 sums: the int8 path, run_tile_s8).
//
// Each CTA computes one tile of C_g^T: BN = 128 rows of N (two warpgroups of 64, the wgmma's M side, operand A
// in registers) by BM columns of the group's M (the wgmma's N side, operand B in shared memory). README.md beside
// this file gives the algorithm; the comments here say only what the code cannot.
#include <stdint.h>

#include <type_traits>

namespace {

constexpr int MAX_GROUPS = 16;
constexpr int BN = 128;           // rows of N per CTA: two warpgroups of 64
constexpr int THREADS = 256;      // one pipeline; a paired CTA (single-wave grids) runs two, 512 threads
constexpr int BK = 64;            // K per step: 32 bytes of e2m1 per row, 4 scale columns (one per thread quad lane)
constexpr int ROW_BYTES = BK / 2;
#ifndef WG_STAGES
#define WG_STAGES 4
#endif
constexpr int STAGES = WG_STAGES; // raw (e2m1 + e4m3fn) shared-memory ring depth
constexpr int BM_MAX = 128;

// Shared memory (offsets from a 1024-byte aligned base): DEC_BUFS decoded A buffers (BM_MAX rows x 128 bytes,
// 128-byte swizzle, the wgmma B operand), then the raw ring. Three buffers let step s + 1 be decoded while step s's
// wgmma reads one and step s - 1's may still read another, with one CTA barrier per step.
constexpr int DEC_BUFS = 3;
constexpr int DEC_BYTES = BM_MAX * BK * 2;
constexpr int RAW_B = 0;                                  // BN rows x 32 bytes
constexpr int RAW_A = RAW_B + BN * ROW_BYTES;             // BM_MAX rows x 32 bytes
constexpr int RAW_SFB = RAW_A + BM_MAX * ROW_BYTES;       // B's blocked 32x4x4 atom: 128 rows x 4 scales
constexpr int RAW_SFA = RAW_SFB + 512;                    // A's two atoms from m0 / 128 (a tile may straddle two)
constexpr int STAGE_BYTES = RAW_SFA + 1024;
constexpr int SMEM_BYTES = DEC_BUFS * DEC_BYTES + STAGES * STAGE_BYTES;
static_assert(SMEM_BYTES + 1024 <= 113 * 1024, "two CTAs per SM (228 KB, 1 KB reserved per CTA)");
static_assert(SMEM_BYTES % 1024 == 0, "a paired CTA's second pipeline starts 1024-byte aligned");
static_assert(THREADS * BM_MAX / 2 * 4 <= SMEM_BYTES, "a pipeline's fp32 sums fit in its shared memory");

// Predecoded A (Params::predecode): the pre-pass kernel fp4_predecode_a writes each group's A, decoded, into a global
// fp16 scratch laid out per (K step, row) as the decoded buffer's exact image (128 bytes a row, 128-byte swizzle by
// row & 7; tiles start at multiples of 32 rows, so a tile's step is one contiguous block). The main loop copies that
// block into a ring of PRE_ABUFS buffers, PRE_AHEAD steps ahead: step s + PRE_AHEAD goes into the buffer of step
// s - 2, which every warpgroup's wgmma finished before the previous barrier. The raw ring then holds B and its scales.
constexpr int PRE_AHEAD = STAGES - 1;                 // so cp_async_wait<STAGES - 2> at step s lands A of step s + 1
constexpr int PRE_ABUFS = PRE_AHEAD + 2;
constexpr int PRE_SFB = BN * ROW_BYTES;               // B's scale atom after its rows
constexpr int PRE_STAGE_BYTES = PRE_SFB + 512;
constexpr int PRE_SMEM_BYTES = PRE_ABUFS * DEC_BYTES + STAGES * PRE_STAGE_BYTES;
#ifndef WG_PRE_THREADS
#define WG_PRE_THREADS 256
#endif
constexpr int PRE_THREADS = WG_PRE_THREADS;           // the pre-pass: one thread per (K step, row)
static_assert(PRE_THREADS % 32 == 0 && PRE_THREADS >= 32 && PRE_THREADS <= 256, "whole warps, 32 KB of rows at most");
static_assert(PRE_SMEM_BYTES + 1024 <= 113 * 1024, "two CTAs per SM");
static_assert(PRE_SMEM_BYTES % 1024 == 0, "a paired CTA's second pipeline starts 1024-byte aligned");
static_assert(THREADS * BM_MAX / 2 * 4 <= PRE_SMEM_BYTES, "a pipeline's fp32 sums fit in its shared memory");

template <bool PRE>
constexpr int SMEM_OF = PRE ? PRE_SMEM_BYTES : SMEM_BYTES;  // a pipeline's shared memory

// The int8 path (S8, issue 19): A predecoded to int8 (2 x value x scale), BK bytes a row per K step, 64-byte
// swizzled; B decoded to int8 in registers; wgmma .s32.s8.s8 (k32). It runs in the raw path's shared memory, where
// its fp16 fallback (a tile whose scales are not all 1 or 2) runs the raw loop: PRE_ABUFS A buffers of BM_MAX x BK
// bytes, then STAGES raw slots of B as in the predecoded path.
// S8_STAGES: its B ring depth (A copied S8_STAGES - 1 steps ahead into S8_STAGES + 1 buffers), -DWG_S8_STAGES.
#ifndef WG_S8_STAGES
#define WG_S8_STAGES 4
#endif
constexpr int S8_STAGES = WG_S8_STAGES;
constexpr int S8_ROW_BYTES = BK;
constexpr int S8_ABUF_BYTES = BM_MAX * S8_ROW_BYTES;
static_assert((S8_STAGES + 1) * S8_ABUF_BYTES + S8_STAGES * PRE_STAGE_BYTES <= SMEM_BYTES, "the int8 pipeline fits");
// The int8 loop with one barrier per two K steps (s8_pair_loop, for BM < 128 in CTAs of one pipeline; -DWG_S8_PAIRS=0
// leaves it out): B in S8P_SLOTS raw slots, A copied S8P_AHEAD steps ahead into S8P_ABUFS buffers. S8_REGION: a
// pipeline's shared memory on the int8 path.
#ifndef WG_S8_PAIRS
#define WG_S8_PAIRS 1
#endif
constexpr int S8P_SLOTS = 6, S8P_AHEAD = 4, S8P_ABUFS = 8;
static_assert(S8P_ABUFS == S8P_AHEAD + 4 && S8P_SLOTS == 6, "s8_pair_loop's schedule (its comment)");
constexpr int S8P_SMEM_BYTES = S8P_ABUFS * S8_ABUF_BYTES + S8P_SLOTS * PRE_STAGE_BYTES;
constexpr int S8_REGION = WG_S8_PAIRS && S8P_SMEM_BYTES > SMEM_BYTES ? S8P_SMEM_BYTES : SMEM_BYTES;
static_assert(S8_REGION % 1024 == 0 && S8_REGION + 1024 <= 113 * 1024, "two CTAs per SM, pipelines 1 KB aligned");

}  // namespace

// Kernel parameters (by value). addr: a, b, c, sfa, sfb of group g at [kind * MAX_GROUPS + g]. tiles: two int4 per
// CTA, (group, m0, n0, bm) and (first K step, K steps, the split slot's first partial or -1, part | parts << 8). ws:
// fp32 partials of BN x BM_MAX, a slot of P parts owning P consecutive ones; cnt: one counter per partial (a slot
// uses its first partial's), zero between launches. mpad: the rows of group g's tiles (the sum of its tile widths);
// predecode: nonzero when A comes from the pre-pass's scratch, group g's at pre[g] (mpad x 128 bytes per K step; the
// int8 path's mpad x 64). flags, epoch (the int8 path): the int8 pre-pass sets flags[g] = epoch when a scale of
// group g's A is not 1 or 2, and the main kernel then runs the fp16 fallback on the group's tiles; the host counts
// epoch up per call, so no flag needs clearing. The host mirrors this layout (wgmma_sm90_host.Params, tile_table).
struct Params {
  uint64_t addr[5 * MAX_GROUPS];
  const int4* tiles;
  float* ws;
  int* cnt;
  int m[MAX_GROUPS];
  int n[MAX_GROUPS];
  int k[MAX_GROUPS];
  int mpad[MAX_GROUPS];
  int predecode;
  uint64_t pre[MAX_GROUPS];
  int* flags;
  int epoch;
};

// Diagnostics (bench.py --trace, a -DWG_TRACE build): thread 0 of each CTA records %globaltimer (ns) at the
// kernel's entry (0), the main loop's start (1) and end (2), after its stores (3), and its SM (4).
#ifdef WG_TRACE
__device__ unsigned long long wg_trace[4096 * 5];
__device__ __forceinline__ void wg_mark(int i) {
  if (threadIdx.x != 0 || blockIdx.x >= 4096) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  wg_trace[blockIdx.x * 5 + i] = t;
  if (i == 0) {
    unsigned sm;
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    wg_trace[blockIdx.x * 5 + 4] = sm;
  }
}
#else
__device__ __forceinline__ void wg_mark(int) {}
#endif

namespace {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A 16-byte cp.async (L2 only) when `on`, reading `bytes` of them (0: zero-fill, no read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t bytes, uint32_t on) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n@p cp.async.cg.shared.global [%0], [%1], 16, %2;\n}\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(on));
}

// A 16-byte cp.async (L2 only), always issued, OFF bytes past both addresses (an immediate in the instruction; LDGSTS
// takes global offsets in -2048..2047, larger ones cost two integer ops per copy on the 64-bit source).
template <int OFF = 0>
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0+%2], [%1+%2], 16;\n" ::"r"(dst), "l"(src), "n"(OFF));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R>
__device__ __forceinline__ void fence_regs(int (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// a * (the low (H = 0) or high (H = 1) half of s, in both halves): the half is broadcast by the multiply's operand
// selector (HMUL2 R, R, R.H0_H0 / .H1_H1), no instruction of its own.
template <int H>
__device__ __forceinline__ uint32_t hmul2_half(uint32_t a, uint32_t s) {
  uint32_t d;
  if constexpr (H == 0) {
    asm("{\n.reg .b16 l, h;\n.reg .b32 t;\nmov.b32 {l, h}, %2;\nmov.b32 t, {l, l};\nmul.rn.f16x2 %0, %1, t;\n}\n"
        : "=r"(d) : "r"(a), "r"(s));
  } else {
    asm("{\n.reg .b16 l, h;\n.reg .b32 t;\nmov.b32 {l, h}, %2;\nmov.b32 t, {h, h};\nmul.rn.f16x2 %0, %1, t;\n}\n"
        : "=r"(d) : "r"(a), "r"(s));
  }
  return d;
}

// Two e4m3fn scales (the low two bytes of `code`, low byte first) as an f16x2 (s0, s1); exact (e4m3fn values are
// fp16 values). A zero high byte gives s1 = 0, unused.
__device__ __forceinline__ uint32_t scales_f16x2(uint32_t code) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(static_cast<uint16_t>(code)));
  return h;
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(d) : "r"(a), "r"(sel));
  return d;
}

// Each byte of w: its high nibble (sign, 3 magnitude bits) -> sign at bit 7, magnitude at bits 3..1: the high
// byte of an fp16 pattern worth the e2m1 value times 2^-14 (code 1, the e2m1 subnormal 0.5, is the fp16
// subnormal 2^-15).
__device__ __forceinline__ uint32_t high_bytes(uint32_t w) { return (w & 0x80808080u) | ((w >> 3) & 0x0E0E0E0Eu); }

// A 32-bit word of e2m1 nibbles n0..n7 (n0 in bits 3..0) -> four f16x2 registers, (n0, n4), (n2, n6), (n1, n5),
// (n3, n7), each times half H of s2 (both halves of each pair): one prmt places two pattern bytes as the high bytes
// of a pair. With that half the scale, every product is value * scale * 2^-14, exact in fp16 (at most 6 significant
// bits, a multiple of 2^-24); the epilogue multiplies the fp32 sum by 2^28. A and B decode the same bytes with the
// same function, so the nibble order is one K permutation shared by both operands. tests/variants/
// test_wgmma_sm90_decode.py emulates this bit for bit and mirrors these lines: change both together.
template <int H>
__device__ __forceinline__ void decode_word(uint32_t x, uint32_t s2, uint32_t (&out)[4]) {
  const uint32_t even = high_bytes(x << 4), odd = high_bytes(x);
  out[0] = hmul2_half<H>(prmt(even, 0x2404), s2);
  out[1] = hmul2_half<H>(prmt(even, 0x3414), s2);
  out[2] = hmul2_half<H>(prmt(odd, 0x2404), s2);
  out[3] = hmul2_half<H>(prmt(odd, 0x3414), s2);
}

// The int8 decode (S8). Official data has scales 1 and 2 only (e4m3fn 0x38, 0x40), so 2 x value x scale is an
// integer in -24..24 for every e2m1 code, and the int32 sums of their products are exact; C = sum / 4.
// s8_tables: the 8-byte table of 2 x |value| x scale for magnitude codes 0..7 (0, 1, 2, 3, 4, 6, 8, 12, shifted
// left by log2 of the scale) for scale byte `s`, and `bad` gains a nonzero bit unless s is 0x38 or 0x40
// (sh = s >> 6 is 0 or 1 exactly for those; every other byte differs from 0x38 + 8 sh).
__device__ __forceinline__ void s8_tables(uint32_t s, uint32_t& t0, uint32_t& t1, uint32_t& bad) {
  const uint32_t sh = s >> 6;
  bad |= s ^ (0x38u + (sh << 3));
  t0 = 0x03020100u << sh;
  t1 = 0x0C080604u << sh;
}

__device__ __forceinline__ uint32_t prmt2(uint32_t lo, uint32_t hi, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(lo), "r"(hi), "r"(sel));
  return d;
}

// Four nibbles (the low 16 bits of x; xn = x ^ 0x88888888) -> four int8, nibble i in byte i. prmt's selector is
// the nibble itself: bits 2..0 pick the table byte, bit 3 (the sign) replicates that byte's sign bit, 0 here. So
// pos holds the positive codes' magnitudes (0 for negative ones) and neg, from the flipped signs, the negative
// codes'; 0x80 + pos - neg per byte cannot borrow (|pos - neg| <= 24), and xor 0x80 makes it two's complement.
__device__ __forceinline__ uint32_t s8_quad(uint32_t x, uint32_t xn, uint32_t t0, uint32_t t1) {
  const uint32_t pos = prmt2(t0, t1, x), neg = prmt2(t0, t1, xn);
  return ((pos + 0x80808080u) - neg) ^ 0x80808080u;
}

// A word of 8 nibbles -> (lo: nibbles 0..3, hi: nibbles 4..7), K order unchanged. tests/variants/
// test_wgmma_sm90_decode.py emulates this bit for bit: change both together.
__device__ __forceinline__ void s8_word(uint32_t x, uint32_t t0, uint32_t t1, uint32_t& lo, uint32_t& hi) {
  const uint32_t xn = x ^ 0x88888888u;
  lo = s8_quad(x, xn, t0, t1);
  hi = s8_quad(x >> 16, xn >> 16, t0, t1);
}

// Descriptor of a K-major operand with 64-byte swizzle (the int8 A buffers): rows of 64 bytes, 8-row groups 512
// bytes apart; 16-byte chunk c of row r sits at chunk c ^ ((r >> 1) & 3).
__device__ __forceinline__ uint64_t sw64_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr >> 4) | (1u << 16)) | (static_cast<uint64_t>(512 >> 4) << 32) | (2ull << 62);
}

// Descriptor of a K-major operand with 128-byte swizzle: rows of 128 bytes, 8-row groups 1024 bytes apart. `addr` is
// a shared-window address, below 2^18 (228 KB), so its 14-bit field needs no mask.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr >> 4) | (1u << 16)) | (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

__device__ __forceinline__ void wgmma_m64n96k16(float (&d)[48], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
      "{%48, %49, %50, %51}, %52, 1, 1, 1, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, 1, 1, 1, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

#define WG_ACC16(o) "+r"(d[o + 0]), "+r"(d[o + 1]), "+r"(d[o + 2]), "+r"(d[o + 3]), "+r"(d[o + 4]), \
    "+r"(d[o + 5]), "+r"(d[o + 6]), "+r"(d[o + 7]), "+r"(d[o + 8]), "+r"(d[o + 9]), "+r"(d[o + 10]), "+r"(d[o + 11]), \
    "+r"(d[o + 12]), "+r"(d[o + 13]), "+r"(d[o + 14]), "+r"(d[o + 15])
#define WG_R8(a, b, c, e, f, g, h, i) "%" #a ", %" #b ", %" #c ", %" #e ", %" #f ", %" #g ", %" #h ", %" #i

__device__ __forceinline__ void wgmma_s8_m64n64k32(int (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
               "{" WG_R8(0, 1, 2, 3, 4, 5, 6, 7) ", " WG_R8(8, 9, 10, 11, 12, 13, 14, 15) ", "
               WG_R8(16, 17, 18, 19, 20, 21, 22, 23) ", " WG_R8(24, 25, 26, 27, 28, 29, 30, 31) "}, "
               "{%32, %33, %34, %35}, %36, 1;"
               : WG_ACC16(0), WG_ACC16(16)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

__device__ __forceinline__ void wgmma_s8_m64n96k32(int (&d)[48], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n96k32.s32.s8.s8 "
               "{" WG_R8(0, 1, 2, 3, 4, 5, 6, 7) ", " WG_R8(8, 9, 10, 11, 12, 13, 14, 15) ", "
               WG_R8(16, 17, 18, 19, 20, 21, 22, 23) ", " WG_R8(24, 25, 26, 27, 28, 29, 30, 31) ", "
               WG_R8(32, 33, 34, 35, 36, 37, 38, 39) ", " WG_R8(40, 41, 42, 43, 44, 45, 46, 47) "}, "
               "{%48, %49, %50, %51}, %52, 1;"
               : WG_ACC16(0), WG_ACC16(16), WG_ACC16(32)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

__device__ __forceinline__ void wgmma_s8_m64n128k32(int (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
               "{" WG_R8(0, 1, 2, 3, 4, 5, 6, 7) ", " WG_R8(8, 9, 10, 11, 12, 13, 14, 15) ", "
               WG_R8(16, 17, 18, 19, 20, 21, 22, 23) ", " WG_R8(24, 25, 26, 27, 28, 29, 30, 31) ", "
               WG_R8(32, 33, 34, 35, 36, 37, 38, 39) ", " WG_R8(40, 41, 42, 43, 44, 45, 46, 47) ", "
               WG_R8(48, 49, 50, 51, 52, 53, 54, 55) ", " WG_R8(56, 57, 58, 59, 60, 61, 62, 63) "}, "
               "{%64, %65, %66, %67}, %68, 1;"
               : WG_ACC16(0), WG_ACC16(16), WG_ACC16(32), WG_ACC16(48)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

// One wgmma of width BM: fp16 k16 with fp32 sums (float accumulators) or int8 k32 with int32 sums (int ones).
template <int BM, typename T>
__device__ __forceinline__ void wgmma_step(T (&d)[BM / 2], const uint32_t (&a)[4], uint64_t desc) {
  constexpr bool S8 = std::is_same_v<T, int>;
  if constexpr (BM == 128) {
    if constexpr (S8) wgmma_s8_m64n128k32(d, a, desc); else wgmma_m64n128k16(d, a, desc);
  } else if constexpr (BM == 96) {
    if constexpr (S8) wgmma_s8_m64n96k32(d, a, desc); else wgmma_m64n96k16(d, a, desc);
  } else {
    if constexpr (S8) wgmma_s8_m64n64k32(d, a, desc); else wgmma_m64n64k16(d, a, desc);
  }
}

// The int8 entry's griddepcontrol.wait (see s8_begin): in its loops' prologues, after B's first copies.
__device__ __forceinline__ void s8_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

struct Tile {
  const uint8_t* a;    // M x K/2 bytes
  const uint8_t* b;    // N x K/2 bytes
  const uint8_t* sfa;  // blocked 32x4x4 scales of A
  const uint8_t* sfb;
  uint16_t* c;         // M x N fp16
  float* ws;           // split-K partials of this tile's slot (parts x BN x BM_MAX), or null
  int* cnt;            // the slot's arrival counter
  const uint8_t* pre;  // predecoded A of the group (Params::pre), or null
  int M, N, K, m0, n0, k0, steps, part, parts, mpad;
};

// PAIRED (a template parameter below): the CTA has 2 x THREADS threads and runs two pipelines (see run_tile).

// This thread's index in its pipeline.
template <bool PAIRED>
__device__ __forceinline__ int pipe_tid() {
  return PAIRED ? threadIdx.x % THREADS : threadIdx.x;
}

// pipe_tid from a fresh read of %tid.x (asm volatile, so not merged with earlier reads): what is derived from it after
// the main loop is recomputed there instead of held in registers across the loop (where it was spilled).
template <bool PAIRED>
__device__ __forceinline__ int pipe_tid_again() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return PAIRED ? t % THREADS : t;
}

// A barrier over this thread's pipeline only (in a paired CTA, named barrier 1 or 2 of THREADS threads: the two
// pipelines run unsynchronised).
template <bool PAIRED>
__device__ __forceinline__ void pipe_sync() {
  if (!PAIRED) {
    __syncthreads();
  } else if (threadIdx.x < THREADS) {
    asm volatile("bar.sync 1, %0;\n" ::"n"(THREADS) : "memory");
  } else {
    asm volatile("bar.sync 2, %0;\n" ::"n"(THREADS) : "memory");
  }
}

// A warp-specialised CTA (fp4_group_gemm_sm90_ws*): WS_PRODUCERS producer threads (warpgroups 0 and 1), then
// WS_CONSUMERS consumer threads (warpgroups 2 and 3). ws_tid: a consumer's index among the consumers (0..255, so
// warpgroup tid >> 7 computes rows 64 (tid >> 7).. of the tile, as a pipeline's warpgroups do); ws_sync: a barrier
// over the consumers only (named barrier 1; the producers may have left).
constexpr int WS_PRODUCERS = 256;
constexpr int WS_CONSUMERS = 256;
constexpr int WS_THREADS = WS_PRODUCERS + WS_CONSUMERS;
static_assert(WS_CONSUMERS == THREADS, "the consumers run the pipeline's epilogue (store_tile, split_k_last)");

__device__ __forceinline__ int ws_tid() { return static_cast<int>(threadIdx.x) - WS_PRODUCERS; }
__device__ __forceinline__ int ws_tid_again() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return static_cast<int>(t) - WS_PRODUCERS;
}
__device__ __forceinline__ void ws_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(WS_CONSUMERS) : "memory"); }

__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds16(uint32_t a) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds8(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ void sts64(uint32_t a, uint32_t x, uint32_t y) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(a), "r"(x), "r"(y));
}
__device__ __forceinline__ void sts32(uint32_t a, uint32_t x) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(x));
}

// This thread's share of every K step's copies, as running source pointers resolved once per tile: 16 bytes of a
// B row (every thread), 16 bytes of an A row (threads < 2 * BM), 16 bytes of B's or A's blocked scale atoms
// (threads < 96). Destinations are 16 * tid past each region's start. Rows past N read the last row, and atoms
// past the last read the last one: they feed only outputs that are never stored (row n of C^T depends on B row n
// alone). Rows past M (common: M is padded to a tile width) are zero-filled without a read; reading the last row
// for each measured 15 % slower on g8_n7168_k2048.
template <bool PAIRED>
struct Loader {
  const uint8_t* b_src;
  const uint8_t* a_src;
  const uint8_t* sf_src;
  uint32_t a_bytes;  // 16, or 0 for a row past M

  template <int BM>
  __device__ __forceinline__ void init(const Tile& t) {
    const int tid = pipe_tid<PAIRED>();
    const int row_bytes = t.K / 2;
    const int rest_k = t.K / 64;
    const int r = tid >> 1, h = tid & 1;
    const int kb = t.k0 * ROW_BYTES;
    b_src = t.b + (size_t)min(t.n0 + r, t.N - 1) * row_bytes + kb + 16 * h;
    a_bytes = t.m0 + r < t.M ? 16 : 0;
    a_src = t.a + (size_t)min(t.m0 + r, t.M - 1) * row_bytes + kb + 16 * h;
    if (tid < 32) {
      sf_src = t.sfb + ((size_t)(t.n0 >> 7) * rest_k + t.k0) * 512 + 16 * tid;
    } else {
      const int atom = min((t.m0 >> 7) + ((tid - 32) >> 5), (t.M - 1) >> 7);
      sf_src = t.sfa + ((size_t)atom * rest_k + t.k0) * 512 + 16 * (tid & 31);
    }
  }

  // Queue the next K step (steps are loaded in order) into the ring slot at shared address `slot`; tid: pipe_tid.
  template <int BM>
  __device__ __forceinline__ void load(uint32_t slot, int tid = pipe_tid<PAIRED>()) {
    const uint32_t dst = slot + 16 * tid;
    cp_async16(dst + RAW_B, b_src, 16, 1);
    cp_async16(dst + RAW_A, a_src, a_bytes, tid < 2 * BM);
    cp_async16(dst + RAW_SFB, sf_src, 16, tid < 96);
    b_src += ROW_BYTES;
    a_src += ROW_BYTES;
    sf_src += 512;
  }
};

// The predecoded path's copies (PRE): per K step 16 bytes of a B row (every thread) and of B's scale atom
// (threads < 32) into the raw ring, and A's step, BM rows x 128 bytes of the scratch, into an A buffer: warp w copies
// bytes [BM * 16 w, BM * 16 (w + 1)), 512 contiguous bytes per copy instruction, its lanes' copies 512 bytes apart
// (offsets that fit LDGSTS's immediate). Rows past N read the last row (as Loader).
// S8: A's step is BM rows x 64 bytes, thread tid copying 16-byte chunks tid and tid + THREADS (BM * 4 chunks).
template <bool PAIRED, bool S8 = false>
struct PreLoader {
  static constexpr int A_ROW = S8 ? S8_ROW_BYTES : 128;  // bytes of a predecoded row per K step
  const uint8_t* b_src;
  const uint8_t* sf_src;
  const uint8_t* a_src;
  uint32_t a_off;   // this thread's first byte in an A buffer
  uint32_t a_step;  // bytes of scratch per K step: mpad rows x A_ROW

  template <int BM>
  __device__ __forceinline__ void init(const Tile& t) {
    const int tid = pipe_tid<PAIRED>();
    const int r = tid >> 1, h = tid & 1;
    b_src = t.b + (size_t)min(t.n0 + r, t.N - 1) * (t.K / 2) + t.k0 * ROW_BYTES + 16 * h;
    sf_src = t.sfb + ((size_t)(t.n0 >> 7) * (t.K / 64) + t.k0) * 512 + 16 * (tid & 31);
    a_step = t.mpad * A_ROW;
    a_off = S8 ? 16 * tid : (tid >> 5) * BM * 16 + 16 * (tid & 31);
    a_src = t.pre + ((size_t)t.k0 * t.mpad + t.m0) * A_ROW + a_off;
  }

  // B's next K step into the raw ring slot at `slot`.
  __device__ __forceinline__ void load_b(uint32_t slot, int tid = pipe_tid<PAIRED>()) {
    const uint32_t dst = slot + 16 * tid;
#ifndef WG_SKIP_BCOPY
    cp_async16(dst, b_src);
#endif
    cp_async16(dst + PRE_SFB, sf_src, 16, tid < 32);
    b_src += ROW_BYTES;
    sf_src += 512;
  }

  // A's next K step into the A buffer at `buf`.
  template <int BM>
  __device__ __forceinline__ void load_a(uint32_t buf) {
    static_assert(BM == 64 || BM == 96 || BM == 128, "BM / 32 copies of 16 bytes a thread");
    const uint32_t dst = buf + a_off;
    if constexpr (S8) {
#ifndef WG_SKIP_ACOPY
      cp_async16<0>(dst, a_src);
      if constexpr (BM == 128) cp_async16<THREADS * 16>(dst, a_src);
      if constexpr (BM == 96) cp_async16(dst + THREADS * 16, a_src + THREADS * 16, 16, a_off < 2048);
#endif
      a_src += a_step;
      return;
    }
    cp_async16<0>(dst, a_src);
    cp_async16<512>(dst, a_src);
    if constexpr (BM >= 96) cp_async16<1024>(dst, a_src);
    if constexpr (BM == 128) cp_async16<1536>(dst, a_src);
    a_src += a_step;
  }
};

// A's decode: T threads per row (THREADS over BM rounded up to a power of two; threads past T * BM idle), thread q
// owning WORDS = 8 / T consecutive 32-bit words of the row's 32 bytes. Word w of the row is (t, wi) = (w / 2,
// w % 2): scale column t, nibbles n0..n7 decoded into pairs p = 0..3, and pair p of word (t, wi) is bytes 4t..4t+3
// of 16-byte chunk 4 wi + p of the row (the K order the B fragments use), stored through the 128-byte swizzle.
template <int BM, bool PAIRED>
struct ADecoder {
  static constexpr int T = THREADS / (BM > 64 ? 128 : 64);
  static constexpr int WORDS = 8 / T;  // 4, 2 or 1
  static_assert(BM == 64 || BM == 96 || BM == 128, "A decode covers BM = 64, 96, 128");
  uint32_t raw, sf;                    // sf: the row's scale byte of this thread's first scale column
  uint32_t off[8];                     // chunk c's byte offset in a decoded buffer (through the swizzle)
  bool idle;                           // a thread past T * BM: whole warps (T * BM is a multiple of 32)

  __device__ __forceinline__ void init(int m0) {
    const int tid = pipe_tid<PAIRED>();
    const int r = tid / T, q = tid % T;
    const int ra = (m0 & 127) + r;  // row within A's first atom
    static_assert(T * BM % 32 == 0, "idle threads make whole warps");
    idle = __shfl_sync(~0u, tid, 0) >= T * BM;  // read from lane 0: warp-uniform, a uniform branch
    raw = RAW_A + r * ROW_BYTES + q * 4 * WORDS;
    sf = RAW_SFA + (ra >> 7) * 512 + (ra & 31) * 16 + ((ra >> 5) & 3) * 4 + ((q * WORDS) >> 1);
    const uint32_t dec_row = r * 128 + 4 * ((q * WORDS) >> 1), swz = (r & 7) << 4;
#pragma unroll
    for (int c = 0; c < 8; ++c) off[c] = dec_row + ((c << 4) ^ swz);
  }

  // Ring slot `slot` -> decoded buffer `dec` (shared addresses).
  __device__ __forceinline__ void run(uint32_t slot, uint32_t dec) const {
    if (T * BM < THREADS && idle) return;
    if constexpr (WORDS == 4) {
      // Words (t, wi) = (2h, 0), (2h, 1), (2h + 1, 0), (2h + 1, 1): chunk 4 wi + p takes pair p of (2h, wi) and of
      // (2h + 1, wi), side by side. One wi at a time keeps 8 decoded registers live, not 16.
      const uint4 x = lds128(slot + raw);
      const uint32_t s01 = scales_f16x2(lds16(slot + sf));  // scale columns 2h and 2h + 1
#pragma unroll
      for (int wi = 0; wi < 2; ++wi) {
        uint32_t lo[4], hi[4];
        decode_word<0>(wi ? x.y : x.x, s01, lo);
        decode_word<1>(wi ? x.w : x.z, s01, hi);
#pragma unroll
        for (int p = 0; p < 4; ++p) sts64(dec + off[4 * wi + p], lo[p], hi[p]);
      }
    } else {
      // One scale column t: words (t, 0) and (t, 1), or the single word (t, q % 2).
      const uint32_t s0 = scales_f16x2(lds8(slot + sf));
      uint32_t w[WORDS];
      if constexpr (WORDS == 2) {
        const uint2 x = lds64(slot + raw);
        w[0] = x.x;
        w[1] = x.y;
      } else {
        w[0] = lds32(slot + raw);
      }
#pragma unroll
      for (int i = 0; i < WORDS; ++i) {
        const int wi = WORDS == 2 ? i : (pipe_tid<PAIRED>() % T) & 1;
        uint32_t v[4];
        decode_word<0>(w[i], s0, v);
#pragma unroll
        for (int p = 0; p < 4; ++p) sts32(dec + off[4 * wi + p], v[p]);
      }
    }
  }
};

// B's decode: this thread's wgmma A fragments f[slice][reg] for tile rows r0 and r0 + 8, from 8 bytes of each
// (scale column tq).
struct BDecoder {
  uint32_t raw, sf;  // row r0's; row r0 + 8 is 256 bytes further in the raw rows and 128 in the atom

  // sfb: the scale atom's offset in a ring slot (RAW_SFB, or PRE_SFB in the predecoded path).
  __device__ __forceinline__ void init(int r0, int tq, int sfb) {
    raw = RAW_B + r0 * ROW_BYTES + 8 * tq;
    sf = sfb + (r0 & 31) * 16 + ((r0 >> 5) & 3) * 4 + tq;  // r0 < 128, r0 & 31 < 24: no wrap at + 8
  }

  __device__ __forceinline__ void run(uint32_t slot, uint32_t (&f)[4][4]) const {
    uint32_t v[2][2][4];  // [row][word][pair]
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint2 q = lds64(slot + raw + 256 * i);
      const uint32_t s = scales_f16x2(lds8(slot + sf + 128 * i));
      decode_word<0>(q.x, s, v[i][0]);
      decode_word<0>(q.y, s, v[i][1]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int wi = j >> 1, p = 2 * (j & 1);
      f[j][0] = v[0][wi][p];
      f[j][1] = v[1][wi][p];
      f[j][2] = v[0][wi][p + 1];
      f[j][3] = v[1][wi][p + 1];
    }
  }
};

// B's int8 decode (S8): fragments f[slice][reg] of the two k32 wgmmas of a step for tile rows r0 (regs 0, 2) and
// r0 + 8 (regs 1, 3), from the same 8 bytes of each row as BDecoder. Word j of a row feeds slice j, its nibbles
// 0..3 the low K half (regs 0, 1), nibbles 4..7 the high one (regs 2, 3); so fragment K position 16 h + 4 q + i of
// slice j (the wgmma k32 layout: quad lane q, byte i) holds the row's logical K 16 q + 8 j + 4 h + i, and the
// predecoded A follows the same order (fp4_predecode_a_s8). `bad` gains a bit unless both scales are 1 or 2.
struct BDecoder8 {
  uint32_t raw, sf;

  __device__ __forceinline__ void init(int r0, int tq) {
    raw = r0 * ROW_BYTES + 8 * tq;
    sf = PRE_SFB + (r0 & 31) * 16 + ((r0 >> 5) & 3) * 4 + tq;
  }

  __device__ __forceinline__ void run(uint32_t slot, uint32_t (&f)[2][4], uint32_t& bad) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint2 q = lds64(slot + raw + 256 * i);
      uint32_t t0, t1;
      s8_tables(lds8(slot + sf + 128 * i), t0, t1, bad);
      s8_word(q.x, t0, t1, f[0][i], f[0][2 + i]);
      s8_word(q.y, t0, t1, f[1][i], f[1][2 + i]);
    }
  }
};

// Issue the two k32 int8 wgmmas of one step (slice j 32 bytes along the swizzled rows) and commit them.
template <int BM>
__device__ __forceinline__ void mma_step(int (&acc)[BM / 2], const uint32_t (&f)[2][4], uint64_t desc) {
  wgmma_fence();
  fence_regs(acc);
#ifndef WG_SKIP_MMA
#pragma unroll
  for (int j = 0; j < 2; ++j) wgmma_step<BM>(acc, f[j], desc + 2 * j);
#endif
  wgmma_commit();
  fence_regs(acc);
}

// Issue the four k16 wgmmas of one step (k16 slice j starts 32 bytes further along the swizzled rows: +2 in the
// descriptor's address field) and commit them as one group.
template <int BM>
__device__ __forceinline__ void mma_step(float (&acc)[BM / 2], const uint32_t (&f)[4][4], uint64_t desc) {
  wgmma_fence();
  fence_regs(acc);
#ifndef WG_SKIP_MMA
#pragma unroll
  for (int j = 0; j < 4; ++j) wgmma_step<BM>(acc, f[j], desc + 2 * j);
#endif
  wgmma_commit();
  fence_regs(acc);
}

template <int BM, bool PAIRED>
struct Pipe {
  Loader<PAIRED> ld;
  ADecoder<BM, PAIRED> da;
  BDecoder db;
  uint32_t dec;   // shared address of decoded buffer 0; the raw ring follows the decoded buffers
  int steps, buf;  // buf: the decoded buffer of the step whose wgmma is issued next

  __device__ __forceinline__ uint32_t ring() const { return dec + DEC_BUFS * DEC_BYTES; }

  // Issue step s's wgmma (fragments `cur`, decoded buffer at `cur_buf`), then prepare step s + 1 (ring slot
  // `next_slot`) into `nxt` and the decoded buffer at `next_buf`. Ordering, per step: this warpgroup's wgmma s - 1 is
  // done (wgmma_wait<1>) before `nxt` is overwritten; next_buf was last read by wgmma s - 2, which every warpgroup
  // waited for before the previous barrier; step s + 1's raw bytes were waited for before that barrier too, and ring
  // slot s (`load_slot`, read while preparing step s) is free for step s + STAGES. STEADY: the caller knows that step
  // s + 1 exists and step s + STAGES is to be loaded (the main loop), so neither is tested.
  template <bool STEADY>
  __device__ __forceinline__ void step(int s, float (&acc)[BM / 2], const uint32_t (&cur)[4][4], uint32_t (&nxt)[4][4],
                                       uint32_t cur_buf, uint32_t next_buf, uint32_t load_slot, uint32_t next_slot) {
    mma_step<BM>(acc, cur, sw128_desc(cur_buf));
    if (!STEADY && s + 1 >= steps) return;
    wgmma_wait<1>();
    fence_regs(acc);
    if (STEADY) ld.template load<BM>(load_slot);
    cp_async_commit();
#ifndef WG_SKIP_DECODE
    da.run(next_slot, next_buf);
    db.run(next_slot, nxt);
#endif
    cp_async_wait<STAGES - 2>();  // this thread's copies for step s + 2 have landed
    fence_proxy_async();          // generic-proxy stores to the buffer, read next by wgmma (async proxy)
    pipe_sync<PAIRED>();
  }

  // step() with the addresses worked out from s and `buf` (the last steps).
  __device__ __forceinline__ void iteration(int s, float (&acc)[BM / 2], const uint32_t (&cur)[4][4],
                                            uint32_t (&nxt)[4][4]) {
    const int next = buf == DEC_BUFS - 1 ? 0 : buf + 1;
    step<false>(s, acc, cur, nxt, dec + buf * DEC_BYTES, dec + next * DEC_BYTES, ring() + (s % STAGES) * STAGE_BYTES,
                ring() + ((s + 1) % STAGES) * STAGE_BYTES);
    buf = next;
  }
};

// Split-K: each of a slot's P CTAs stores its fp32 partial (element i of thread tid at i * THREADS + tid) as partial
// `part` of the slot, then counts itself in; the last to arrive resets the counter for the next launch, sums the P
// partials into `acc` in part order (its own read back too), so the result does not depend on who came last, and
// returns true (it stores C). The others return false. WS: the caller is a warp-specialised CTA's two consumer
// warpgroups (ws_tid, ws_sync: the producers have left).
template <int BM, bool WS = false>
__device__ __forceinline__ bool split_k_last(const Tile& t, float (&acc)[BM / 2]) {
  __shared__ int arrived;
  const int tid = WS ? ws_tid() : static_cast<int>(threadIdx.x);
  constexpr int PARTIAL = BN * BM_MAX;
  float* mine = t.ws + (size_t)t.part * PARTIAL;
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) __stcg(mine + i * THREADS + tid, acc[i]);
  __threadfence();
  WS ? ws_sync() : __syncthreads();
  if (tid == 0) {
    arrived = atomicAdd(t.cnt, 1);
    if (arrived == t.parts - 1) *t.cnt = 0;
  }
  WS ? ws_sync() : __syncthreads();
  if (arrived != t.parts - 1) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) acc[i] = __ldcg(t.ws + i * THREADS + tid);
  for (int q = 1; q < t.parts; ++q) {
#pragma unroll
    for (int i = 0; i < BM / 2; ++i) acc[i] += __ldcg(t.ws + q * PARTIAL + i * THREADS + tid);
  }
  return true;
}

// The tile a CTA computes, read from the parameter block (again after the main loop, so none of it holds a
// register across the loop).
__device__ __forceinline__ Tile tile_of(const Params& p) {
  const int4 w = p.tiles[2 * blockIdx.x], ks = p.tiles[2 * blockIdx.x + 1];
  const int g = w.x;
  Tile t;
  t.a = reinterpret_cast<const uint8_t*>(p.addr[0 * MAX_GROUPS + g]);
  t.b = reinterpret_cast<const uint8_t*>(p.addr[1 * MAX_GROUPS + g]);
  t.c = reinterpret_cast<uint16_t*>(p.addr[2 * MAX_GROUPS + g]);
  t.sfa = reinterpret_cast<const uint8_t*>(p.addr[3 * MAX_GROUPS + g]);
  t.sfb = reinterpret_cast<const uint8_t*>(p.addr[4 * MAX_GROUPS + g]);
  t.pre = reinterpret_cast<const uint8_t*>(p.pre[g]);
  t.mpad = p.mpad[g];
  t.M = p.m[g];
  t.N = p.n[g];
  t.K = p.k[g];
  t.m0 = w.y;
  t.n0 = w.z;
  t.k0 = ks.x;
  t.steps = ks.y;
  t.part = ks.w & 0xff;
  t.parts = ks.w >> 8;
  t.ws = ks.z >= 0 ? p.ws + (size_t)ks.z * BN * BM_MAX : nullptr;
  t.cnt = p.cnt + max(ks.z, 0);
  return t;
}

// The tile as one pipeline runs it: in a paired CTA, pipeline `half` takes its half of the K steps (the first the
// larger).
template <bool PAIRED>
__device__ __forceinline__ Tile pipe_tile(const Params& p, int half) {
  Tile t = tile_of(p);
  if (PAIRED) {
    const int first = (t.steps + 1) / 2;
    t.k0 += half * first;
    t.steps = half ? t.steps - first : first;
  }
  return t;
}

__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3));
}

__device__ __forceinline__ void stg128(void* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// The epilogue: C tile rows (BM rows of M, 128 fp16 of N each) staged in shared memory (the decoded buffers, free
// once every wgmma is done) by stmatrix.trans from the accumulator fragments, then written out as 16-byte stores,
// a warp covering two whole 256-byte rows. acc[i] holds row n0 + r0 + 8 * ((i >> 1) & 1) of N and column
// m0 + 8 * (i >> 2) + 2 * tq + (i & 1) of M, the m16n8 accumulator layout, so (acc[4j + 2h], acc[4j + 2h + 1]) is
// this thread's pair of 8x8 block (j, h). Stage rows are 272 bytes apart so the 8 rows of a block hit distinct
// banks. When N is not a multiple of 8 a row is not 16-byte aligned in C: then every element is stored alone.
constexpr int STAGE_ROW = 2 * BN + 16;
static_assert(BM_MAX * STAGE_ROW <= DEC_BUFS * DEC_BYTES, "the C tile fits in the decoded buffers");

// WS: the caller is a warp-specialised CTA's two consumer warpgroups (ws_tid, ws_sync), `stage` its decoded ring.
template <int BM, bool PAIRED, bool WS = false>
__device__ __forceinline__ void store_tile(const Tile& t, const float (&acc)[BM / 2], uint32_t stage) {
  const int tid = WS ? ws_tid_again() : pipe_tid_again<PAIRED>(), lane = tid & 31, wg = tid >> 7,
            warp = (tid >> 5) & 3;
  const float out_scale = 268435456.f;  // 2^28: undoes the two operands' 2^-14
  WS ? ws_sync() : pipe_sync<PAIRED>();  // every warpgroup's wgmmas are done: the decoded buffers are free
  {
    const int j_off = lane >> 4, h = (lane >> 3) & 1, row = lane & 7;  // this lane's address: block (j0 + j_off, h)
    const uint32_t base = stage + (8 * j_off + row) * STAGE_ROW + (64 * wg + 16 * warp + 8 * h) * 2;
#pragma unroll
    for (int j0 = 0; j0 < BM / 8; j0 += 2) {
      uint32_t r[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = 4 * (j0 + (q >> 1)) + 2 * (q & 1);
        r[q] = pack_f16x2(acc[i] * out_scale, acc[i + 1] * out_scale);
      }
      stmatrix_x4_trans(base + 8 * j0 * STAGE_ROW, r[0], r[1], r[2], r[3]);
    }
  }
  WS ? ws_sync() : pipe_sync<PAIRED>();
  const bool vec = (t.N & 7) == 0;
#pragma unroll
  for (int c = tid; c < BM * 16; c += THREADS) {
    const int row = c >> 4, n = t.n0 + 8 * (c & 15), m = t.m0 + row;
    if (m >= t.M || n >= t.N) continue;
    const uint4 v = lds128(stage + row * STAGE_ROW + 16 * (c & 15));
    uint16_t* dst = t.c + (size_t)m * t.N + n;
    if (vec) {
      stg128(dst, v);
    } else {
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (n + e < t.N) dst[e] = static_cast<uint16_t>(w[e >> 1] >> (16 * (e & 1)));
      }
    }
  }
}

// The raw path's pipeline, from the tile's start to its last wgmma issued (not waited for): A and B decoded from
// the raw ring. `dec`: this pipeline's shared memory.
template <int BM, bool PAIRED>
__device__ __forceinline__ void raw_loop(const Params& p, int half, uint32_t dec, float (&acc)[BM / 2]) {
  const int tid = pipe_tid<PAIRED>();
  const int r0 = (tid >> 5) * 16 + ((tid & 31) >> 2), tq = tid & 3;  // 64 * wg + 16 * warp + lane / 4
  Pipe<BM, PAIRED> pipe;
  {
    const Tile t = pipe_tile<PAIRED>(p, half);
    pipe.steps = t.steps;
    pipe.ld.template init<BM>(t);
    pipe.da.init(t.m0);
  }
  pipe.dec = dec;
  pipe.buf = 0;
  pipe.db.init(r0, tq, RAW_SFB);
  uint32_t fa[4][4], fb[4][4];

#pragma unroll
  for (int s = 0; s < STAGES; ++s) {
    if (s < pipe.steps) pipe.ld.template load<BM>(pipe.ring() + s * STAGE_BYTES);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();  // steps 0 and 1
  pipe_sync<PAIRED>();
  pipe.da.run(pipe.ring(), pipe.dec);
  pipe.db.run(pipe.ring(), fa);
  fence_proxy_async();
  pipe_sync<PAIRED>();

  wg_mark(1);
  // The main loop: pairs of steps that both load a step ahead and have a successor. Its addresses are carried from
  // pair to pair (the decoded buffers of steps s, s + 1, s + 2 rotate; the ring slot r of step s advances two
  // slots), not recomputed from s. With STAGES even, s % STAGES is even: step s + 1's slot is r's neighbour, unwrapped.
  int s = 0;
  {
    uint32_t b0 = pipe.dec, b1 = pipe.dec + DEC_BYTES, b2 = pipe.dec + 2 * DEC_BYTES, r = pipe.ring();
    for (; s + 1 + STAGES < pipe.steps; s += 2) {
      const uint32_t end = pipe.ring() + STAGES * STAGE_BYTES;
      uint32_t r1 = r + STAGE_BYTES, r2;
      if constexpr (STAGES == 4) {
        r2 = 2 * pipe.ring() + 2 * STAGE_BYTES - r;  // the other of slots 0 and 2
      } else if constexpr (STAGES % 2 == 0) {
        r2 = r1 + STAGE_BYTES == end ? pipe.ring() : r1 + STAGE_BYTES;
      } else {
        r1 = r1 == end ? pipe.ring() : r1;
        r2 = r1 + STAGE_BYTES == end ? pipe.ring() : r1 + STAGE_BYTES;
      }
      pipe.template step<true>(s, acc, fa, fb, b0, b1, r, r1);
      pipe.template step<true>(s + 1, acc, fb, fa, b1, b2, r1, r2);
      const uint32_t t = b0;
      b0 = b2;
      b2 = b1;
      b1 = t;
      r = r2;
    }
    pipe.buf = s % DEC_BUFS;  // the buffer of step s
  }
  // At most one step is left to load (s + 1 + STAGES >= steps): step s + STAGES, queued now into ring slot s % STAGES
  // (free: step s was prepared before the last barrier) and committed with step s's group as in the main loop.
  if (s + STAGES < pipe.steps) {
    pipe.ld.template load<BM>(pipe.ring() + (s % STAGES) * STAGE_BYTES, pipe_tid_again<PAIRED>());
  }
  for (; s < pipe.steps; s += 2) {
    pipe.iteration(s, acc, fa, fb);
    if (s + 1 < pipe.steps) pipe.iteration(s + 1, acc, fb, fa);
  }
}

// The predecoded path's pipeline (PRE): A's buffers are copied from the scratch, B decoded as in the raw path.
// Shared memory: PRE_ABUFS A buffers (DEC_BYTES apart), then STAGES raw slots of B (PRE_STAGE_BYTES).
// S8: the int8 path (int32 sums, int8 fragments and A buffers of S8_ABUF_BYTES, 64-byte swizzled); `bad` collects
// BDecoder8's scale checks.
template <int BM, bool PAIRED, bool S8 = false>
struct PrePipe {
  static constexpr int ABUF = S8 ? S8_ABUF_BYTES : DEC_BYTES;
  static constexpr int ST = S8 ? S8_STAGES : STAGES;  // raw slots of B; A is copied AHEAD steps ahead into ABUFS
  static constexpr int AHEAD = ST - 1;
  static constexpr int ABUFS = AHEAD + 2;
  using Acc = std::conditional_t<S8, int, float>;
  using Frag = uint32_t[S8 ? 2 : 4][4];
  PreLoader<PAIRED, S8> ld;
  std::conditional_t<S8, BDecoder8, BDecoder> db;
  uint32_t dec;  // shared address of A buffer 0
  int steps;
  uint32_t bad = 0;

  __device__ __forceinline__ uint32_t ring() const { return dec + ABUFS * ABUF; }
  __device__ __forceinline__ uint64_t desc(uint32_t a) const { return S8 ? sw64_desc(a) : sw128_desc(a); }
  __device__ __forceinline__ void decode_b(uint32_t slot, Frag& f) {
    if constexpr (S8) {
      db.run(slot, f, bad);
    } else {
      db.run(slot, f);
    }
  }

  // Issue step s's wgmma (fragments `cur`, A buffer `a_cur`), queue B of step s + ST into raw slot `load_slot`
  // (step s's, decoded before the last barrier) and A of step s + AHEAD into `a_load` (step s - 2's buffer, whose
  // wgmmas every warpgroup waited for before the last barrier), decode B of step s + 1 (raw slot `next_slot`) into
  // `nxt`. Commit group s holds B(s + ST) and A(s + AHEAD), so the wait below (all but the last ST - 2
  // groups) lands B(s + 2) and A(s + 1) before the barrier. STEADY: both loads and a successor exist (the main loop).
  template <bool STEADY>
  __device__ __forceinline__ void step(int s, Acc (&acc)[BM / 2], const Frag& cur, Frag& nxt, uint32_t a_cur,
                                       uint32_t a_load, uint32_t load_slot, uint32_t next_slot) {
    mma_step<BM>(acc, cur, desc(a_cur));
    if (!STEADY && s + 1 >= steps) return;
    wgmma_wait<1>();
    fence_regs(acc);
    if (STEADY || s + ST < steps) ld.load_b(load_slot);
    if (STEADY || s + AHEAD < steps) ld.template load_a<BM>(a_load);
    cp_async_commit();
#ifndef WG_SKIP_DECODE
    decode_b(next_slot, nxt);
#endif
    cp_async_wait<ST - 2>();
    fence_proxy_async();  // the copied A (generic proxy), read next by wgmma (async proxy)
    pipe_sync<PAIRED>();
  }

  __device__ __forceinline__ void iteration(int s, Acc (&acc)[BM / 2], const Frag& cur, Frag& nxt) {
    step<false>(s, acc, cur, nxt, dec + (s % ABUFS) * ABUF, dec + ((s + AHEAD) % ABUFS) * ABUF,
                ring() + (s % ST) * PRE_STAGE_BYTES, ring() + ((s + 1) % ST) * PRE_STAGE_BYTES);
  }
};

// Returns PrePipe::bad (S8; else 0).
template <int BM, bool PAIRED, bool S8 = false>
__device__ __forceinline__ uint32_t pre_loop(const Params& p, int half, uint32_t dec,
                                             std::conditional_t<S8, int, float> (&acc)[BM / 2]) {
  const int tid = pipe_tid<PAIRED>();
  const int r0 = (tid >> 5) * 16 + ((tid & 31) >> 2), tq = tid & 3;
  PrePipe<BM, PAIRED, S8> pipe;
  using PP = PrePipe<BM, PAIRED, S8>;
  constexpr int ABUF = PP::ABUF, ST = PP::ST, AHEAD = PP::AHEAD, ABUFS = PP::ABUFS;
  {
    const Tile t = pipe_tile<PAIRED>(p, half);
    pipe.steps = t.steps;
    pipe.ld.template init<BM>(t);
  }
  pipe.dec = dec;
  if constexpr (S8) {
    pipe.db.init(r0, tq);
  } else {
    pipe.db.init(r0, tq, PRE_SFB);
  }
  typename PrePipe<BM, PAIRED, S8>::Frag fa, fb;

  if constexpr (S8) {
    // Prologue groups {B0}, {B1} before the wait for the pre-pass (s8_begin), then for i < ST: B of step i >= 2
    // and A of step i < AHEAD (the loop's group s brings B of s + ST and A of s + AHEAD). Only B0 and B1 go before
    // the wait: every group committed then is older than A0's, so the prologue's wait below would wait for it too
    // (all ST steps of B there measured slower: g2_n3072_k4096 26.6 -> 27.6 us).
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i < pipe.steps) pipe.ld.load_b(pipe.ring() + i * PRE_STAGE_BYTES);
      cp_async_commit();
    }
    s8_wait();
#pragma unroll
    for (int i = 0; i < ST; ++i) {
      if (i >= 2 && i < pipe.steps) pipe.ld.load_b(pipe.ring() + i * PRE_STAGE_BYTES);
      if (i < AHEAD && i < pipe.steps) pipe.ld.template load_a<BM>(pipe.dec + i * ABUF);
      cp_async_commit();
    }
  } else {
    // Prologue groups 0..ST-1: B of step i, and A of step i for i < AHEAD (the loop's group s brings A of
    // s + AHEAD).
#pragma unroll
    for (int i = 0; i < ST; ++i) {
      if (i < pipe.steps) pipe.ld.load_b(pipe.ring() + i * PRE_STAGE_BYTES);
      if (i < AHEAD && i < pipe.steps) pipe.ld.template load_a<BM>(pipe.dec + i * ABUF);
      cp_async_commit();
    }
  }
  cp_async_wait<ST - 2>();  // B and A of steps 0 and 1
  pipe_sync<PAIRED>();
  pipe.decode_b(pipe.ring(), fa);
  fence_proxy_async();
  pipe_sync<PAIRED>();

  wg_mark(1);
  // Pairs of steps as in raw_loop; the A buffers of step s (a) and of step s + AHEAD (l) advance one buffer a
  // step, wrapping after ABUFS.
  int s = 0;
  {
    const uint32_t a_end = pipe.dec + ABUFS * ABUF;
    uint32_t a = pipe.dec, l = pipe.dec + AHEAD * ABUF, r = pipe.ring();
    for (; s + 1 + ST < pipe.steps; s += 2) {
      const uint32_t end = pipe.ring() + ST * PRE_STAGE_BYTES;
      uint32_t r1 = r + PRE_STAGE_BYTES, r2;
      if constexpr (ST == 4) {
        r2 = 2 * pipe.ring() + 2 * PRE_STAGE_BYTES - r;
      } else if constexpr (ST % 2 == 0) {
        r2 = r1 + PRE_STAGE_BYTES == end ? pipe.ring() : r1 + PRE_STAGE_BYTES;
      } else {
        r1 = r1 == end ? pipe.ring() : r1;
        r2 = r1 + PRE_STAGE_BYTES == end ? pipe.ring() : r1 + PRE_STAGE_BYTES;
      }
      const uint32_t a1 = a + ABUF == a_end ? pipe.dec : a + ABUF;
      const uint32_t l1 = l + ABUF == a_end ? pipe.dec : l + ABUF;
      pipe.template step<true>(s, acc, fa, fb, a, l, r, r1);
      pipe.template step<true>(s + 1, acc, fb, fa, a1, l1, r1, r2);
      a = a1 + ABUF == a_end ? pipe.dec : a1 + ABUF;
      l = l1 + ABUF == a_end ? pipe.dec : l1 + ABUF;
      r = r2;
    }
  }
  for (; s < pipe.steps; s += 2) {
    pipe.iteration(s, acc, fa, fb);
    if (s + 1 < pipe.steps) pipe.iteration(s + 1, acc, fb, fa);
  }
  return pipe.bad;
}

// The int8 loop, one barrier per pair of K steps (s, s + 1; s even): both steps' wgmmas issued and committed as one
// group, then (once the previous pair's group is done: wgmma_wait<1>) B of s + 6, s + 7 copied into the slots of s,
// s + 1 (decoded before the last barrier) and A of s + 4, s + 5 into the buffers of s - 4, s - 3 (whose wgmmas every
// warpgroup waited for before the last barrier), B of s + 2, s + 3 decoded into the other two fragment sets, and
// the wait for all but the newest copy group lands B of s + 4, s + 5 and A of s + 2, s + 3 before the barrier.
// Prologue groups: {B0, B1, A0, A1}, {B2, B3, A2, A3}, {B4, B5}; the pair at s commits {B(s+6), B(s+7), A(s+4),
// A(s+5)}. Buffers: A step j in buffer j % 8, B step j in slot j % 6, so a pair's two are adjacent.
template <int BM, bool PAIRED>
struct PairPipe {
  using Frag = uint32_t[2][4];
  PreLoader<PAIRED, true> ld;
  BDecoder8 db;
  uint32_t dec;  // A buffer 0; the raw slots follow the A buffers
  int steps;
  uint32_t bad = 0;

  __device__ __forceinline__ uint32_t ring() const { return dec + S8P_ABUFS * S8_ABUF_BYTES; }

  template <bool STEADY>
  __device__ __forceinline__ void pair(int s, int (&acc)[BM / 2], const Frag& c0, const Frag& c1, Frag& n0,
                                       Frag& n1, uint32_t a_cur, uint32_t a_load, uint32_t b_load, uint32_t b_next) {
    wgmma_fence();
    fence_regs(acc);
#ifndef WG_SKIP_MMA
    const uint64_t d = sw64_desc(a_cur);
    wgmma_step<BM>(acc, c0[0], d);
    wgmma_step<BM>(acc, c0[1], d + 2);
    if (STEADY || s + 1 < steps) {
      wgmma_step<BM>(acc, c1[0], d + (S8_ABUF_BYTES >> 4));
      wgmma_step<BM>(acc, c1[1], d + (S8_ABUF_BYTES >> 4) + 2);
    }
#endif
    wgmma_commit();
    fence_regs(acc);
    if (!STEADY && s + 2 >= steps) return;
    wgmma_wait<1>();
    fence_regs(acc);
    if (STEADY || s + 6 < steps) ld.load_b(b_load);
    if (STEADY || s + 7 < steps) ld.load_b(b_load + PRE_STAGE_BYTES);
    if (STEADY || s + 4 < steps) ld.template load_a<BM>(a_load);
    if (STEADY || s + 5 < steps) ld.template load_a<BM>(a_load + S8_ABUF_BYTES);
    cp_async_commit();
#ifndef WG_SKIP_DECODE
    db.run(b_next, n0, bad);
    if (STEADY || s + 3 < steps) db.run(b_next + PRE_STAGE_BYTES, n1, bad);
#endif
    cp_async_wait<1>();
    fence_proxy_async();
    pipe_sync<PAIRED>();
  }

  // pair() with the addresses worked out from s (the last pairs).
  __device__ __forceinline__ void tail(int s, int (&acc)[BM / 2], const Frag& c0, const Frag& c1, Frag& n0,
                                       Frag& n1) {
    const int q = (s >> 1) & 3, t = (s >> 1) % 3;
    pair<false>(s, acc, c0, c1, n0, n1, dec + q * 2 * S8_ABUF_BYTES, dec + ((q + 2) & 3) * 2 * S8_ABUF_BYTES,
                ring() + t * 2 * PRE_STAGE_BYTES, ring() + (t == 2 ? 0 : t + 1) * 2 * PRE_STAGE_BYTES);
  }
};

template <int BM, bool PAIRED>
__device__ __forceinline__ uint32_t s8_pair_loop(const Params& p, int half, uint32_t dec, int (&acc)[BM / 2]) {
  const int tid = pipe_tid<PAIRED>();
  const int r0 = (tid >> 5) * 16 + ((tid & 31) >> 2), tq = tid & 3;
  PairPipe<BM, PAIRED> pipe;
  {
    const Tile t = pipe_tile<PAIRED>(p, half);
    pipe.steps = t.steps;
    pipe.ld.template init<BM>(t);
  }
  pipe.dec = dec;
  pipe.db.init(r0, tq);
  uint32_t f[4][2][4];  // four fragment sets: a pair's two steps, and the next pair's
  const int steps = pipe.steps;
  // Prologue groups {B0, B1} before the wait for the pre-pass (s8_begin; as in pre_loop, only those), then
  // {A0, A1}, {B2, B3, A2, A3}, {B4, B5}.
  if (0 < steps) pipe.ld.load_b(pipe.ring());
  if (1 < steps) pipe.ld.load_b(pipe.ring() + PRE_STAGE_BYTES);
  cp_async_commit();
  s8_wait();
#pragma unroll
  for (int g = 0; g < 3; ++g) {
#pragma unroll
    for (int i = 2 * g; i < 2 * g + 2; ++i) {
      if (g > 0 && i < steps) pipe.ld.load_b(pipe.ring() + i * PRE_STAGE_BYTES);
    }
#pragma unroll
    for (int i = 2 * g - 2; i < 2 * g; ++i) {
      if (g > 0 && i < steps) pipe.ld.template load_a<BM>(dec + i * S8_ABUF_BYTES);
    }
    cp_async_commit();
  }
  cp_async_wait<1>();  // B and A of steps 0..3
  pipe_sync<PAIRED>();
  pipe.db.run(pipe.ring(), f[0], pipe.bad);
  if (steps > 1) pipe.db.run(pipe.ring() + PRE_STAGE_BYTES, f[1], pipe.bad);
  fence_proxy_async();
  pipe_sync<PAIRED>();

  wg_mark(1);
  // Two pairs per pass (the fragment sets swap); a: the A buffer pair of step s, advancing one pair (of four) per
  // pair; r: the raw slot pair of s, advancing one pair (of three).
  int s = 0;
  {
    const uint32_t a_end = dec + S8P_ABUFS * S8_ABUF_BYTES, r_end = pipe.ring() + S8P_SLOTS * PRE_STAGE_BYTES;
    constexpr uint32_t AP = 2 * S8_ABUF_BYTES, RP = 2 * PRE_STAGE_BYTES;
    uint32_t a = dec, r = pipe.ring();
    for (; s + 9 < steps; s += 4) {
      const uint32_t a1 = a + AP == a_end ? dec : a + AP, a2 = a1 + AP == a_end ? dec : a1 + AP;
      const uint32_t a3 = a2 + AP == a_end ? dec : a2 + AP;
      const uint32_t r1 = r + RP == r_end ? pipe.ring() : r + RP, r2 = r1 + RP == r_end ? pipe.ring() : r1 + RP;
      pipe.template pair<true>(s, acc, f[0], f[1], f[2], f[3], a, a2, r, r1);
      pipe.template pair<true>(s + 2, acc, f[2], f[3], f[0], f[1], a1, a3, r1, r2);
      a = a2;
      r = r2;
    }
  }
  for (; s < steps; s += 4) {
    pipe.tail(s, acc, f[0], f[1], f[2], f[3]);
    if (s + 2 < steps) pipe.tail(s + 2, acc, f[2], f[3], f[0], f[1]);
  }
  return pipe.bad;
}

// A paired CTA (2 x THREADS threads, launched for grids of at most one CTA per SM) runs two pipelines on one tile,
// each with its own shared memory and barrier: pipeline 0 takes the first half of the K steps, pipeline 1 the rest,
// and pipeline 1's sums join pipeline 0's through shared memory at the end. Two pipelines on an SM keep its tensor
// cores busier than one (H200: 500 ns per K step for one, 700-740 ns each for two), and unlike split-K across CTAs
// the partial sums never leave the SM. PRE: A predecoded (pre_loop), else decoded here (raw_loop).
// The tile's end once every wgmma is done: a paired CTA's two sums joined, the split-K merge, the store. `region`:
// a pipeline's shared memory (SMEM_OF), `dec` this pipeline's.
template <int BM, bool PAIRED, int REGION>
__device__ __forceinline__ void finish_tile(const Params& p, int half, uint8_t* smem, uint32_t dec,
                                            float (&acc)[BM / 2]) {
  const int tid = pipe_tid<PAIRED>();
  if (PAIRED) {
    float* sums = reinterpret_cast<float*>(smem + REGION);  // pipeline 1's region, free once both end
    __syncthreads();
    if (half) {
#pragma unroll
      for (int i = 0; i < BM / 2; ++i) sums[i * THREADS + tid] = acc[i];
    }
    __syncthreads();
    if (half) return;
#pragma unroll
    for (int i = 0; i < BM / 2; ++i) acc[i] += sums[i * THREADS + tid];
  }

  const Tile t = tile_of(p);
  if (t.ws != nullptr && !split_k_last<BM>(t, acc)) return;

  store_tile<BM, PAIRED>(t, acc, dec);
  wg_mark(3);
}

template <int BM, bool PAIRED, bool PRE>
__device__ __forceinline__ void run_tile(const Params& p, uint8_t* smem) {
  wg_mark(0);
  // The pipeline (warp-uniform; read through a shuffle so the compiler keeps addresses built from it uniform).
  const int half = PAIRED ? __shfl_sync(~0u, static_cast<int>(threadIdx.x) / THREADS, 0) : 0;
  const uint32_t dec = smem_u32(smem + half * SMEM_OF<PRE>);
  float acc[BM / 2];
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) acc[i] = 0.f;
  if constexpr (PRE) {
    pre_loop<BM, PAIRED>(p, half, dec, acc);
  } else {
    raw_loop<BM, PAIRED>(p, half, dec, acc);
  }
  wgmma_wait<0>();
  fence_regs(acc);
  wg_mark(2);
  finish_tile<BM, PAIRED, SMEM_OF<PRE>>(p, half, smem, dec, acc);
}

// The int8 path's tile (S8): the int8 loop; when the pre-pass did not flag group g's A (flags[g] != epoch, read after
// the loop: its prologue waited for the pre-pass, s8_wait) and every thread's B scales passed (one vote over the
// CTA, both pipelines of a paired one), the int32 sums are
// C x 4 (exact below 2^24), scaled to the fp16 path's form (x 2^-30, undone by store_tile's 2^28 and the / 4) and
// finished as there. Otherwise the tile runs again from the start on the raw fp16 path, in the same shared memory.
template <int BM, bool PAIRED>
__device__ __forceinline__ void run_tile_s8(const Params& p, uint8_t* smem) {
  wg_mark(0);
  const int half = PAIRED ? __shfl_sync(~0u, static_cast<int>(threadIdx.x) / THREADS, 0) : 0;
  const uint32_t dec = smem_u32(smem + half * S8_REGION);
  {
    int acc[BM / 2];
#pragma unroll
    for (int i = 0; i < BM / 2; ++i) acc[i] = 0;
    // s8_pair_loop holds four fragment sets: at BM = 128 ptxas serialised its wgmmas (C7512, registers). In paired
    // CTAs it measured slower (H200: 26.55 -> 27.01 us on g2_n3072_k4096).
    const uint32_t bad = WG_S8_PAIRS && BM < 128 && !PAIRED ? s8_pair_loop<BM, PAIRED>(p, half, dec, acc)
                                                            : pre_loop<BM, PAIRED, true>(p, half, dec, acc);
    wgmma_wait<0>();
    fence_regs(acc);
    wg_mark(2);
    if (!__syncthreads_or(bad != 0 || __ldcg(p.flags + p.tiles[2 * blockIdx.x].x) == p.epoch)) {
      float sums[BM / 2];
#pragma unroll
      for (int i = 0; i < BM / 2; ++i) sums[i] = static_cast<float>(acc[i]) * 0x1p-30f;
      finish_tile<BM, PAIRED, S8_REGION>(p, half, smem, dec, sums);
      return;
    }
  }
  run_tile<BM, PAIRED, false>(p, smem);  // inlined: as a __noinline__ call, ptxas serialised every wgmma (C7510)
}

template <int BM, bool PAIRED, int PATH>  // PATH: 0 raw, 1 predecoded, 2 int8
__device__ __forceinline__ void run_path(const Params& p, uint8_t* smem) {
  if constexpr (PATH == 2) {
    run_tile_s8<BM, PAIRED>(p, smem);
  } else {
    run_tile<BM, PAIRED, PATH == 1>(p, smem);
  }
}

template <int PATH>
__device__ __forceinline__ void run_any(const Params& p, uint8_t* smem) {
  const int bm = p.tiles[2 * blockIdx.x].w;
  if (blockDim.x > THREADS) {
    if (bm == 128) {
      run_path<128, true, PATH>(p, smem);
    } else if (bm == 96) {
      run_path<96, true, PATH>(p, smem);
    } else {
      run_path<64, true, PATH>(p, smem);
    }
  } else if (bm == 128) {
    run_path<128, false, PATH>(p, smem);
  } else if (bm == 96) {
    run_path<96, false, PATH>(p, smem);
  } else {
    run_path<64, false, PATH>(p, smem);
  }
}


// ---------------------------------------------------------------------------------------------------------------
// The warp-specialised main loop (issue 19; fp4_group_gemm_sm90_ws, and _ws_pre with A from the pre-pass). One CTA
// per SM of WS_THREADS: producer warpgroup 0 loads and decodes B (thread r: the tile's row r of N), producer
// warpgroup 1 loads and decodes A (thread r: row r of the tile's M, r < BM) or, PRE, copies A's predecoded step;
// both write a decoded stage: B as BN rows x 128 bytes and A as BM rows x 128 bytes, both 128-byte swizzled in the
// pre-pass's image (the same K order for both), so the consumers' wgmmas take both operands from shared memory
// (B's rows are the wgmma's M side). Consumer warpgroups 2 and 3 (64 rows of N each) only wait, issue the step's four
// k16 wgmmas and release the stage. Per decoded stage two mbarriers: full (WS_PRODUCERS arrivals: every producer
// thread after its writes and a proxy fence) and empty (WS_CONSUMERS arrivals: every consumer thread once its
// wgmma group for the stage is done). Waits use the phase parity: step s's stage is s % WS_DSTAGES and its round
// s / WS_DSTAGES; a consumer waits for full with parity round & 1, a producer for empty with (round & 1) ^ 1 (a fresh
// barrier passes parity 1 at once). tests/variants/test_wgmma_sm90_ws_protocol.py models this protocol; change both
// together.
// Raw bytes travel by cp.async into a ring of WS_RAW slots, WS_AHEAD steps ahead, each thread copying only what it
// decodes itself (its row's 32 bytes and 4 scale bytes), so the producers need no barrier among themselves.
#ifndef WS_DSTAGES
#define WS_DSTAGES 6
#endif
#ifndef WS_AHEAD
#define WS_AHEAD 2
#endif
constexpr int WS_STAGES = WS_DSTAGES;  // decoded stages
constexpr int WS_LOAD_AHEAD = WS_AHEAD;  // raw (and, PRE, A's) copies run this many steps ahead of the decode
constexpr int WS_RAW = WS_LOAD_AHEAD + 1;  // raw slots: slot of step s + WS_AHEAD was decoded at step s - 1
constexpr int WS_DEC_A = BN * 128;                       // a decoded stage: B (BN x 128 bytes), then A
constexpr int WS_STAGE_BYTES = WS_DEC_A + DEC_BYTES;     // 32768: stages stay 1024-byte aligned
// A raw slot: each 32-byte row as two 16-byte chunks, chunk h of row r at h * rows * 16 + 16 r (a quarter-warp's
// 16-byte loads hit distinct banks), then each row's four scale bytes (scale columns 0..3 of the step).
constexpr int WS_RAW_B = 0;
constexpr int WS_RAW_A = WS_RAW_B + BN * ROW_BYTES;
constexpr int WS_RAW_SFB = WS_RAW_A + BM_MAX * ROW_BYTES;
constexpr int WS_RAW_SFA = WS_RAW_SFB + BN * 4;
constexpr int WS_RAW_BYTES = WS_RAW_SFA + BM_MAX * 4;    // 9216
constexpr int WS_RING_BYTES = WS_STAGES * WS_STAGE_BYTES + WS_RAW * WS_RAW_BYTES;
constexpr int WS_SMEM_BYTES = (WS_RING_BYTES + 2 * WS_STAGES * 8 + 1023) / 1024 * 1024;  // + full and empty
// Register split (setmaxnreg): the producers decode with few, the consumers hold the accumulators.
constexpr int WS_PRODUCER_REGS = 56;
constexpr int WS_CONSUMER_REGS = 200;
static_assert(WS_PRODUCERS * WS_PRODUCER_REGS + WS_CONSUMERS * WS_CONSUMER_REGS <= 65536, "the register file");
static_assert(WS_SMEM_BYTES + 1024 + 16 <= 227 * 1024, "one CTA per SM (dynamic + alignment pad + static)");
static_assert(WS_RAW > WS_LOAD_AHEAD, "a raw copy never lands in a slot not yet decoded");
// PRE: role 1 waits for step s + WS_AHEAD's stage (last held by step s + WS_AHEAD - WS_STAGES) before step s is full;
// the consumers release a step only after issuing the next, so WS_STAGES - WS_AHEAD < 2 deadlocks (the test's model
// finds it).
static_assert(WS_STAGES >= WS_LOAD_AHEAD + 2, "A's copies wait for a stage the consumers can release");
static_assert(BM_MAX * STAGE_ROW <= WS_STAGES * WS_STAGE_BYTES, "the C tile fits in the decoded stages");

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Arrive (release, CTA scope): this thread's earlier writes are visible to whoever waits for the phase.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Wait (acquire) until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWS_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WS_WAIT;\n}\n" ::"r"(
          bar),
      "r"(parity)
      : "memory");
}

// A 16-byte cp.async (L2 only) reading `bytes` of them (16, or 0: zero-fill without a read).
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

// A 4-byte cp.async (through L1: .ca is the only form of 4-byte copies) reading `bytes` of them (4 or 0).
__device__ __forceinline__ void cp_async4_zfill(uint32_t dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void sts128(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w));
}

template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// One row's K step, raw (two 16-byte chunks at `lo` and `hi`, its four scale bytes at `sc`) -> its 128-byte
// decoded row at `dst` (row r of a stage: chunk c stored at chunk c ^ (r & 7)). The same decode, order and placement
// as fp4_predecode_a's thread (test_wgmma_sm90_decode.py emulates this too and mirrors these lines).
__device__ __forceinline__ void ws_decode_row(uint32_t lo, uint32_t hi, uint32_t sc_at, uint32_t dst, int r) {
  const uint4 x[2] = {lds128(lo), lds128(hi)};
  const uint32_t sc = lds32(sc_at);
  const uint32_t swz = (r & 7) << 4;
  const uint32_t s2[2] = {scales_f16x2(sc), scales_f16x2(sc >> 16)};  // columns (0, 1) and (2, 3)
#pragma unroll
  for (int wi = 0; wi < 2; ++wi) {
    uint32_t lo_w[2][4], hi_w[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      decode_word<0>(wi ? x[h].y : x[h].x, s2[h], lo_w[h]);
      decode_word<1>(wi ? x[h].w : x[h].z, s2[h], hi_w[h]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      sts128(dst + (((4 * wi + q) << 4) ^ swz), lo_w[0][q], hi_w[0][q], lo_w[1][q], hi_w[1][q]);
    }
  }
}

// A producer thread's copies, as running sources resolved once per tile. Role 0 (warpgroup 0): B row n0 + r (rows
// past N read the last row, as Loader) and its scale bytes. Role 1: A row m0 + r for r < BM (rows past M zero-filled
// without a read), or, PRE, the thread's BM / 16 16-byte pieces of the tile's predecoded step (BM rows x 128 bytes,
// contiguous in the scratch), straight into the decoded stage.
template <int BM, bool PRE>
struct WsLoader {
  const uint8_t* src;     // row data (raw), or the predecoded piece (PRE, role 1)
  const uint8_t* sf_src;  // the row's four scale bytes
  uint32_t step;          // source bytes per K step
  uint32_t bytes;         // 16, or 0 for a row past M
  uint32_t raw_at;        // this thread's first chunk in a raw slot
  uint32_t sf_at;         // its scale bytes in a raw slot

  __device__ __forceinline__ void init(const Tile& t, int role, int r) {
    const int rest_k = t.K / 64;
    if (role == 0) {
      const int n = min(t.n0 + r, t.N - 1);
      src = t.b + (size_t)n * (t.K / 2) + t.k0 * ROW_BYTES;
      sf_src = t.sfb + ((size_t)(n >> 7) * rest_k + t.k0) * 512 + (n & 31) * 16 + ((n >> 5) & 3) * 4;
      step = ROW_BYTES;
      bytes = 16;
      raw_at = WS_RAW_B + 16 * r;
      sf_at = WS_RAW_SFB + 4 * r;
    } else if (PRE) {
      src = t.pre + ((size_t)t.k0 * t.mpad + t.m0) * 128 + 16 * r;
      step = t.mpad * 128;
    } else {
      const int m = min(t.m0 + r, t.M - 1);
      src = t.a + (size_t)m * (t.K / 2) + t.k0 * ROW_BYTES;
      sf_src = t.sfa + ((size_t)(m >> 7) * rest_k + t.k0) * 512 + (m & 31) * 16 + ((m >> 5) & 3) * 4;
      step = ROW_BYTES;
      bytes = t.m0 + r < t.M ? 16 : 0;
      raw_at = WS_RAW_A + 16 * r;
      sf_at = WS_RAW_SFA + 4 * r;
    }
  }

  // The next K step: raw rows into the raw slot at `slot`, or (PRE, role 1) A's pieces into the decoded stage at
  // `stage`.
  __device__ __forceinline__ void load(int role, int r, uint32_t slot, uint32_t stage) {
    if (role == 1 && PRE) {
#pragma unroll
      for (int i = 0; i < BM / 16; ++i) cp_async16(stage + WS_DEC_A + 16 * r + 2048 * i, src + 2048 * i);
    } else if (role == 0 || r < BM) {
      const int rows = role == 0 ? BN : BM_MAX;
      cp_async16_zfill(slot + raw_at, src, bytes);
      cp_async16_zfill(slot + raw_at + rows * 16, src + 16, bytes);
      cp_async4_zfill(slot + sf_at, sf_src, bytes >> 2);
      sf_src += 512;
    }
    src += step;
  }
};

// A producer thread (warpgroups 0 and 1): for each K step s, queue step s + WS_AHEAD's copies (PRE, role 1: into
// its decoded stage, after that stage's empty wait), wait for step s's own copies, wait for s's stage to be empty
// (unless done when its copies were queued), decode its row into the stage, fence (generic -> async proxy: the
// wgmma reads it), arrive on full. Role 1 threads past BM only wait and arrive (the counts stay fixed).
template <int BM, bool PRE>
__device__ __forceinline__ void ws_produce(const Params& p, uint32_t ring, uint32_t bars) {
#ifdef WS_COUNT_ROLE
  const int role = WS_COUNT_ROLE, r = threadIdx.x & 127;  // sass_count.py --ws-roles only: one role's loop alone
#else
  const int role = threadIdx.x >> 7, r = threadIdx.x & 127;
#endif
  const uint32_t raw = ring + WS_STAGES * WS_STAGE_BYTES, empty = bars + 8 * WS_STAGES;  // full: empty - 8 * WS_STAGES
  const Tile t = tile_of(p);
  const int steps = t.steps;
  const bool a_in_stage = PRE && role == 1;  // this thread's copies write the decoded stage itself
  WsLoader<BM, PRE> ld;
  ld.init(t, role, r);
  // Step j's copies (j = s + WS_AHEAD in the loop): raw slot j % WS_RAW at `l_slot`, stage j % WS_STAGES at
  // `l_stage`, its empty wait of parity `l_par` (PRE, role 1). Step s's decode: raw slot `d_slot`, stage `d_stage`,
  // parity `d_par`, its full barrier `d_full`. Carried from step to step, not recomputed from s.
  const uint32_t ring_end = ring + WS_STAGES * WS_STAGE_BYTES, raw_end = raw + WS_RAW * WS_RAW_BYTES;
  uint32_t l_slot = raw, l_stage = ring, l_empty = empty, l_par = 1;
#pragma unroll
  for (int i = 0; i < WS_LOAD_AHEAD; ++i) {
    if (i < steps) {
      if (a_in_stage) mbar_wait(l_empty, l_par);
      ld.load(role, r, l_slot, l_stage);
    }
    cp_async_commit();
    l_slot += WS_RAW_BYTES;
    l_stage += WS_STAGE_BYTES;
    l_empty += 8;  // WS_AHEAD < WS_STAGES: no wrap in the prologue
  }
  uint32_t d_slot = raw, d_stage = ring, d_empty = empty, d_par = 1;
  for (int s = 0; s < steps; ++s) {
    if (s + WS_LOAD_AHEAD < steps) {
      if (a_in_stage) mbar_wait(l_empty, l_par);
      ld.load(role, r, l_slot, l_stage);
    }
    cp_async_commit();
    cp_async_wait<WS_LOAD_AHEAD>();  // this thread's copies of step s have landed
    if (!a_in_stage) mbar_wait(d_empty, d_par);
#ifndef WG_SKIP_DECODE
    if (role == 0) {
      ws_decode_row(d_slot + WS_RAW_B + 16 * r, d_slot + WS_RAW_B + BN * 16 + 16 * r, d_slot + WS_RAW_SFB + 4 * r,
                    d_stage + r * 128, r);
    } else if (!PRE && r < BM) {
      ws_decode_row(d_slot + WS_RAW_A + 16 * r, d_slot + WS_RAW_A + BM_MAX * 16 + 16 * r,
                    d_slot + WS_RAW_SFA + 4 * r, d_stage + WS_DEC_A + r * 128, r);
    }
#endif
    fence_proxy_async();
    mbar_arrive(d_empty - 8 * WS_STAGES);  // full[st]
    // advance: step s + 1's decode, step s + 1 + WS_AHEAD's copies
    d_slot = d_slot + WS_RAW_BYTES == raw_end ? raw : d_slot + WS_RAW_BYTES;
    l_slot = l_slot + WS_RAW_BYTES == raw_end ? raw : l_slot + WS_RAW_BYTES;
    if (d_stage + WS_STAGE_BYTES == ring_end) {
      d_stage = ring;
      d_empty = empty;
      d_par ^= 1;
    } else {
      d_stage += WS_STAGE_BYTES;
      d_empty += 8;
    }
    if (l_stage + WS_STAGE_BYTES == ring_end) {
      l_stage = ring;
      l_empty = empty;
      l_par ^= 1;
    } else {
      l_stage += WS_STAGE_BYTES;
      l_empty += 8;
    }
  }
}

// wgmma m64nBMk16 with both operands from shared memory (A: B's 64 rows of this warpgroup, K-major, 128-byte
// swizzle; B: A's BM rows, the same form).
template <int BM>
__device__ __forceinline__ void wgmma_ss(float (&d)[BM / 2], uint64_t da, uint64_t db);

#define WS_D16(o) "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), \
    "+f"(d[o + 6]), "+f"(d[o + 7]), "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]),           \
    "+f"(d[o + 12]), "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15])
#define WS_R16(o) "%" #o ", "
template <>
__device__ __forceinline__ void wgmma_ss<64>(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, 1, 1, 1, 0, 0;"
      : WS_D16(0), WS_D16(16)
      : "l"(da), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_ss<96>(float (&d)[48], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
      "%48, %49, 1, 1, 1, 0, 0;"
      : WS_D16(0), WS_D16(16), WS_D16(32)
      : "l"(da), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_ss<128>(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, 1, 1, 1, 0, 0;"
      : WS_D16(0), WS_D16(16), WS_D16(32), WS_D16(48)
      : "l"(da), "l"(db));
}
#undef WS_D16
#undef WS_R16

// A consumer thread (warpgroups 2 and 3; warpgroup c = ws_tid() >> 7 takes rows 64 c.. of the tile): per K step,
// wait for the stage to be full, issue its four k16 wgmmas (slice j: 32 bytes further along both operands' swizzled
// rows, +2 in the descriptors' address fields) as one group, wait until at most that group is in flight (so step
// s - 1's wgmmas are done) and release step s - 1's stage. After the loop, the last group, then its stage.
template <int BM>
__device__ __forceinline__ void ws_consume(int steps, uint32_t ring, uint32_t bars, float (&acc)[BM / 2]) {
  const uint32_t full = bars, empty = bars + 8 * WS_STAGES;
  const uint32_t a_rows = (ws_tid() >> 7) * 64 * 128;
  int st = 0, prev = 0;
  uint32_t parity = 0;
  for (int s = 0; s < steps; ++s) {
    mbar_wait(full + 8 * st, parity);
    const uint32_t stage = ring + st * WS_STAGE_BYTES;
    const uint64_t da = sw128_desc(stage + a_rows), db = sw128_desc(stage + WS_DEC_A);
    wgmma_fence();
    fence_regs(acc);
#ifndef WG_SKIP_MMA
#pragma unroll
    for (int j = 0; j < 4; ++j) wgmma_ss<BM>(acc, da + 2 * j, db + 2 * j);
#endif
    wgmma_commit();
    fence_regs(acc);
    wgmma_wait<1>();
    fence_regs(acc);
    if (s > 0) mbar_arrive(empty + 8 * prev);
    prev = st;
    if (++st == WS_STAGES) {
      st = 0;
      parity ^= 1;
    }
  }
  wgmma_wait<0>();
  fence_regs(acc);
  if (steps > 0) mbar_arrive(empty + 8 * prev);
}

// A warp-specialised CTA's tile: barriers initialised, roles split, the consumers run the epilogue as a pipeline's
// warpgroups do (store_tile / split_k_last with WS: their own index and barrier).
template <int BM, bool PRE>
__device__ __forceinline__ void ws_run_tile(const Params& p, uint8_t* smem) {
  wg_mark(0);
  const uint32_t ring = smem_u32(smem), bars = ring + WS_RING_BYTES;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < WS_STAGES; ++i) {
      mbar_init(bars + 8 * i, WS_PRODUCERS);                   // full
      mbar_init(bars + 8 * (WS_STAGES + i), WS_CONSUMERS);     // empty
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x < WS_PRODUCERS) {
    setmaxnreg_dec<WS_PRODUCER_REGS>();
    ws_produce<BM, PRE>(p, ring, bars);
    return;
  }
  setmaxnreg_inc<WS_CONSUMER_REGS>();
  float acc[BM / 2];
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) acc[i] = 0.f;
  ws_consume<BM>(tile_of(p).steps, ring, bars, acc);
  const Tile t = tile_of(p);
  if (t.ws != nullptr && !split_k_last<BM, true>(t, acc)) return;
  store_tile<BM, false, true>(t, acc, ring);
}

template <bool PRE>
__device__ __forceinline__ void ws_run_any(const Params& p, uint8_t* smem) {
  const int bm = p.tiles[2 * blockIdx.x].w;
  if (bm == 128) {
    ws_run_tile<128, PRE>(p, smem);
  } else if (bm == 96) {
    ws_run_tile<96, PRE>(p, smem);
  } else {
    ws_run_tile<64, PRE>(p, smem);
  }
}

// Programmatic dependent launch (PDL, sm_90; host.choose_pdl): the next kernel in the queue may be scheduled once
// every CTA of this one has started, and this kernel reads and writes nothing until every kernel queued before it
// has finished and its writes are visible (the pre-pass rewrites the scratch the last main kernel read).
// Both instructions are no-ops in a launch without the attribute.
__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Early prefetch (issue 19): between the two PDL instructions, i.e. while the kernel before may still run, read
// this CTA's tile and ask L2 for the first STAGES K steps of its B rows and scale atoms (and of A's rows and atoms
// when A is raw). A prefetch changes no value (L2 is where every SM's writes meet), so it is sound whatever the
// kernel before writes; the loads after the wait then find the lines in L2 (and the tile in L1) instead of HBM.
// Only in the predecoded entry's CTAs of THREADS (grids of several waves): measured on the H200 (2026-12-02,
// bench.py --time, kernels alone, two rounds in one call, us) 112.5 -> 110.8 and 68.6 -> 67.1 on the two G = 8
// benchmarks; every CTA prefetching had cost the paired single-wave ones 31.2 -> 31.6 and 16.4 -> 16.6, and even
// compiled in but skipped it cost the raw entry 16.4 -> 16.6 on g2_n4096_k1536, so the raw entry has none (its
// SASS is -DWG_NO_EARLY's). -DWG_NO_EARLY leaves it out everywhere (for A/B runs).
template <bool PRE>
__device__ __forceinline__ void early_prefetch(const Params& p) {
  const int4 w = p.tiles[2 * blockIdx.x], ks = p.tiles[2 * blockIdx.x + 1];
  const int g = w.x, M = p.m[g], N = p.n[g], K = p.k[g];
  const int tid = threadIdx.x, k0 = ks.x;  // a CTA of THREADS: one pipeline from the tile's first K step
  const size_t row_bytes = K / 2;
  const auto l2 = [](const uint8_t* a) { asm volatile("prefetch.global.L2 [%0];" ::"l"(a)); };
  const uint8_t* b = reinterpret_cast<const uint8_t*>(p.addr[1 * MAX_GROUPS + g]);
  const uint8_t* sfb = reinterpret_cast<const uint8_t*>(p.addr[4 * MAX_GROUPS + g]);
  if (tid < BN) {
    const uint8_t* row = b + (size_t)min(w.z + tid, N - 1) * row_bytes + k0 * ROW_BYTES;
    l2(row);
    l2(row + STAGES * ROW_BYTES - 1);  // the steps may straddle two lines
    if (tid < STAGES * 4) l2(sfb + ((size_t)(w.z >> 7) * (K / 64) + k0) * 512 + tid * 128);
    return;
  }
  if constexpr (!PRE) {
    const int j = tid - BN;
    const uint8_t* a = reinterpret_cast<const uint8_t*>(p.addr[0 * MAX_GROUPS + g]);
    const uint8_t* sfa = reinterpret_cast<const uint8_t*>(p.addr[3 * MAX_GROUPS + g]);
    if (j < w.w && w.y + j < M) {
      const uint8_t* row = a + (size_t)(w.y + j) * row_bytes + k0 * ROW_BYTES;
      l2(row);
      l2(row + STAGES * ROW_BYTES - 1);
    }
    if (j < 2 * STAGES * 4) {
      const int atom = min((w.y >> 7) + j / (STAGES * 4), (M - 1) >> 7);
      l2(sfa + ((size_t)atom * (K / 64) + k0) * 512 + (j % (STAGES * 4)) * 128);
    }
  }
}

template <bool PRE>
__device__ __forceinline__ void main_begin(const Params& p) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#ifndef WG_NO_EARLY
  if constexpr (PRE) {
    if (blockDim.x == THREADS) early_prefetch<PRE>(p);
  }
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

}  // namespace

// Two CTAs of THREADS per SM, or one paired CTA: 128 registers a thread either way. Two entry points, A decoded in
// the loop (raw) or copied from the pre-pass's scratch (predecoded): as one function, ptxas serialised the wgmmas
// (C7512, too few registers) and lengthened the raw loop.
extern "C" __global__ void __launch_bounds__(2 * THREADS, 1) fp4_group_gemm_sm90(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  main_begin<false>(p);
  run_any<0>(p, reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)));
}

extern "C" __global__ void __launch_bounds__(2 * THREADS, 1) fp4_group_gemm_sm90_pre(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  main_begin<true>(p);
  run_any<1>(p, reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)));
}

// The int8 entry's start: the next kernel may be scheduled (as main_begin), but griddepcontrol.wait comes later, in
// its loops' prologues (s8_wait), after the copies of B's first steps. Reading B and its scales (and the tile table)
// before it is sound because this kernel always follows the int8 pre-pass (host.choose_s8 implies it), and this one
// starts only once every CTA of the pre-pass has started. Plain-launched, the pre-pass began only once everything
// queued before it had finished, so only its own writes (A's scratch, the flags) are pending, and those are
// read after the wait. Under PDL (host.choose_pre_pdl) the previous call's main kernel may still run too: it writes
// only its c tensors and the plan's buffers, never this call's B (unless an input aliases the previous call's c).
// Measured (H200, 2026-12-03, one leaderboard-like call, torch.profiler):
// the pre-pass took 5.8, 4.2, 3.1 and 2.7 us of the four benchmarks' 97.6, 63.8, 26.9 and 15.3.
__device__ __forceinline__ void s8_begin() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// The int8 path (run_tile_s8), after fp4_predecode_a_s8; the raw path's shared memory (its fallback's).
extern "C" __global__ void __launch_bounds__(2 * THREADS, 1) fp4_group_gemm_sm90_s8(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  s8_begin();
  run_any<2>(p, reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)));
}

// The warp-specialised loop (ws_run_tile): one CTA of WS_THREADS per SM; the register file split by setmaxnreg.
// Two entry points as above, A decoded by the producers (raw) or copied from the pre-pass's scratch (predecoded).
extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) fp4_group_gemm_sm90_ws(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  ws_run_any<false>(p, reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)));
}

extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) fp4_group_gemm_sm90_ws_pre(
    const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  ws_run_any<true>(p, reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)));
}

// A pre-pass block's group (MAX_GROUPS past the last) and, in `b`, its index within the group's blocks: each group
// takes ceil(mpad x K steps / PRE_THREADS) blocks in turn.
__device__ __forceinline__ int prepass_group(const Params& p, int& b) {
  int g = 0;
  for (; g < MAX_GROUPS; ++g) {
    const int blocks = (p.mpad[g] * (p.k[g] / BK) + PRE_THREADS - 1) / PRE_THREADS;
    if (b < blocks) break;
    b -= blocks;
  }
  return g;
}

// The pre-pass (launched before fp4_group_gemm_sm90 when Params::predecode is set, same parameter block): every
// group's A, decoded exactly as ADecoder decodes it (value x scale x 2^-14 as fp16, the same K order and swizzle),
// into the scratch at pre[g]: K step s, row r at (s * mpad + r) * 128 bytes; rows from M to mpad are zero. One thread
// per (K step, row), consecutive threads on consecutive rows; blocks are numbered across the groups in turn, each
// group taking ceil(mpad x K steps / PRE_THREADS) of them. The thread decodes the row's 32 bytes of the step (scale
// columns 0..3) into its 8 chunks of 16 bytes: chunk c is pair c % 4 of words (2h + 0/1, c / 4) for h = 0, 1 side by
// side, which is what ADecoder's two threads per row store with 8-byte stores. Since idx = s * mpad + r, a warp's rows
// are one contiguous block of the scratch: each thread puts its row in the warp's 4 KB of shared memory, already
// swizzled (mpad is a multiple of 32, so r & 7 is the lane's, and the 16-byte stores of 8 lanes hit 8 distinct
// chunks), and the warp then stores the block 512 contiguous bytes per instruction. Storing each thread's row
// straight to global memory (16 bytes to 32 lines per instruction) took 20 us on g8_n4096_k7168 (ncu, H200).
extern "C" __global__ void __launch_bounds__(PRE_THREADS) fp4_predecode_a(const __grid_constant__ Params p) {
  __shared__ __align__(128) uint8_t rows[PRE_THREADS * 128];
  pdl_begin();
  int b = blockIdx.x;
  const int g = prepass_group(p, b);
  if (g == MAX_GROUPS) return;
  const int mpad = p.mpad[g], K = p.k[g], idx = b * PRE_THREADS + threadIdx.x, total = mpad * (K / BK);
  const int lane = threadIdx.x & 31, first = idx - lane;  // the warp's first row of the scratch
  if (first >= total) return;
  const uint32_t row_at = smem_u32(rows) + threadIdx.x * 128;
  if (idx < total) {
    const int s = idx / mpad, r = idx - s * mpad;
    const uint32_t swz = (r & 7) << 4;
    if (r >= p.m[g]) {
#pragma unroll
      for (int c = 0; c < 8; ++c) sts128(row_at + ((c << 4) ^ swz), 0, 0, 0, 0);
    } else {
      const uint8_t* a =
          reinterpret_cast<const uint8_t*>(p.addr[0 * MAX_GROUPS + g]) + (size_t)r * (K / 2) + s * ROW_BYTES;
      const uint8_t* sfa = reinterpret_cast<const uint8_t*>(p.addr[3 * MAX_GROUPS + g]);
      const uint4 x[2] = {__ldg(reinterpret_cast<const uint4*>(a)), __ldg(reinterpret_cast<const uint4*>(a) + 1)};
      const uint32_t sc = __ldg(reinterpret_cast<const uint32_t*>(
          sfa + ((size_t)(r >> 7) * (K / 64) + s) * 512 + (r & 31) * 16 + ((r >> 5) & 3) * 4));
      const uint32_t s2[2] = {scales_f16x2(sc), scales_f16x2(sc >> 16)};  // columns (0, 1) and (2, 3)
#pragma unroll
      for (int wi = 0; wi < 2; ++wi) {
        uint32_t lo[2][4], hi[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          decode_word<0>(wi ? x[h].y : x[h].x, s2[h], lo[h]);
          decode_word<1>(wi ? x[h].w : x[h].z, s2[h], hi[h]);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          sts128(row_at + (((4 * wi + q) << 4) ^ swz), lo[0][q], hi[0][q], lo[1][q], hi[1][q]);
        }
      }
    }
  }
  __syncwarp();
  uint8_t* dst = reinterpret_cast<uint8_t*>(p.pre[g]) + (size_t)first * 128 + lane * 16;
  const uint32_t src = smem_u32(rows) + (threadIdx.x - lane) * 128 + lane * 16;
#pragma unroll
  for (int i = 0; i < 8; ++i) {  // rows 4i .. 4i + 3 of the warp's 32, eight lanes a row
    if (first + 4 * i + (lane >> 3) < total) stg128(dst + i * 512, lds128(src + i * 512));
  }
}

// The int8 pre-pass (before fp4_group_gemm_sm90_s8, same parameter block): every group's A as int8 2 x value x scale
// into the scratch at pre[g], K step s, row r at (s * mpad + r) * 64 bytes, rows from M to mpad zero; threads and
// blocks as fp4_predecode_a. Byte p of a row's step (chunk c = p / 16 = 2 j + h, register q = p / 4 % 4, byte i)
// holds logical K 16 q + 8 j + 4 h + i, as BDecoder8 places B: nibbles 4h..4h+3 of word 2q + j, under scale column
// q; chunk c is stored at chunk c ^ ((r >> 1) & 3) (the 64-byte swizzle; mpad and tile starts are multiples of 32).
// A row whose four scales are not all 1 or 2 sets flags[g] = epoch (the group's tiles then take the fp16 fallback).
extern "C" __global__ void __launch_bounds__(PRE_THREADS) fp4_predecode_a_s8(const __grid_constant__ Params p) {
  __shared__ __align__(128) uint8_t rows[PRE_THREADS * S8_ROW_BYTES];
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  int b = blockIdx.x;
  const int g = prepass_group(p, b);
  if (g == MAX_GROUPS) return;
  const int mpad = p.mpad[g], K = p.k[g], idx = b * PRE_THREADS + threadIdx.x, total = mpad * (K / BK);
  const int lane = threadIdx.x & 31, first = idx - lane;
  if (first >= total) return;
  const uint32_t row_at = smem_u32(rows) + threadIdx.x * S8_ROW_BYTES;
  uint32_t bad = 0;
  if (idx < total) {
    const int s = idx / mpad, r = idx - s * mpad;
    const uint32_t swz = ((r >> 1) & 3) << 4;
    if (r >= p.m[g]) {
#pragma unroll
      for (int c = 0; c < 4; ++c) sts128(row_at + ((c << 4) ^ swz), 0, 0, 0, 0);
    } else {
      const uint8_t* a =
          reinterpret_cast<const uint8_t*>(p.addr[0 * MAX_GROUPS + g]) + (size_t)r * (K / 2) + s * ROW_BYTES;
      const uint8_t* sfa = reinterpret_cast<const uint8_t*>(p.addr[3 * MAX_GROUPS + g]);
      const uint4 x0 = __ldg(reinterpret_cast<const uint4*>(a)), x1 = __ldg(reinterpret_cast<const uint4*>(a) + 1);
      const uint32_t w[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      const uint32_t sc = __ldg(reinterpret_cast<const uint32_t*>(
          sfa + ((size_t)(r >> 7) * (K / 64) + s) * 512 + (r & 31) * 16 + ((r >> 5) & 3) * 4));
      uint32_t out[4][4];  // [chunk][register]
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t t0, t1;
        s8_tables((sc >> (8 * q)) & 0xff, t0, t1, bad);
        s8_word(w[2 * q], t0, t1, out[0][q], out[1][q]);
        s8_word(w[2 * q + 1], t0, t1, out[2][q], out[3][q]);
      }
#pragma unroll
      for (int c = 0; c < 4; ++c) sts128(row_at + ((c << 4) ^ swz), out[c][0], out[c][1], out[c][2], out[c][3]);
    }
  }
  // Launched under PDL (host.choose_pre_pdl), everything above ran while the previous call's main kernel may still
  // run (it reads the scratch and the flags): every global write comes after the wait. Plain-launched, a no-op.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (bad) p.flags[g] = p.epoch;
  __syncwarp();
  uint8_t* dst = reinterpret_cast<uint8_t*>(p.pre[g]) + (size_t)first * S8_ROW_BYTES + lane * 16;
  const uint32_t src = smem_u32(rows) + (threadIdx.x - lane) * S8_ROW_BYTES + lane * 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // rows 8i .. 8i + 7 of the warp's 32, four lanes a row
    if (first + 8 * i + (lane >> 2) < total) stg128(dst + i * 512, lds128(src + i * 512));
  }
}
