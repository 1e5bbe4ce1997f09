"""submissions/wgmma_sm90 kernel.cu's int8 path (issue 19), emulated on the CPU bit for bit (numpy).

- s8_tables / s8_word: every byte value in every byte position of a word, under scale bytes 0x38 (1) and 0x40 (2),
  gives the int8 2 x e2m1 value x scale of each nibble, nibble i of the word in byte i % 4 of result i // 4; every
  scale byte but those two marks the step bad.
- End to end: the int8 pre-pass (fp4_predecode_a_s8) and B's fragments (BDecoder8) of official data, multiplied as
  wgmma .s32.s8.s8 m64nBMk32 multiplies (A in registers by the k32 fragment layout, B read through the 64-byte
  swizzle), give 4 x C exactly for every row of N and column of M of a tile, over every K step.

The emulation mirrors kernel.cu's code; the tests also check that kernel.cu still has the lines mirrored.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from ._load import variant_dir

KERNEL = (variant_dir("wgmma_sm90") / "kernel.cu").read_text()
U = np.uint32


def prmt2(lo: np.ndarray, hi: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """prmt.b32 d, lo, hi, sel (default mode): byte i of d is byte (sel >> 4i) & 7 of {hi:lo}, or that byte's sign
    replicated when bit 3 of the selector nibble is set (PTX ISA, prmt)."""
    src = [(x >> U(8 * i)) & U(0xFF) for x in (lo, hi) for i in range(4)]
    out = np.zeros(np.broadcast(lo, hi, sel).shape, dtype=U)
    for i in range(4):
        n = (sel >> U(4 * i)) & U(0xF)
        byte = np.choose((n & U(7)).astype(np.int64), [np.broadcast_to(s, out.shape) for s in src])
        byte = np.where(n & U(8), np.where(byte & U(0x80), U(0xFF), U(0)), byte)
        out |= byte.astype(U) << U(8 * i)
    return out


def s8_tables(s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kernel.cu s8_tables: (t0, t1, bad bits) for scale bytes ``s``."""
    sh = s >> U(6)
    return U(0x03020100) << sh, U(0x0C080604) << sh, s ^ (U(0x38) + (sh << U(3)))


def s8_quad(x, xn, t0, t1):
    pos, neg = prmt2(t0, t1, x & U(0xFFFF)), prmt2(t0, t1, xn & U(0xFFFF))
    return ((pos + U(0x80808080)) - neg) ^ U(0x80808080)


def s8_word(x, t0, t1):
    """kernel.cu s8_word: (lo, hi)."""
    xn = x ^ U(0x88888888)
    return s8_quad(x, xn, t0, t1), s8_quad(x >> U(16), xn >> U(16), t0, t1)


def int8_bytes(w: np.ndarray) -> np.ndarray:
    """uint32 [...] -> int8 [..., 4], byte 0 first."""
    w = np.asarray(w)
    return np.ascontiguousarray(w.astype("<u4")).reshape(-1).view(np.int8).reshape(*w.shape, 4)


E2M1_TWICE = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12])  # 2 x value by code


def test_kernel_cu_has_the_mirrored_int8_decode():
    for line in ("const uint32_t sh = s >> 6;", "bad |= s ^ (0x38u + (sh << 3));", "t0 = 0x03020100u << sh;",
                 "t1 = 0x0C080604u << sh;", "const uint32_t pos = prmt2(t0, t1, x), neg = prmt2(t0, t1, xn);",
                 "return ((pos + 0x80808080u) - neg) ^ 0x80808080u;", "const uint32_t xn = x ^ 0x88888888u;",
                 "lo = s8_quad(x, xn, t0, t1);", "hi = s8_quad(x >> 16, xn >> 16, t0, t1);",
                 'asm("prmt.b32 %0, %1, %2, %3;\\n" : "=r"(d) : "r"(lo), "r"(hi), "r"(sel));'):
        assert line in KERNEL, line


def test_prmt2_emulation_places_and_sign_extends_bytes():
    lo, hi = U(0x83828180), U(0x07060504)
    assert prmt2(lo, hi, U(0x7654)) == hi and prmt2(lo, hi, U(0x3210)) == lo
    assert prmt2(lo, hi, U(0x0F08)) == 0x800080FF  # 8: byte 0's sign (0xFF); F: byte 7's (0x00)


