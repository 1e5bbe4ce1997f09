"""submissions/wgmma_sm90 kernel.cu's register decode, emulated on the CPU bit for bit (numpy, torch for e4m3fn).

- decode_word: every byte value in every byte position of a word, times every finite e4m3fn scale taken from either
  half of the f16x2 that scales_f16x2 makes (cvt.rn.f16x2.e4m3x2: low byte -> low half), gives the fp16 pattern of
  e2m1 value x scale x 2^-14, exactly (the product is an fp16 value), with nibbles (n0, n4), (n2, n6), (n1, n5),
  (n3, n7) in the four f16x2 results.
- The K permutation: A's writer (ADecoder, both word splits) places each decoded pair at the logical K that B's
  wgmma fragment (BDecoder) holds at the same slice and position, through the 128-byte swizzle, for every A row, and
  every half is scaled by the scale of its own 16-value K block.
- The pre-pass (fp4_predecode_a): emulated on a full-range input (every e2m1 code, scales down to subnormals and
  zero), its scratch holds, at every (K step, row, slice, position) of the B fragments, the fp16 pattern of the
  logical K's value x scale x 2^-14 (values from problems.nvfp4_group_gemm.formats on the plain scales, not the blocked
  copy the kernel reads), through the swizzle, rows past M zero; and its thread's stores match ADecoder's placement.

The emulation mirrors kernel.cu's code; the test also checks that kernel.cu still has the lines it mirrors.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from ._load import variant_dir

KERNEL = (variant_dir("wgmma_sm90") / "kernel.cu").read_text()

#: e2m1 magnitudes by code (sign-magnitude: bit 3 is the sign).
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1_value(nibble: np.ndarray) -> np.ndarray:
    mag = E2M1[nibble & 7]
    return np.where(nibble & 8, -mag, mag)


def e4m3_to_f16(codes: np.ndarray) -> np.ndarray:
    """uint8 e4m3fn codes -> float16 (exact: every e4m3fn value is an fp16 value)."""
    t = torch.from_numpy(codes.astype(np.uint8)).view(torch.float8_e4m3fn)
    return t.to(torch.float16).numpy()


# --- the kernel's operations, on uint32 arrays -------------------------------------------------------------------

def high_bytes(w: np.ndarray) -> np.ndarray:
    return (w & np.uint32(0x80808080)) | ((w >> np.uint32(3)) & np.uint32(0x0E0E0E0E))


def prmt0(a: np.ndarray, sel: int) -> np.ndarray:
    """prmt.b32 d, a, 0, sel (default mode): byte i of d is byte (sel >> 4i) & 7 of {0:a}, or its sign replicated
    when bit 3 of that selector nibble is set."""
    src = [(a >> np.uint32(8 * i)) & np.uint32(0xFF) for i in range(4)] + [np.zeros_like(a)] * 4
    out = np.zeros_like(a)
    for i in range(4):
        n = (sel >> (4 * i)) & 0xF
        byte = src[n & 7]
        if n & 8:
            byte = np.where(byte & np.uint32(0x80), np.uint32(0xFF), np.uint32(0))
        out |= byte << np.uint32(8 * i)
    return out


def as_f16x2(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint32 -> (low half, high half) as float16."""
    return ((w & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16),
            (w >> np.uint32(16)).astype(np.uint16).view(np.float16))