@pytest.mark.parametrize("scale_byte, scale", [(0x38, 1), (0x40, 2)])
@pytest.mark.parametrize("pos", range(4))
def test_s8_word_is_twice_value_times_scale_for_every_byte(scale_byte, scale, pos):
    x = np.arange(256, dtype=U) << U(8 * pos) | U(0x21436587 & ~(0xFF << 8 * pos))
    t0, t1, bad = s8_tables(np.full_like(x, scale_byte))
    assert not bad.any()
    lo, hi = s8_word(x, t0, t1)
    got = np.concatenate([int8_bytes(lo), int8_bytes(hi)], axis=1)  # nibble i -> column i
    nibbles = np.stack([(x >> U(4 * i)) & U(0xF) for i in range(8)], axis=1)
    assert np.array_equal(got, E2M1_TWICE[nibbles] * scale)


def test_every_scale_byte_but_one_and_two_is_bad():
    s = np.arange(256, dtype=U)
    _, _, bad = s8_tables(s)
    assert set(np.flatnonzero(bad == 0)) == {0x38, 0x40}


# --- end to end: pre-pass scratch x B fragments through the wgmma k32 layout --------------------------------------

def predecode_s8_emulation(a: np.ndarray, sfa_storage: np.ndarray, m: int, k: int, mpad: int):
    """kernel.cu fp4_predecode_a_s8 over every (K step, row < M): ([K / 64, mpad, 64] int8 scratch, any bad)."""
    steps = k // 64
    out = np.zeros((steps, mpad, 64), dtype=np.uint8)
    s, r = (v.ravel() for v in np.meshgrid(np.arange(steps), np.arange(m), indexing="ij"))
    words = a[r].reshape(len(r), steps, 32)[np.arange(len(r)), s].copy().view("<u4")  # w[0..7]
    sc_off = ((r >> 7) * (k // 64) + s) * 512 + (r & 31) * 16 + ((r >> 5) & 3) * 4
    sc = sfa_storage[sc_off[:, None] + np.arange(4)].astype(U)
    chunks = np.zeros((len(r), 4, 4), dtype=U)  # [thread][chunk][register]
    bad = np.zeros(len(r), dtype=U)
    for q in range(4):
        t0, t1, b = s8_tables(sc[:, q])
        bad |= b
        chunks[:, 0, q], chunks[:, 1, q] = s8_word(words[:, 2 * q], t0, t1)
        chunks[:, 2, q], chunks[:, 3, q] = s8_word(words[:, 2 * q + 1], t0, t1)
    swz = ((r >> 1) & 3) << 4
    for c in range(4):
        byte = ((c << 4) ^ swz)[:, None] + np.arange(16)
        out[s[:, None], r[:, None], byte] = chunks[:, c, :].astype("<u4").view(np.uint8).reshape(len(r), 16)
    return out.view(np.int8), bool(bad.any())


def b_fragments_s8(b: np.ndarray, sfb_storage: np.ndarray, k: int, s: int, n0: int):
    """BDecoder8 of every thread of the tile's two warpgroups at K step ``s``: f[row of N][slice j][reg] as int8
    [4] per register, keyed (warpgroup row r0 + 64 wg, tq); plus any bad."""
    frags, bad = {}, U(0)
    for tid in range(256):
        r0, tq = (tid >> 5) * 16 + ((tid & 31) >> 2), tid & 3
        f = np.zeros((2, 4, 4), dtype=np.int8)
        for i in range(2):
            row = b[n0 + r0 + 8 * i].reshape(k // 64, 32)[s]
            q = row[8 * tq:8 * tq + 8].copy().view("<u4")
            atom = (n0 >> 7) * (k // 64) + s
            sc = U(sfb_storage[atom * 512 + ((r0 + 8 * i) & 31) * 16 + (((r0 + 8 * i) >> 5) & 3) * 4 + tq])
            t0, t1, bb = s8_tables(np.array(sc, dtype=U))
            bad |= bb
            for j in range(2):
                lo, hi = s8_word(np.array(q[j], dtype=U), t0, t1)
                f[j][i], f[j][2 + i] = int8_bytes(lo), int8_bytes(hi)
        frags[(r0, tq)] = f
    return frags, bool(bad)


def wgmma_s8_step(frags: dict, a_buf: np.ndarray, bm: int) -> np.ndarray:
    """D[128 rows of N, bm columns of M] of one K step's two k32 wgmmas: A from the k32 register layout (reg 0: row
    r0, K 4 tq..4 tq + 3; reg 1: row r0 + 8; regs 2, 3: K + 16), B column n's K position 32 j + kk read from the
    64-byte-swizzled buffer (chunk ^ ((n >> 1) & 3))."""
    a_rows = np.zeros((128, 64), dtype=np.int64)
    for (r0, tq), f in frags.items():
        for j in range(2):
            for reg, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 16), (8, 16))):
                a_rows[r0 + dr, 32 * j + dk + 4 * tq:32 * j + dk + 4 * tq + 4] = f[j][reg]
    n = np.arange(bm)[:, None]
    p = np.arange(64)[None, :]
    phys = (((p >> 4) ^ ((n >> 1) & 3)) << 4) | (p & 15)
    b_cols = np.take_along_axis(a_buf[:bm].astype(np.int64), phys, axis=1)  # [bm, 64] in fragment K order
    return a_rows @ b_cols.T


def test_kernel_cu_has_the_mirrored_int8_pre_pass_and_b_decoder():
    body = re.search(r"fp4_predecode_a_s8\(const __grid_constant__ Params p\) \{.*?\n\}", KERNEL, re.S).group(0)
    for line in ("const uint32_t swz = ((r >> 1) & 3) << 4;", "s8_tables((sc >> (8 * q)) & 0xff, t0, t1, bad);",
                 "s8_word(w[2 * q], t0, t1, out[0][q], out[1][q]);",
                 "s8_word(w[2 * q + 1], t0, t1, out[2][q], out[3][q]);",
                 "for (int c = 0; c < 4; ++c) sts128(row_at + ((c << 4) ^ swz), out[c][0], out[c][1], out[c][2], "
                 "out[c][3]);", "if (bad) p.flags[g] = p.epoch;"):
        assert line in body, line
    dec = re.search(r"struct BDecoder8 \{.*?\n\};", KERNEL, re.S).group(0)
    for line in ("raw = r0 * ROW_BYTES + 8 * tq;", "sf = PRE_SFB + (r0 & 31) * 16 + ((r0 >> 5) & 3) * 4 + tq;",
                 "const uint2 q = lds64(slot + raw + 256 * i);", "s8_tables(lds8(slot + sf + 128 * i), t0, t1, bad);",
                 "s8_word(q.x, t0, t1, f[0][i], f[0][2 + i]);", "s8_word(q.y, t0, t1, f[1][i], f[1][2 + i]);"):
        assert line in dec, line
    assert "return static_cast<uint64_t>((addr >> 4) | (1u << 16)) | (static_cast<uint64_t>(512 >> 4) << 32) | " \
           "(2ull << 62);" in KERNEL


def _storage(blocked: torch.Tensor) -> np.ndarray:
    return blocked.view(torch.uint8).permute(5, 2, 4, 0, 1, 3).reshape(-1).numpy()


@pytest.mark.parametrize("m, bm, m0", [(200, 128, 0), (200, 96, 128), (40, 64, 0)])
def test_int8_pre_pass_times_b_fragments_is_four_c_exactly(m, bm, m0):
    from problems.nvfp4_group_gemm.inputs import generate_input
    from problems.nvfp4_group_gemm.reference import ref_kernel

    n, k = 128, 256
    data = generate_input([m], [n], [k], 1, seed=5, device="cpu")
    (a_t, b_t, _), (sfa_b, sfb_b) = data[0][0], data[2][0]
    a = a_t.view(torch.uint8).reshape(m, k // 2).numpy()
    b = b_t.view(torch.uint8).reshape(n, k // 2).numpy()
    mpad = {200: 224, 40: 64}[m]
    scratch, a_bad = predecode_s8_emulation(a, _storage(sfa_b), m, k, mpad)
    assert not a_bad, "official scales are 1 or 2"
    acc = np.zeros((128, bm), dtype=np.int64)
    for s in range(k // 64):
        frags, b_bad = b_fragments_s8(b, _storage(sfb_b), k, s, 0)
        assert not b_bad
        acc += wgmma_s8_step(frags, scratch[s, m0:m0 + bm], bm)
    c = ref_kernel(data)[0][:, :, 0].numpy()  # [M, N] fp16: the exact sum rounded once
    rows = min(bm, m - m0)
    assert np.array_equal((acc[:, :rows].T / 4).astype(np.float16), c[m0:m0 + rows])
    assert np.abs(acc).max() > 0
    assert not acc[:, rows:].any(), "rows past M are zero"


def test_int8_pre_pass_flags_full_range_scales():
    from problems.nvfp4_group_gemm.inputs import generate_input

    m, k = 40, 128
    data = generate_input([m], [128], [k], 1, seed=5, data="full-range", device="cpu")
    a = data[0][0][0].view(torch.uint8).reshape(m, k // 2).numpy()
    _, bad = predecode_s8_emulation(a, _storage(data[2][0][0]), m, k, 64)
    assert bad