def scales_f16x2(code16: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cvt.rn.f16x2.e4m3x2 of the low 16 bits: (low half from the low byte, high half from the high byte)."""
    return e4m3_to_f16(code16 & 0xFF), e4m3_to_f16((code16 >> 8) & 0xFF)


def hmul2_half(a: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mul.rn.f16x2 of a by (s, s): fp16 x fp16 is exact in float32, so numpy's float16 product rounds once."""
    lo, hi = as_f16x2(a)
    return ((lo.astype(np.float32) * s.astype(np.float32)).astype(np.float16),
            (hi.astype(np.float32) * s.astype(np.float32)).astype(np.float16))


PRMT_SELECTORS = (0x2404, 0x3414)


def decode_word(x: np.ndarray, s: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """kernel.cu decode_word with the scale half already chosen: four (low half, high half) pairs."""
    even, odd = high_bytes(x << np.uint32(4)), high_bytes(x)
    return [hmul2_half(prmt0(src, sel), s) for src in (even, odd) for sel in PRMT_SELECTORS]


#: Nibble n_i of a word (bits 4i..4i+3) -> (result p, half) as kernel.cu's comment states.
NIBBLE_PLACE = {0: (0, 0), 4: (0, 1), 2: (1, 0), 6: (1, 1), 1: (2, 0), 5: (2, 1), 3: (3, 0), 7: (3, 1)}


def test_kernel_cu_has_the_mirrored_decode():
    assert "return (w & 0x80808080u) | ((w >> 3) & 0x0E0E0E0Eu);" in KERNEL
    body = re.search(r"void decode_word\(uint32_t x, uint32_t s2, uint32_t \(&out\)\[4\]\) \{(.*?)\n\}", KERNEL,
                     re.S).group(1)
    assert "const uint32_t even = high_bytes(x << 4), odd = high_bytes(x);" in body
    assert re.findall(r"out\[(\d)\] = hmul2_half<H>\(prmt\((even|odd), (0x[0-9a-f]+)\), s2\);", body) == [
        ("0", "even", "0x2404"), ("1", "even", "0x3414"), ("2", "odd", "0x2404"), ("3", "odd", "0x3414")]
    assert 'asm("cvt.rn.f16x2.e4m3x2 %0, %1;\\n" : "=r"(h) : "h"(static_cast<uint16_t>(code)));' in KERNEL
    assert "mov.b32 {l, h}, %2;\\nmov.b32 t, {l, l};" in KERNEL and "mov.b32 {l, h}, %2;\\nmov.b32 t, {h, h};" in KERNEL


def test_prmt_emulation_places_bytes_as_documented():
    a = np.array([0x44332211], dtype=np.uint32)
    assert prmt0(a, 0x2404)[0] == 0x33001100 and prmt0(a, 0x3414)[0] == 0x44002200
    assert prmt0(np.array([0x80], dtype=np.uint32), 0x4448)[0] == 0xFF  # sign mode, for completeness


def test_scales_f16x2_low_byte_is_low_half():
    lo, hi = scales_f16x2(np.array([0x3840], dtype=np.uint32))  # e4m3 0x40 = 2.0, 0x38 = 1.0
    assert (float(lo[0]), float(hi[0])) == (2.0, 1.0)


@pytest.mark.parametrize("half", [0, 1])
def test_decode_word_is_value_times_scale_times_2_pow_minus_14_exactly(half):
    # every byte value in every position (b * 0x01010101), and random words; every finite e4m3fn code, as the
    # chosen half of a scale pair whose other half is a different code
    rng = np.random.default_rng(0)
    words = np.concatenate([np.arange(256, dtype=np.uint32) * np.uint32(0x01010101),
                            rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)])
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint32)  # 0x7F, 0xFF: NaN
    w, c = np.meshgrid(words, codes, indexing="ij")
    w, c = w.ravel(), c.ravel()
    other = (c * np.uint32(37) + np.uint32(11)) & np.uint32(0x7E)
    code16 = (c | (other << np.uint32(8))) if half == 0 else (other | (c << np.uint32(8)))
    s = scales_f16x2(code16)[half]
    out = decode_word(w, s)
    scale = e4m3_to_f16(c).astype(np.float64)
    for i in range(8):
        nib = (w >> np.uint32(4 * i)) & np.uint32(0xF)
        exact = e2m1_value(nib) * scale * 2.0**-14
        want = exact.astype(np.float16)
        assert np.array_equal(want.astype(np.float64), exact), "the product is an fp16 value"
        p, h = NIBBLE_PLACE[i]
        got = out[p][h]
        # bit patterns (so -0 and +0 are told apart)
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), (i, p, h)


# --- the K permutation shared by A (shared memory, swizzled) and B (wgmma register fragments) ----------------------

def symbolic_decode_word(word_nibbles: list) -> list[tuple]:
    """decode_word on labels: which nibble lands in each (result, half), derived by running the bit emulation on
    words with one nonzero nibble (code 2, value 1.0) and unit scale."""
    out = [[None, None] for _ in range(4)]
    one = np.ones(1, dtype=np.float16)
    for i in range(8):
        res = decode_word(np.array([2 << (4 * i)], dtype=np.uint32), one)
        hits = [(p, h) for p in range(4) for h in range(2) if float(res[p][h][0]) != 0.0]
        assert len(hits) == 1
        p, h = hits[0]
        out[p][h] = word_nibbles[i]
    return [tuple(o) for o in out]


def word_labels(word: int) -> list[int]:
    """Logical K of the 8 nibbles of 32-bit word `word` of a row (bytes 4w..4w+3; the low nibble of byte b is K 2b)."""
    return [2 * (4 * word + i // 2) + i % 2 for i in range(8)]


def a_placement(bm: int) -> dict:
    """ADecoder: (row, slice j, position k in the slice) -> (logical K, scale column used), from the thread's words,
    its scale columns, the pair stores and the 128-byte swizzle (undone here: chunk = physical chunk ^ (row & 7))."""
    threads = 256
    t_per_row = threads // (128 if bm > 64 else 64)
    words_per = 8 // t_per_row
    placed = {}
    for tid in range(t_per_row * bm):
        r, q = divmod(tid, t_per_row)
        first = q * words_per
        col0 = first // 2                       # sf: the thread's first scale column
        swz = r & 7
        stores = []                              # (chunk, byte offset in chunk, [(label, scale col) x 2 halves])
        if words_per == 4:
            # x.x, x.y, x.z, x.w = words first..first+3 = (2h, 0), (2h, 1), (2h + 1, 0), (2h + 1, 1);
            # lo = decode_word<0>(x.x or x.y): scale half 0 = column col0; hi = decode_word<1>: column col0 + 1
            for wi in range(2):
                lo = symbolic_decode_word(word_labels(first + wi))
                hi = symbolic_decode_word(word_labels(first + 2 + wi))
                for p in range(4):
                    stores.append((4 * wi + p, 4 * col0, [(x, col0) for x in lo[p]]))
                    stores.append((4 * wi + p, 4 * col0 + 4, [(x, col0 + 1) for x in hi[p]]))
        else:
            for i in range(words_per):
                w = first + i
                wi = i if words_per == 2 else q & 1
                v = symbolic_decode_word(word_labels(w))
                for p in range(4):
                    stores.append((4 * wi + p, 4 * col0, [(x, col0) for x in v[p]]))
        for chunk, off, halves in stores:
            phys = r * 128 + (((chunk << 4) ^ (swz << 4)) + off)  # off[c] = dec_row + ((c << 4) ^ swz)
            assert phys // 128 == r
            byte = phys % 128
            logical = ((byte >> 4) ^ swz) * 16 + (byte & 15)   # the swizzle undone
            for h, lab in enumerate(halves):
                b = logical + 2 * h
                key = (r, b // 32, (b % 32) // 2)
                assert key not in placed
                placed[key] = lab
    return placed


def b_fragments() -> dict:
    """BDecoder: (tq, slice j, position k) -> (logical K, scale column) of the wgmma A fragment (row r0; row r0 + 8
    is the same with the next row's bytes). Fragment register reg of slice j holds k = 2 tq + 8 (reg >= 2), +1 in
    its high half."""
    frag = {}
    for tq in range(4):
        v = [symbolic_decode_word(word_labels(2 * tq + wi)) for wi in range(2)]  # words (tq, 0), (tq, 1)
        for j in range(4):
            wi, p = j >> 1, 2 * (j & 1)
            regs = {0: v[wi][p], 2: v[wi][p + 1]}  # f[j][0] and f[j][2] (rows r0; 1 and 3: row r0 + 8)
            for reg, pair in regs.items():
                for h in range(2):
                    k = 2 * tq + 8 * (reg >= 2) + h
                    frag[(tq, j, k)] = (pair[h], tq)
    return frag


@pytest.mark.parametrize("bm", [64, 96, 128])
def test_a_placement_and_b_fragments_pair_the_same_logical_k(bm):
    a = a_placement(bm)
    b = b_fragments()
    assert len(b) == 64 and sorted({lab for lab, _ in b.values()}) == list(range(64))
    for r in range(bm):
        seen = set()
        for (tq, j, k), (lab_b, col_b) in b.items():
            lab_a, col_a = a[(r, j, k)]
            assert lab_a == lab_b, (r, tq, j, k)
            assert col_a == lab_a // 16 and col_b == lab_b // 16  # each half scaled by its own K block's scale
            seen.add(lab_a)
        assert seen == set(range(64))


# --- the pre-pass (fp4_predecode_a): A decoded once into the scratch, the image of the decoded buffers -------------

def predecode_emulation(a: np.ndarray, sfa_storage: np.ndarray, m: int, k: int, mpad: int) -> np.ndarray:
    """kernel.cu fp4_predecode_a, vectorised over every (K step s, row r < M) thread: [K / 64, mpad, 128] bytes of
    scratch. ``a``: the [M, K/2] e2m1 bytes; ``sfa_storage``: the blocked scales as stored (uint8, flat)."""
    steps = k // 64
    out = np.zeros((steps, mpad, 128), dtype=np.uint8)
    s, r = np.meshgrid(np.arange(steps), np.arange(m), indexing="ij")
    s, r = s.ravel(), r.ravel()
    row = a[r].reshape(len(r), steps, 32)[np.arange(len(r)), s]          # the step's 32 bytes of row r
    words = row.view("<u4")                                             # words 0..7 (x[0] = 0..3, x[1] = 4..7)
    sc_off = ((r >> 7) * (k // 64) + s) * 512 + (r & 31) * 16 + ((r >> 5) & 3) * 4
    sc = sfa_storage[sc_off[:, None] + np.arange(4)].astype(np.uint32)   # the 32-bit load: columns 0..3
    code = sc[:, 0] | (sc[:, 1] << 8) | (sc[:, 2] << 16) | (sc[:, 3] << 24)
    s2 = [scales_f16x2(code & 0xFFFF), scales_f16x2(code >> 16)]        # s2[h]: columns (2h, 2h + 1)
    swz = (r & 7) << 4
    for wi in range(2):
        lo = [decode_word(words[:, 4 * h + wi], s2[h][0]) for h in range(2)]      # decode_word<0>: half 0
        hi = [decode_word(words[:, 4 * h + 2 + wi], s2[h][1]) for h in range(2)]  # decode_word<1>: half 1
        for q in range(4):
            chunk = np.stack([half.view(np.uint16) for pair in (lo[0][q], hi[0][q], lo[1][q], hi[1][q])
                              for half in pair], axis=1)                  # make_uint4(lo0, hi0, lo1, hi1)
            byte = (((4 * wi + q) << 4) ^ swz)[:, None] + np.arange(16)
            out[s[:, None], r[:, None], byte] = chunk.view(np.uint8).reshape(len(r), 16)
    return out


def test_kernel_cu_has_the_mirrored_pre_pass():
    body = re.search(r"void __launch_bounds__\(PRE_THREADS\) fp4_predecode_a\(.*?\n\}", KERNEL, re.S).group(0)
    for line in ("const int s = idx / mpad, r = idx - s * mpad;",
                 "const int lane = threadIdx.x & 31, first = idx - lane;  // the warp's first row of the scratch",
                 "const uint32_t swz = (r & 7) << 4;",
                 "sfa + ((size_t)(r >> 7) * (K / 64) + s) * 512 + (r & 31) * 16 + ((r >> 5) & 3) * 4));",
                 "const uint32_t s2[2] = {scales_f16x2(sc), scales_f16x2(sc >> 16)};",
                 "decode_word<0>(wi ? x[h].y : x[h].x, s2[h], lo[h]);",
                 "decode_word<1>(wi ? x[h].w : x[h].z, s2[h], hi[h]);",
                 "sts128(row_at + (((4 * wi + q) << 4) ^ swz), lo[0][q], hi[0][q], lo[1][q], hi[1][q]);",
                 "for (int c = 0; c < 8; ++c) sts128(row_at + ((c << 4) ^ swz), 0, 0, 0, 0);",
                 "uint8_t* dst = reinterpret_cast<uint8_t*>(p.pre[g]) + (size_t)first * 128 + lane * 16;",
                 "const uint32_t src = smem_u32(rows) + (threadIdx.x - lane) * 128 + lane * 16;",
                 "if (first + 4 * i + (lane >> 3) < total) stg128(dst + i * 512, lds128(src + i * 512));"):
        assert line in body, line


@pytest.mark.parametrize("m, k", [(200, 256), (40, 128)])
def test_pre_pass_scratch_is_the_decoded_buffer_image_of_every_step(m, k):
    from problems.nvfp4_group_gemm.formats import decode_e2m1, decode_e4m3fn
    from problems.nvfp4_group_gemm.inputs import generate_input

    sizes_m = [m]
    data = generate_input(sizes_m, [128], [k], 1, seed=11, data="full-range", device="cpu")
    (a_t, _, _), (sfa_plain, _), (sfa_blocked, _) = data[0][0], data[1][0], data[2][0]
    a = a_t.view(torch.uint8).reshape(m, k // 2).numpy()
    storage = sfa_blocked.view(torch.uint8).permute(5, 2, 4, 0, 1, 3).reshape(-1).numpy()
    mpad = {200: 224, 40: 64}[m]                                      # sum(cover_m(M))
    out = predecode_emulation(a, storage, m, k, mpad)

    values = decode_e2m1(a_t.view(torch.uint8).reshape(m, k // 2)).numpy()          # [M, K] (low nibble first)
    scales = decode_e4m3fn(sfa_plain.view(torch.uint8).reshape(m, k // 16)).numpy()   # [M, K / 16]
    want_f = values * np.repeat(scales, 16, axis=1) * 2.0**-14
    want = want_f.astype(np.float16)
    assert np.array_equal(want.astype(np.float64), want_f), "each product is an fp16 value"
    halves = out.view(np.uint16).reshape(k // 64, mpad, 64)
    checked = 0
    for (tq, j, kk), (lab, col) in b_fragments().items():
        logical = 32 * j + 2 * kk                                      # byte of (slice j, position kk), unswizzled
        for r in range(mpad):
            phys = (((logical >> 4) ^ (r & 7)) << 4) | (logical & 15)
            got = halves[:, r, phys // 2]
            if r >= m:
                assert not got.any(), (r, j, kk)
                continue
            exp = want[r, 64 * np.arange(k // 64) + lab].view(np.uint16)
            assert np.array_equal(got, exp), (r, tq, j, kk)
            checked += 1
    assert checked == 64 * m


@pytest.mark.parametrize("bm", [64, 96, 128])
def test_pre_pass_places_each_half_where_a_decoder_does(bm):
    # Labels instead of values: the pre-pass thread of row r stores, per chunk c, (pair c % 4 of word (h, c / 4)'s
    # lo, then hi) for h = 0, 1; ADecoder's two threads of the row store the same 8 bytes each (a_placement).
    placed = {}
    for r in range(bm):
        swz = r & 7
        for wi in range(2):
            for q in range(4):
                halves = []
                for h in range(2):
                    lo = symbolic_decode_word(word_labels(4 * h + wi))
                    hi = symbolic_decode_word(word_labels(4 * h + 2 + wi))
                    halves += [(x, 2 * h) for x in lo[q]] + [(x, 2 * h + 1) for x in hi[q]]
                byte0 = ((4 * wi + q) << 4) ^ (swz << 4)
                for i, lab in enumerate(halves):
                    phys = byte0 + 2 * i
                    logical = ((phys >> 4) ^ swz) * 16 + (phys & 15)
                    placed[(r, logical // 32, (logical % 32) // 2)] = lab
    assert placed == a_placement(bm)


# --- the warp-specialised producers' writer (ws_decode_row) and what the SS wgmma's descriptors read -------------

def ws_stage_emulation(rows_bytes: np.ndarray, scale_words: np.ndarray) -> np.ndarray:
    """kernel.cu WsLoader + ws_decode_row for one K step: thread r copies its row's 32 bytes as two 16-byte chunks
    (chunk h at h * rows * 16 + 16 r of the raw slot) and its four scale bytes (4 r), then decodes them into its
    128-byte row of the stage (chunk c stored at chunk c ^ (r & 7)). Returns [rows, 128] bytes of the stage.
    ``rows_bytes``: [rows, 32] uint8; ``scale_words``: [rows] uint32 (scale columns 0..3, low byte first)."""
    n = len(rows_bytes)
    raw = np.zeros(n * 32, dtype=np.uint8)
    for h in range(2):
        for r in range(n):
            raw[h * n * 16 + 16 * r:h * n * 16 + 16 * r + 16] = rows_bytes[r, 16 * h:16 * h + 16]
    out = np.zeros((n, 128), dtype=np.uint8)
    r = np.arange(n)
    x = [raw[(h * n * 16 + 16 * r)[:, None] + np.arange(16)].view("<u4") for h in range(2)]  # lds128 lo / hi
    code = scale_words.astype(np.uint32)
    s2 = [scales_f16x2(code & 0xFFFF), scales_f16x2(code >> 16)]
    swz = (r & 7) << 4
    for wi in range(2):
        lo = [decode_word(x[h][:, wi], s2[h][0]) for h in range(2)]          # wi ? x[h].y : x[h].x
        hi = [decode_word(x[h][:, 2 + wi], s2[h][1]) for h in range(2)]      # wi ? x[h].w : x[h].z
        for q in range(4):
            chunk = np.stack([half.view(np.uint16) for pair in (lo[0][q], hi[0][q], lo[1][q], hi[1][q])
                              for half in pair], axis=1)
            byte = (((4 * wi + q) << 4) ^ swz)[:, None] + np.arange(16)
            out[r[:, None], byte] = chunk.view(np.uint8).reshape(n, 16)
    return out


def descriptor_read(stage_rows: np.ndarray, row: int, j: int, kk: int) -> int:
    """The fp16 pattern a K-major, 128-byte-swizzled wgmma operand (sw128_desc: rows of 128 bytes, 8-row groups
    1024 bytes apart, the base 1024-aligned; slice j starts 32 bytes along) reads as element (row, k = 16 j + kk):
    logical byte 32 j + 2 kk of the row, its 16-byte chunk XORed with row & 7."""
    logical = 32 * j + 2 * kk
    phys = (((logical >> 4) ^ (row & 7)) << 4) | (logical & 15)
    return int(stage_rows[row, phys:phys + 2].view(np.uint16)[0])


def test_kernel_cu_has_the_mirrored_ws_writer():
    body = re.search(r"void ws_decode_row\(.*?\n\}", KERNEL, re.S).group(0)
    for line in ("const uint4 x[2] = {lds128(lo), lds128(hi)};", "const uint32_t sc = lds32(sc_at);",
                 "const uint32_t swz = (r & 7) << 4;",
                 "const uint32_t s2[2] = {scales_f16x2(sc), scales_f16x2(sc >> 16)};",
                 "decode_word<0>(wi ? x[h].y : x[h].x, s2[h], lo_w[h]);",
                 "decode_word<1>(wi ? x[h].w : x[h].z, s2[h], hi_w[h]);",
                 "sts128(dst + (((4 * wi + q) << 4) ^ swz), lo_w[0][q], hi_w[0][q], lo_w[1][q], hi_w[1][q]);"):
        assert line in body, line
    for line in ("sf_src = t.sfb + ((size_t)(n >> 7) * rest_k + t.k0) * 512 + (n & 31) * 16 + ((n >> 5) & 3) * 4;",
                 "sf_src = t.sfa + ((size_t)(m >> 7) * rest_k + t.k0) * 512 + (m & 31) * 16 + ((m >> 5) & 3) * 4;",
                 "raw_at = WS_RAW_B + 16 * r;", "raw_at = WS_RAW_A + 16 * r;",
                 "cp_async16_zfill(slot + raw_at + rows * 16, src + 16, bytes);",
                 "ws_decode_row(d_slot + WS_RAW_B + 16 * r, d_slot + WS_RAW_B + BN * 16 + 16 * r, "
                 "d_slot + WS_RAW_SFB + 4 * r,",
                 "ws_decode_row(d_slot + WS_RAW_A + 16 * r, d_slot + WS_RAW_A + BM_MAX * 16 + 16 * r,",
                 "const uint64_t da = sw128_desc(stage + a_rows), db = sw128_desc(stage + WS_DEC_A);",
                 "const uint32_t a_rows = (ws_tid() >> 7) * 64 * 128;",
                 "for (int j = 0; j < 4; ++j) wgmma_ss<BM>(acc, da + 2 * j, db + 2 * j);"):
        assert line in KERNEL, line


@pytest.mark.parametrize("rows, k", [(128, 256), (200, 128)])
def test_ws_stage_holds_value_times_scale_where_the_descriptor_reads_it_in_as_k_order(rows, k):
    """Full-range data (every e2m1 code, scales down to subnormals and zero): for every K step, row (B's tile rows
    0..127 of N, or A's rows, both written by ws_decode_row from the blocked scales the loader gathers), slice and
    position, the element the SS descriptor reads is the fp16 pattern of value x scale x 2^-14 of the logical K that
    A's placement (a_placement: ADecoder, the pre-pass) puts there, so both operands pair the same K."""
    from problems.nvfp4_group_gemm.formats import decode_e2m1, decode_e4m3fn
    from problems.nvfp4_group_gemm.inputs import generate_input

    data = generate_input([64], [rows], [k], 1, seed=13, data="full-range", device="cpu")
    (_, b_t, _), (_, sfb_plain), (_, sfb_blocked) = data[0][0], data[1][0], data[2][0]
    b = b_t.view(torch.uint8).reshape(rows, k // 2).numpy()
    storage = sfb_blocked.view(torch.uint8).permute(5, 2, 4, 0, 1, 3).reshape(-1).numpy()
    values = decode_e2m1(b_t.view(torch.uint8).reshape(rows, k // 2)).numpy()
    scales = decode_e4m3fn(sfb_plain.view(torch.uint8).reshape(rows, k // 16)).numpy()
    want = (values * np.repeat(scales, 16, axis=1) * 2.0**-14).astype(np.float16).view(np.uint16)
    place = a_placement(128)
    rest_k = k // 64
    for n0 in range(0, rows, 128):
        r = np.arange(128)
        n = np.minimum(n0 + r, rows - 1)                         # rows past N read the last row
        for s in range(rest_k):
            sf_off = ((n >> 7) * rest_k + s) * 512 + (n & 31) * 16 + ((n >> 5) & 3) * 4
            words = storage[sf_off[:, None] + np.arange(4)].astype(np.uint32)
            code = words[:, 0] | (words[:, 1] << 8) | (words[:, 2] << 16) | (words[:, 3] << 24)
            stage = ws_stage_emulation(b[n, 32 * s:32 * s + 32], code)
            for row in range(128):
                if n0 + row >= rows:
                    continue
                for j in range(4):
                    for kk in range(16):
                        lab, col = place[(row, j, kk)]
                        assert col == lab // 16
                        got = descriptor_read(stage, row, j, kk)
                        assert got == want[n0 + row, 64 * s + lab], (n0 + row, s, j, kk)


def test_ws_writer_places_each_half_where_a_decoder_and_the_pre_pass_do():
    # Labels: ws_decode_row is the pre-pass thread's decode and placement with shared-memory operands, so its
    # (row, slice, position) -> logical K map is a_placement's for every row of either operand.
    labels = np.zeros((128, 32), dtype=np.uint8)
    # one row of K labels is not expressible as e2m1 bytes; instead decode one-hot words and read back
    one = np.full(128, 0x38383838, dtype=np.uint32)              # e4m3fn 1.0 in every scale column
    place = a_placement(128)
    for lab in range(64):
        rows_bytes = labels.copy()
        rows_bytes[:, lab // 2] = 2 << (4 * (lab % 2))           # e2m1 code 2 (1.0) at logical K `lab`
        stage = ws_stage_emulation(rows_bytes, one)
        for row in (0, 5, 63, 64, 127):
            hits = [(j, kk) for j in range(4) for kk in range(16) if descriptor_read(stage, row, j, kk)]
            assert len(hits) == 1 and place[(row, *hits[0])][0] == lab, (lab, row, hits)
