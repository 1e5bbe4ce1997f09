"""The exact reference: ``C_g = (A_g * SFA_g) @ (B_g * SFB_g)^T`` for every group, rounded once to fp16.

Two paths that give the same bits wherever both apply:

- ``ref_kernel_fp64``: the ground truth. Decode e2m1 and e4m3fn exactly into fp64, multiply in fp64, round once
  to fp16. Every product of two (e2m1 x e4m3fn) values has at most 12 significant bits, so fp64 products are
  exact; for official data the sums are exact too (multiples of 1/4 well inside 2^53). The fp64 -> fp16 step goes
  through fp32 with round-to-odd, which makes it a single correct rounding (fp32 keeps 13 more bits than fp16).
- ``ref_kernel``: per group, when ``exact_in_fp32`` holds, an exact decode into bf16 and a GEMM with fp32
  accumulation, rounded once to fp16 (CUDA: one Triton GEMM for every group that decodes in registers,
  task.reference_triton; the torch table decode and a GEMM with fp32 output where triton does not import; on the
  CPU an int8 decode and an integer GEMM where the elements fit int8 and ``torch._int_mm`` is the faster on the
  host, else fp32); otherwise the fp64 path. The
  bound needs only the scale bytes (a 256-entry key table).

Why the fast path is exact (the bound ``exact_in_fp32`` checks). Work in integer units:

- An e2m1 value is ``h / 2`` with ``h`` an integer, ``|h| <= 12`` (values 0, 0.5, ..., 6). A finite e4m3fn scale
  is ``q * 2^-9`` with ``q`` an integer, ``|q| <= 448 * 2^9``: subnormals ``q = mantissa``, normals
  ``q = (8 + mantissa) * 2^(exponent - 1)``. A decoded element is ``x = h * q * 2^-10``.
- For one group let ``mu_A`` be the smallest 2-adic valuation ``nu2(q)`` (the exponent of the largest power of two
  dividing ``q``) over A's nonzero scales, ``Q_A`` the largest ``|q|``, ``H_A`` the largest ``|h|`` present
  (12 when not looked up); the same for B. Zero scales (e4m3fn 0x00, 0x80) make zero elements, which are multiples
  of anything and add nothing, so they are left out; NaN scales (0x7F, 0xFF) are never "exact".
- Every product ``x_A * x_B`` is an integer multiple of ``u = 2^(mu_A + mu_B - 20)`` and at most
  ``H_A H_B Q_A Q_B 2^-20`` in magnitude. Whatever the summation order or tree (sequential, blocked, split-K,
  pairwise), every partial sum of one output is a sum of a subset of its K products, so it is a multiple of ``u``
  of magnitude at most ``K H_A H_B Q_A Q_B 2^-20``.
- If ``K * H_A * H_B * Q_A * Q_B <= 2^(24 + mu_A + mu_B)``, every product and partial sum is ``n * u`` with
  ``|n| <= 2^24``, exactly representable in fp32 (24-bit significand; ``u >= 2^-20`` and the magnitudes stay far
  inside fp32's range). A correctly rounded fp32 add or fma of exact operands then returns the exact result, so
  the fp32 sum equals the exact sum in ANY order. Tensor cores that align the addends of a multi-term add to the
  largest one and truncate below a 24-bit window (the behaviour Fasi, Higham, Mikaitis and Pranesh measured on
  NVIDIA tensor cores, 2021) lose nothing either: each addend is a product or a sum over a proper subset of the K
  products, so its magnitude is below ``2^24 u`` and all its bits lie inside the window, at multiples of ``u``.
- Operands are exact too: a decoded element has at most 6 significant bits (e2m1: 2, e4m3fn: 4) and lies in
  ``[2^-10, 2688]`` (docs/problem.md, "Number formats"), exact in bf16, fp16 and fp32.
- Rounding: fp32 -> fp16 (``.to(torch.float16)``) is one correctly rounded conversion of the exact sum. Exact in
  fp32 implies exact in fp64, and ``round_to_fp16`` rounds that same real number once, so both paths give the same
  fp16 bits, inf on overflow and subnormals included. An exactly zero sum is +0 on both (accumulators start at +0).

The CPU's integer path. Where the bound holds, ``x = e * 2^(mu - 10)`` with ``e = h * (q >> mu)`` an integer (every
nonzero ``q`` of the operand is a multiple of ``2^mu``). When ``H * (Q >> mu) <= 127`` for both operands every ``e``
is an int8, an int32-accumulating GEMM (``torch._int_mm``) returns ``S = sum e_A e_B`` exactly, and the bound above
is ``|S| <= 2^24``: ``S`` converts to fp32 exactly, the scaling by ``2^(mu_A + mu_B - 20)`` is exact, and the fp16
conversion is the one rounding. Official data has ``e`` in -6..6 (``Q >> mu = 2``, ``H <= 12`` assumed: 24).

Official data (values 0, +-0.5, +-1, +-1.5, scales 1 or 2: ``mu = 9``, ``Q = 1024``) passes up to
``K = 2^22 / 144 = 29127`` with ``H = 12`` assumed, and up to ``K = 466033`` with the ``H = 3`` present; full-range
data (task.inputs ``data="full-range"``) mixes scale exponents and mantissas and falls back to fp64.

The H200 measurement behind the fast path (docs/hardware.md, 2026-11-30): bf16 operands with fp32 output
(``torch.mm(a, b, out_dtype=torch.float32)``) matched the fp64 reference bit for bit, and the decode into wide
dtypes cost more than the GEMM, hence the table decode here; on CUDA the Triton GEMM writes no decoded operand
at all (task.reference_triton.grouped_gemm; its tensor-core sums are covered by the argument above). cuBLAS's
reduced-precision reductions (``allow_bf16_reduced_precision_reduction``) only apply when the output type is
narrower than the fp32 compute type, never with fp32 output; bf16 is used rather than fp16 so
``allow_fp16_accumulation`` cannot apply either.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from task import input_t, output_t
from task.formats import E2M1_VALUES, SF_VEC, decode_e2m1, decode_e4m3fn, e4m3fn_value

#: Largest |e2m1| in halves (6 = 12 / 2): what ``exact_in_fp32`` assumes when the data is not looked at.
E2M1_MAX_HALVES = 12
#: fp32's significand: integer multiples n * u with |n| <= 2^24 are exact.
FP32_SIGNIFICAND_BITS = 24
#: A finite e4m3fn scale is q * 2^-SCALE_UNIT_EXP with q an integer.
SCALE_UNIT_EXP = 9
#: Scale statistics key for NaN codes (wins every max) and for zero codes (loses every max).
_NAN_KEY, _ZERO_KEY = 64, -64

Scales = Literal["plain", "reordered"]
Decode = Literal["auto", "torch", "triton"]


def dequantize(packed: torch.Tensor, sf: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """[R, K/2, 1] e2m1 pairs and [R, K/16, 1] e4m3fn scales -> [R, K] values of ``dtype`` (exact in fp32+)."""
    values = decode_e2m1(packed[:, :, 0], dtype)
    scales = decode_e4m3fn(sf[:, :, 0].to(packed.device), dtype)
    return values * scales.repeat_interleave(SF_VEC, dim=1)


def round_to_fp16(x: torch.Tensor) -> torch.Tensor:
    """Round fp64 ``x`` to fp16 once (round to nearest even), via fp32 with round-to-odd."""
    f = x.to(torch.float32)
    inexact = f.to(torch.float64) != x
    too_far = inexact & (f.to(torch.float64).abs() > x.abs())
    bits = f.view(torch.int32)
    bits = torch.where(too_far, bits - 1, bits)  # step toward zero: truncation
    bits = torch.where(inexact, bits | 1, bits)  # sticky bit
    return bits.view(torch.float32).to(torch.float16)


def _check_group(g: int, a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor) -> None:
    """Raise ValueError naming group ``g`` unless a [M, K/2, 1], b [N, K/2, 1], sfa [M, K/16, 1], sfb [N, K/16, 1]."""
    shapes = (tuple(a.shape), tuple(b.shape), tuple(sfa.shape), tuple(sfb.shape))
    ok = all(len(s) == 3 and s[2] == 1 for s in shapes)
    if ok:
        (m, half_k, _), (n, half_k_b, _), (m_s, blocks_a, _), (n_s, blocks_b, _) = shapes
        ok = (half_k == half_k_b and half_k % (SF_VEC // 2) == 0 and (m, n) == (m_s, n_s)
              and blocks_a == blocks_b == half_k * 2 // SF_VEC)
    if not ok:
        raise ValueError(f"group {g}: expected a [M, K/2, 1], b [N, K/2, 1], sfa [M, K/16, 1], sfb [N, K/16, 1] "
                         f"with K a multiple of {SF_VEC}; got a {shapes[0]}, b {shapes[1]}, sfa {shapes[2]}, "
                         f"sfb {shapes[3]}")


def ref_kernel_fp64(data: input_t) -> output_t:
    """Expected outputs for ``data`` by the fp64 path: one fp16 [M, N, 1] tensor per group, on the device of ``a``.

    Uses the plain scales (sfasfb_tensors), not the reordered ones. Raises ValueError for inconsistent shapes.
    """
    abc, sfs, _, _ = data
    out = []
    for g, ((a, b, _c), (sfa, sfb)) in enumerate(zip(abc, sfs)):
        _check_group(g, a, b, sfa, sfb)
        out.append(_fp64_group(a, b, sfa, sfb))
    return out


def _fp64_group(a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    return round_to_fp16(dequantize(a, sfa) @ dequantize(b, sfb).T).unsqueeze(-1)


# ---- the predicate -------------------------------------------------------------------------------------------

def _nu2(q: int) -> int:
    return (q & -q).bit_length() - 1


def _q(code: int) -> int:
    """|scale| * 2^9 of one finite e4m3fn byte: an integer."""
    return int(abs(e4m3fn_value(code)) * 2**SCALE_UNIT_EXP)


def _scale_key(code: int) -> tuple[int, int]:
    """(-nu2(q), code & 0x7F) of one e4m3fn byte; |scale| grows with ``code & 0x7F`` (0x00..0x7E), so the largest
    second entry names the largest |q|. NaN and zero codes get the sentinel keys."""
    if e4m3fn_value(code) != e4m3fn_value(code):
        return _NAN_KEY, 0
    q = _q(code)
    return (_ZERO_KEY, 0) if q == 0 else (-_nu2(q), code & 0x7F)


_KEYS: dict[torch.device, torch.Tensor] = {}


def _key_table(device: torch.device) -> torch.Tensor:
    """int32 [256]: ``_scale_key`` of every e4m3fn byte as an int16 pair read as one int32."""
    if device not in _KEYS:
        keys = torch.tensor([_scale_key(c) for c in range(256)], dtype=torch.int16)
        _KEYS[device] = keys.view(torch.int32).reshape(256).to(device)
    return _KEYS[device]


def _scale_stats(codes: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """int16 [len(sizes), 2] on ``codes``' device: (max -nu2(q), max magnitude code) per run of ``sizes`` codes
    along the flat int32 ``codes`` (scale bytes); one gather for all runs, no sync. ``_read_stats`` decodes it."""
    keys = torch.index_select(_key_table(codes.device), 0, codes).view(torch.int16).view(-1, 2)
    return torch.stack([run.amax(dim=0) for run in keys.split(list(sizes))])


def _read_stats(stats: torch.Tensor) -> list[tuple[int, int]]:
    """``_scale_stats`` -> (-mu, Q) per run, as the bound uses them (one sync)."""
    return [(neg_mu, _q(code)) for neg_mu, code in stats.tolist()]


def _fits(k: int, stats_a: Sequence[int], stats_b: Sequence[int], halves_a: int = E2M1_MAX_HALVES,
          halves_b: int = E2M1_MAX_HALVES) -> bool:
    """The module docstring's condition ``K H_A H_B Q_A Q_B <= 2^(24 + mu_A + mu_B)`` in exact integers, from
    (-mu, Q) of A and of B (``_read_stats``) and the largest |e2m1| of each in halves (``H``)."""
    (neg_mu_a, q_a), (neg_mu_b, q_b) = stats_a, stats_b
    if neg_mu_a == _NAN_KEY or neg_mu_b == _NAN_KEY:
        return False
    if 0 in (q_a, q_b, halves_a, halves_b):
        return True  # every product is zero
    return k * halves_a * halves_b * q_a * q_b <= 2 ** (FP32_SIGNIFICAND_BITS - neg_mu_a - neg_mu_b)


def _group_exact(k: int, stats_a: Sequence[int], stats_b: Sequence[int], a: torch.Tensor | None,
                 b: torch.Tensor | None) -> bool:
    """``_fits`` with |e2m1| <= 6 assumed; failing that, and when the data is given and could pass, with the
    largest |e2m1| present in ``a`` and ``b`` (a pass over both and a sync)."""
    if _fits(k, stats_a, stats_b):
        return True
    if a is None or b is None or not _fits(k, stats_a, stats_b, 1, 1):
        return False
    return _fits(k, stats_a, stats_b, _e2m1_max_halves(a), _e2m1_max_halves(b))


def _e2m1_max_halves(packed: torch.Tensor) -> int:
    """Largest |e2m1| present in ``packed`` (pairs, any shape), in halves: 0, 1, 2, 3, 4, 6, 8 or 12."""
    u = packed.view(torch.uint8)
    magnitude = max(int((u & 0x07).amax()), int((u & 0x70).amax()) >> 4)
    return int(E2M1_VALUES[magnitude] * 2)


def _codes(sf: torch.Tensor) -> torch.Tensor:
    return sf.view(torch.uint8).to(torch.int32)


def exact_in_fp32(k: int, sfa: torch.Tensor, sfb: torch.Tensor, a: torch.Tensor | None = None,
                  b: torch.Tensor | None = None) -> bool:
    """True when fp32 accumulation in any order gives the exact value of every output of one group.

    ``k``: the reduction length K. ``sfa``, ``sfb``: the group's e4m3fn scales (float8_e4m3fn or uint8, any shape,
    any device). ``a``, ``b``: optionally the group's e2m1 pairs (float4_e2m1fn_x2 or uint8); when given and the
    bound with |e2m1| <= 6 fails, the largest |e2m1| present replaces 6 (one pass over the data and a device sync).
    A sufficient condition, proven in the module docstring; False whenever a NaN scale is present.
    """
    codes = [_codes(sf).reshape(-1).to(sfa.device) for sf in (sfa, sfb)]
    stats_a, stats_b = _read_stats(_scale_stats(torch.cat(codes), [c.numel() for c in codes]))
    return _group_exact(k, stats_a, stats_b, a, b)


# ---- the fast decode and GEMM --------------------------------------------------------------------------------

#: A pair of decoded values read as one integer: how the table is gathered.
_PAIR_INT = {torch.bfloat16: torch.int32, torch.float16: torch.int32, torch.float32: torch.int64}
_PAIRS: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _pair_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[65536] integers, entry ``byte + 256 * code`` = the two values of e2m1 pair ``byte`` times e4m3fn scale
    ``code`` (element 2i = low nibble first), as ``dtype`` pairs viewed as one integer each."""
    key = (dtype, device)
    if key not in _PAIRS:
        byte = torch.arange(256)
        e2m1 = torch.tensor(E2M1_VALUES, dtype=torch.float64)
        pair = torch.stack((e2m1[byte & 0xF], e2m1[byte >> 4]), dim=-1)                # [256 bytes, 2]
        scale = torch.tensor([e4m3fn_value(c) for c in range(256)], dtype=torch.float64)
        table = (scale.view(256, 1, 1) * pair).to(dtype).reshape(65536, 2)            # [code * 256 + byte, 2]
        _PAIRS[key] = table.view(_PAIR_INT[dtype]).reshape(65536).to(device)
    return _PAIRS[key]


def _decode(operands: Sequence[tuple[torch.Tensor, torch.Tensor]], dtype: torch.dtype,
            table: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Per operand (packed [R, K/2, 1] e2m1 pairs, int32 codes [R, K/16] of its scale bytes), all on one device ->
    ``dtype`` [R, K] per operand, views of one gather: one int32 index per byte (``byte + 256 * code``) into
    ``table`` (default ``_pair_table(dtype, device)``; ``_int8_table`` for int8)."""
    sizes = [p.shape[0] * p.shape[1] for p, _ in operands]
    # one add over every operand (row-major, each code covers the 8 bytes after it): many small ops cost more
    index = torch.cat([p.view(torch.uint8).reshape(-1) for p, _ in operands]).to(torch.int32)
    codes = torch.cat([c.reshape(-1) for _, c in operands]).view(-1, 1)
    index.view(-1, SF_VEC // 2).add_(codes * 256)
    if table is None:
        table = _pair_table(dtype, index.device)
    values = torch.index_select(table, 0, index).view(dtype)
    return [v.view(p.shape[0], -1) for v, (p, _) in zip(values.split([2 * s for s in sizes]), operands)]


def dequantize_lut(packed: torch.Tensor, sf: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """[R, K/2, 1] e2m1 pairs and [R, K/16, 1] e4m3fn scales (any device) -> [R, K] ``dtype`` on packed's device.

    Exact for bf16, fp16 and fp32 (every value x scale has at most 6 significant bits, in [2^-10, 2688]); the
    decode ``ref_kernel`` uses. Raises ValueError for another ``dtype``.
    """
    if dtype not in _PAIR_INT:
        raise ValueError(f"dtype must be one of {', '.join(map(str, _PAIR_INT))}, got {dtype}")
    return _decode([(packed, _codes(sf[:, :, 0].to(packed.device)))], dtype)[0]


_BF16_MM: dict[torch.device, bool] = {}


def _operand_dtype(device: torch.device) -> torch.dtype:
    """bf16 where ``torch.mm(..., out_dtype=torch.float32, out=...)`` runs (CUDA), else fp32 (CPU)."""
    if device not in _BF16_MM:
        one = torch.ones(1, 1, dtype=torch.bfloat16, device=device)
        out = torch.zeros(1, 1, dtype=torch.float32, device=device)
        try:
            torch.mm(one, one, out_dtype=torch.float32, out=out)
            _BF16_MM[device] = out.item() == 1.0
        except (TypeError, RuntimeError, NotImplementedError):
            _BF16_MM[device] = False
    return torch.bfloat16 if _BF16_MM[device] else torch.float32


_Group = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _fast(groups: Sequence[_Group]) -> list[torch.Tensor]:
    """Per group (a [M, K/2, 1], b [N, K/2, 1], int32 scale codes [M, K/16] and [N, K/16]), all on one device ->
    fp16 [M, N, 1] per group: every operand decoded by one gather (the torch decode), then ``_gemms``. Exact where
    ``_fits`` holds; outputs are views of one buffer."""
    dtype = _operand_dtype(groups[0][2].device)
    values = _decode([op for a, b, ca, cb in groups for op in ((a, ca), (b, cb))], dtype)
    return _gemms(values)


def _gemms(values: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Decoded operands (A0 [M, K], B0 [N, K], A1, B1, ...; bf16 or fp32, one device) -> fp16 [M, N, 1] per group:
    one GEMM per group with fp32 output into one buffer, one rounding to fp16 for all (views of one buffer). bf16
    operands on a device without a bf16 GEMM with fp32 output (the CPU) are widened to fp32 first (exact)."""
    if values and values[0].dtype != _operand_dtype(values[0].device):
        values = [v.to(torch.float32) for v in values]
    shapes = [(values[2 * g].shape[0], values[2 * g + 1].shape[0]) for g in range(len(values) // 2)]
    sizes = [m * n for m, n in shapes]
    out32 = torch.empty(sum(sizes), dtype=torch.float32, device=values[0].device)
    for g, (dst, shape) in enumerate(zip(out32.split(sizes), shapes)):
        a_values, b_values, dst = values[2 * g], values[2 * g + 1], dst.view(shape)
        if a_values.dtype == torch.float32:
            torch.mm(a_values, b_values.T, out=dst)
        else:
            torch.mm(a_values, b_values.T, out_dtype=torch.float32, out=dst)
    out16 = out32.to(torch.float16)
    return [o.view(*shape, 1) for o, shape in zip(out16.split(sizes), shapes)]


#: Largest |e| of the integer path: an int8.
INT8_MAX = 127
_INT8_PAIRS: dict[int, torch.Tensor] = {}
_INT_MM: list[bool] = []


def _int8_shift(stats: tuple[int, int], halves: int = E2M1_MAX_HALVES) -> int | None:
    """``mu`` of one operand for the integer path (every element ``h * q * 2^-10`` is ``e * 2^(mu - 10)`` with ``e =
    h * (q >> mu)``, ``|e| <= halves * (Q >> mu) <= INT8_MAX``), from its (-mu, Q) (``_read_stats``); None when some
    element may not fit an int8, or a scale is NaN. All-zero scales: 0."""
    neg_mu, q = stats
    if neg_mu == _NAN_KEY:
        return None
    if q == 0:
        return 0
    return -neg_mu if halves * (q >> -neg_mu) <= INT8_MAX else None


def _int8_table(mu: int) -> torch.Tensor:
    """int16 [65536] (CPU), entry ``byte + 256 * code`` = the two int8 ``e = h * (q >> mu)`` of e2m1 pair ``byte``
    under e4m3fn scale ``code`` (low nibble first; ``q`` carries the scale's sign) as one int16. Entries of codes
    whose ``q`` is not a multiple of ``2^mu``, or whose ``e`` leave int8, are meaningless and never read:
    ``_int8_shift`` admits no such operand."""
    if mu not in _INT8_PAIRS:
        byte = torch.arange(256)
        halves = (torch.tensor(E2M1_VALUES, dtype=torch.float64) * 2).to(torch.int64)
        pair = torch.stack((halves[byte & 0xF], halves[byte >> 4]), dim=-1)                   # [256 bytes, 2]
        finite = [e4m3fn_value(c) == e4m3fn_value(c) for c in range(256)]
        q = torch.tensor([(_q(c) >> mu) * (-1 if c & 0x80 else 1) if ok else 0 for c, ok in zip(range(256), finite)])
        e = (q.view(256, 1, 1) * pair).clamp(-128, INT8_MAX).to(torch.int8)                  # [code, byte, 2]
        _INT8_PAIRS[mu] = e.reshape(65536, 2).view(torch.int16).reshape(65536)
    return _INT8_PAIRS[mu]


def _int_mm_pays() -> bool:
    """Whether the CPU's integer path is worth taking in this process: ``torch._int_mm`` (int8 x int8 -> int32)
    runs, gives a known product, and beats an fp32 ``torch.mm`` of the same M x K x N = 64 x 256 x 128 product
    (best of 2 each; decided once per process, under 10 ms). Both paths give the same bits; only their speed
    differs between hosts: on a 2-core AVX2 EPYC with torch 2.13 (2026-12-02) ``_int_mm`` took 2.0 ms where fp32
    took 0.17 ms on that product, and 15 smoke inputs' reference 129 ms against 30; on the host where the integer
    path was adopted it was the faster."""
    if not _INT_MM:
        _INT_MM.append(_int_mm_faster())
    return _INT_MM[0]


def _int_mm_faster(reps: int = 2) -> bool:
    try:
        one = torch.ones(17, 8, dtype=torch.int8)
        if int(torch._int_mm(one, one.T)[0, 0]) != 8:
            return False
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randint(-6, 7, (r, 256), dtype=torch.int8, generator=gen) for r in (64, 128))
    wide_a, wide_b = a.float(), b.float()

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    return best(lambda: torch._int_mm(a, b.T)) < best(lambda: torch.mm(wide_a, wide_b.T))


def _fast_int8(groups: Sequence[_Group], shifts: Sequence[tuple[int, int]]) -> list[torch.Tensor]:
    """CPU only. Per group (as ``_fast``) and its operands' ``mu`` (``_int8_shift``, neither None) -> fp16
    [M, N, 1]: the int8 table decode (one gather per distinct ``mu``), ``torch._int_mm``, ``S * 2^(mu_A + mu_B -
    20)`` in fp32, one rounding to fp16 (module docstring: exact). Outputs are views of one buffer."""
    operands = [op for a, b, ca, cb in groups for op in ((a, ca), (b, cb))]
    mus = [mu for pair in shifts for mu in pair]
    values: list = [None] * len(operands)
    for mu in sorted(set(mus)):
        chosen = [i for i, m in enumerate(mus) if m == mu]
        decoded = _decode([operands[i] for i in chosen], torch.int8, _int8_table(mu))
        for i, v in zip(chosen, decoded):
            values[i] = v
    shapes = [(values[2 * g].shape[0], values[2 * g + 1].shape[0]) for g in range(len(groups))]
    sizes = [m * n for m, n in shapes]
    out32 = torch.empty(sum(sizes), dtype=torch.float32)
    for g, (dst, shape, (mu_a, mu_b)) in enumerate(zip(out32.split(sizes), shapes, shifts)):
        dst = dst.view(shape)
        dst.copy_(torch._int_mm(values[2 * g], values[2 * g + 1].T))
        dst.mul_(2.0 ** (mu_a + mu_b - 2 * (SCALE_UNIT_EXP + 1)))
    out16 = out32.to(torch.float16)
    return [o.view(*shape, 1) for o, shape in zip(out16.split(sizes), shapes)]


def _fast_cpu(groups: Sequence[_Group], bounds: Sequence[tuple[int, int]],
              integer_path: bool | None = None) -> list[torch.Tensor]:
    """CPU: ``_fast`` for groups that pass the bound, through ``_fast_int8`` for those whose two operands fit int8
    when ``integer_path`` (None: ``_int_mm_pays()``) (``bounds``: (-mu, Q) of A and B per group, in order). Same
    outputs, same bits."""
    if integer_path is None:
        integer_path = _int_mm_pays()
    shifts = [(_int8_shift(bounds[2 * g]), _int8_shift(bounds[2 * g + 1])) for g in range(len(groups))]
    integer = [g for g, (sa, sb) in enumerate(shifts) if sa is not None and sb is not None] if integer_path else []
    wide = [g for g in range(len(groups)) if g not in integer]
    out: list = [None] * len(groups)
    for chosen, run in ((integer, lambda gs: _fast_int8(gs, [shifts[g] for g in integer])), (wide, _fast)):
        if chosen:
            for g, o in zip(chosen, run([groups[g] for g in chosen])):
                out[g] = o
    return out


def _unblocked(reordered: torch.Tensor, rows: int, blocks: int) -> torch.Tensor:
    """The [rows, blocks] scales held in a blocked view [32, 4, rest_mn, 4, rest_k, 1] (task.formats.BLOCKED_PERMUTE
    of the storage), as a slice of one copy: the view's dims (r%32, (r%128)//32, r//128, j%4, j//4) permuted to
    (r//128, (r%128)//32, r%32, j//4, j%4), so that row-major order is (r, j)."""
    _, _, rest_mn, _, rest_k, _ = reordered.shape
    full = reordered[..., 0].permute(2, 1, 0, 4, 3).reshape(rest_mn * 128, rest_k * 4)
    return full[:rows, :blocks]


def _scale_sources(data: input_t, scales: Scales) -> list[torch.Tensor]:
    """Every operand's scale bytes (A0, B0, A1, B1, ...) as uint8 [R, K/16] views where they lie (``scales``: the
    plain tensors, or a slice of one unblocked copy of each reordered tensor)."""
    abc, sfs, sfs_reordered, _ = data
    if scales == "plain":
        return [sf[:, :, 0].view(torch.uint8) for pair in sfs for sf in pair]
    shapes = [(p.shape[0], p.shape[1] * 2 // SF_VEC) for a, b, _ in abc for p in (a, b)]
    return [_unblocked(r.view(torch.uint8), *shape)
            for r, shape in zip((r for pair in sfs_reordered for r in pair), shapes)]


def _staged(sources: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """``sources`` (uint8 [R, K/16] each, any device) copied into one flat uint8 tensor on ``device``."""
    flat = torch.empty(sum(s.numel() for s in sources), dtype=torch.uint8, device=device)
    for slot, source in zip(flat.split([s.numel() for s in sources]), sources):
        # non_blocking: a pageable source is staged before the call returns, without a stream sync
        slot.view(source.shape).copy_(source, non_blocking=True)
    return flat


def _load_codes(data: input_t, scales: Scales, device: torch.device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Every operand's scale bytes (A0, B0, A1, B1, ...) in one flat int32 tensor on ``device``, and per operand
    an int32 [R, K/16] view of it."""
    sources = _scale_sources(data, scales)
    codes = _staged(sources, device).to(torch.int32)
    return codes, [c.view(s.shape) for c, s in zip(codes.split([s.numel() for s in sources]), sources)]


def _scale_bytes_on(data: input_t, scales: Scales, device: torch.device) -> list[torch.Tensor]:
    """Every operand's scale bytes as uint8 [R, K/16] on ``device`` with unit column stride: in place where the
    source already is, else slices of one staged copy."""
    sources = _scale_sources(data, scales)
    in_place = [s.device == device and s.stride(1) == 1 for s in sources]
    moved = [s for s, ok in zip(sources, in_place) if not ok]
    staged = iter(_staged(moved, device).split([s.numel() for s in moved]) if moved else [])
    return [s if ok else next(staged).view(s.shape) for s, ok in zip(sources, in_place)]


_TRITON: list = []


def _triton_decoder():
    """task.reference_triton, or None where triton does not import (imported once, on first use)."""
    if not _TRITON:
        try:
            from task import reference_triton
        except ImportError:
            reference_triton = None
        _TRITON.append(reference_triton)
    return _TRITON[0]


def _triton_operands(data: input_t, scales: Scales, device: torch.device):
    """(uint8 [R, K/16] scale bytes per operand, (packed [R, K/2], scale bytes) per operand) of one input, as
    the Triton decode takes them."""
    codes = _scale_bytes_on(data, scales, device)
    packed = [p[:, :, 0].view(torch.uint8) for a, b, _ in data[0] for p in (a, b)]
    return codes, [(p if p.stride(1) == 1 else p.contiguous(), c) for p, c in zip(packed, codes)]


def _triton_groups(data: input_t, scales: Scales, device: torch.device):
    """(uint8 [R, K/16] scale bytes per operand, (A packed, A scales, B packed, B scales) per group) of one input,
    as task.reference_triton.grouped_gemm takes them."""
    codes, operands = _triton_operands(data, scales, device)
    return codes, [(*operands[2 * g], *operands[2 * g + 1]) for g in range(len(operands) // 2)]


def _fast_triton(decoder, data: input_t, scales: Scales, device: torch.device):
    """The CUDA fast path of one input: its scale statistics and every group's GEMM, decoded in registers, by
    task.reference_triton.grouped_gemm (two launches). Returns (uint8 [R, K/16] scale bytes per operand, int32
    [operands, 2] statistics, fp16 [M, N, 1] outputs)."""
    _data, stats, codes, fast = _queue_triton_many(decoder, [data], scales, device)[0]
    return codes, stats, fast


def _queue_triton_many(decoder, inputs: Sequence[input_t], scales: Scales, device: torch.device) -> list[tuple]:
    """The fast paths of every input at once: one statistics launch and one GEMM launch for all their groups (a
    sample of 15 inputs of G = 8 is 120 groups; H200 before this, 2026-12-01: decode to bf16 in memory plus one cuBLAS
    GEMM per group took 17 ms of kernels per sample, most of it writing and reading the decoded operands). Inputs
    must have passed ``_checked`` and have groups. Returns (input, statistics, scale bytes, outputs) per input."""
    per_input = [_triton_groups(x, scales, device) for x in inputs]
    outs, stats = decoder.grouped_gemm([g for _codes, groups in per_input for g in groups], _key_table(device))
    queued, start = [], 0
    for x, (codes, groups) in zip(inputs, per_input):
        end = start + len(groups)
        queued.append((x, stats[2 * start:2 * end], codes, [o.unsqueeze(-1) for o in outs[start:end]]))
        start = end
    return queued


def ref_kernel(data: input_t, *, scales: Scales = "plain", decode: Decode = "auto") -> output_t:
    """Expected outputs for ``data``: one fp16 [M, N, 1] tensor per group, on the device of ``a``; the same bits
    as ``ref_kernel_fp64``.

    Per group, ``exact_in_fp32``'s bound is checked from the scale bytes (and, when that fails, from the largest
    e2m1 magnitude present); groups that pass take the fast decode and one fp32-accumulating GEMM, the others the
    fp64 path. Work is batched per input to keep launches few (one GEMM per group, one rounding for all; the fast
    outputs are views of one buffer); on CUDA all of it is queued before the one sync that reads the bounds.

    ``scales="plain"`` reads the plain scales (sfasfb_tensors, CPU), as the official reference does;
    ``"reordered"`` reads the blocked copies already on the GPU (sfasfb_reordered_tensors), valid only when both
    hold the same scales, as task.inputs draws them.

    ``decode="auto"``: on CUDA with triton importable, one Triton launch takes the scale statistics and one runs
    every group's GEMM, decoding in registers (task.reference_triton.grouped_gemm); elsewhere the torch decode (a
    65536-entry table gathered by an int32 index per byte, one gather for the statistics). ``"torch"`` forces the
    torch decode, ``"triton"`` the Triton GEMM. Raises ValueError for an unknown ``scales`` or ``decode``, ``decode="triton"`` without CUDA inputs
    or triton, or inconsistent shapes.
    """
    pending = _queue(data, scales, decode)
    return _finish(pending, _read_stats(pending.stats) if pending.stats is not None else [])


@dataclass(frozen=True)
class _Pending:
    """One input's reference, queued up to the sync that reads its scale statistics: ``stats`` (int32
    [operands, 2], or None for an input of no groups), ``codes`` (int32 or uint8 [R, K/16] per operand), ``fast``
    (the fast outputs per group, queued on CUDA; None on the CPU, where only the passing groups are decoded),
    ``groups`` (the torch decode's (a, b, codes A, codes B) per group; empty on the Triton path)."""

    data: input_t
    stats: torch.Tensor | None
    codes: list
    fast: list | None
    groups: list


def _checked(data: input_t, scales: Scales, decode: Decode):
    """The Triton decoder ``data`` takes (or None: the torch decode) after its arguments and groups are checked.
    Raises as ref_kernel."""
    if scales not in ("plain", "reordered"):
        raise ValueError(f"scales must be 'plain' or 'reordered', got {scales!r}")
    if decode not in ("auto", "torch", "triton"):
        raise ValueError(f"decode must be 'auto', 'torch' or 'triton', got {decode!r}")
    abc, sfs, _, _ = data
    for g, ((a, b, _c), (sfa, sfb)) in enumerate(zip(abc, sfs)):
        _check_group(g, a, b, sfa, sfb)
    device = abc[0][0].device if abc else torch.device("cpu")
    decoder = _triton_decoder() if decode != "torch" and device.type == "cuda" else None
    if decode == "triton" and decoder is None:
        why = "triton does not import" if device.type == "cuda" else f"the inputs are on {device}"
        raise ValueError(f"decode='triton' needs CUDA inputs and an importable triton; {why}")
    return decoder


def _queue(data: input_t, scales: Scales, decode: Decode) -> _Pending:
    """ref_kernel up to its one sync: checks, the decode and (on CUDA) the GEMMs queued. Raises as ref_kernel."""
    decoder = _checked(data, scales, decode)
    abc = data[0]
    if not abc:
        return _Pending(data, None, [], [], [])
    device = abc[0][0].device
    if decoder is not None:
        _x, stats, codes, fast = _queue_triton_many(decoder, [data], scales, device)[0]
        return _Pending(data, stats, codes, fast, [])
    flat, codes = _load_codes(data, scales, device)
    stats = _scale_stats(flat, [c.numel() for c in codes])
    groups = [(a, b, codes[2 * g], codes[2 * g + 1]) for g, (a, b, _c) in enumerate(abc)]
    fast = _fast(groups) if flat.is_cuda else None  # queued before the sync; dropped where the bound fails
    return _Pending(data, stats, codes, fast, groups)


def _finish(pending: _Pending, bounds: list[tuple[int, int]]) -> output_t:
    """ref_kernel after its sync: ``bounds`` are ``_read_stats(pending.stats)``; the groups the bound fails take
    the fp64 path."""
    abc = pending.data[0]
    codes, fast = pending.codes, pending.fast
    exact = [_group_exact(a.shape[1] * 2, bounds[2 * g], bounds[2 * g + 1], a, b) for g, (a, b, _c) in enumerate(abc)]
    if fast is None:  # CPU: decode only the groups that pass
        passing = [g for g, ok in enumerate(exact) if ok]
        fast = dict(zip(passing, _fast_cpu([pending.groups[g] for g in passing],
                                           [bounds[2 * g + i] for g in passing for i in (0, 1)]) if passing else []))
    out = []
    for g, (a, b, _c) in enumerate(abc):
        if exact[g]:
            out.append(fast[g])
        else:
            sfa, sfb = (c.to(torch.uint8).unsqueeze(-1) for c in codes[2 * g: 2 * g + 2])
            out.append(_fp64_group(a, b, sfa, sfb))
    return out


class ReferencePlan:
    """``ref_kernel_many(inputs, scales=scales)`` for the same tensors again and again: a sample's buffers, refilled
    before each ``run`` (their contents change, not their addresses, shapes, strides or devices). On CUDA with
    triton, where every scale byte lies in place on the device (the plain scales as device tensors, as the
    parent's draw leaves them), the checks and the Triton launch descriptors are built once
    (task.reference_triton.PreparedGemm), so a run is two launches, one sync and the bound per group; anything else
    runs ``ref_kernel_many`` each time. It holds references to every tensor of ``inputs``. ``decoder``: the
    task.reference_triton module to use (default: the imported one, for CUDA inputs). Raises as ref_kernel_many
    does, at construction."""

    def __init__(self, inputs: Sequence[input_t], *, scales: Scales = "plain", decoder=None):
        self.inputs, self.scales = list(inputs), scales
        checked = [_checked(x, scales, "auto") for x in self.inputs]
        if decoder is None:  # tests pass the interpreted task.reference_triton, which runs on CPU tensors
            decoder = checked[0] if checked and all(d is checked[0] for d in checked) else None
        self._gemm, self._codes = None, []
        if decoder is None or not all(x[0] for x in self.inputs):
            return
        device = self.inputs[0][0][0][0].device
        sources = [s for x in self.inputs for s in _scale_sources(x, scales)]
        if scales != "plain" or not all(s.device == device and s.stride(1) == 1 for s in sources):
            return
        per_input = [_triton_groups(x, scales, device) for x in self.inputs]
        self._codes = [codes for codes, _groups in per_input]
        self._gemm = decoder.PreparedGemm([g for _codes, groups in per_input for g in groups], _key_table(device))

    @property
    def prepared(self) -> bool:
        """Whether the launches were built once (else every run is ``ref_kernel_many``)."""
        return self._gemm is not None

    def run(self) -> list[output_t]:
        """The expected outputs of the inputs as they hold now: what ``ref_kernel_many`` returns, the same bits."""
        if self._gemm is None:
            return ref_kernel_many(self.inputs, scales=self.scales)
        outs, stats = self._gemm.run()
        bounds = iter(_read_stats(stats))
        out, start = [], 0
        for x, codes in zip(self.inputs, self._codes):
            end = start + len(x[0])
            pending = _Pending(x, None, codes, [o.unsqueeze(-1) for o in outs[start:end]], [])
            out.append(_finish(pending, [next(bounds) for _ in range(len(codes))]))
            start = end
        return out


def ref_kernel_many(inputs: Sequence[input_t], *, scales: Scales = "plain") -> list[output_t]:
    """``[ref_kernel(x, scales=scales) for x in inputs]``, the same bits. On the CPU the inputs' groups go
    through ``ref_kernel`` as one input of sum(G) groups: one decode, one statistics pass, one rounding instead
    of one per input (15 smoke inputs of G=1: 8.4 -> 3.3 ms on one thread; no gain at G=2, where the GEMMs
    dominate). On CUDA the statistics and GEMMs of every input are queued first (two Triton launches for all of
    them, ``_queue_triton_many``) and one sync reads all their statistics.
    Raises as ref_kernel does."""
    first = next((x[0][0][0] for x in inputs if x[0]), None)
    if first is None or first.device.type == "cuda":
        decoders = [_checked(x, scales, "auto") for x in inputs]
        batched = [i for i, (x, d) in enumerate(zip(inputs, decoders)) if d is not None and x[0]]
        queued = dict(zip(batched, [_Pending(*q, []) for q in _queue_triton_many(
            decoders[batched[0]], [inputs[i] for i in batched], scales, first.device)] if batched else []))
        pending = [queued[i] if i in queued else _queue(x, scales, "auto") for i, x in enumerate(inputs)]
        stats = [p.stats for p in pending if p.stats is not None]
        bounds = iter(_read_stats(torch.cat(stats)) if stats else [])
        return [_finish(p, [next(bounds) for _ in range(len(p.codes))]) for p in pending]
    merged = tuple([part for x in inputs for part in x[field]] for field in range(4))
    out = ref_kernel(merged, scales=scales, decode="torch")
    ends = list(itertools.accumulate(len(x[0]) for x in inputs))
    return [out[end - len(x[0]):end] for x, end in zip(inputs, ends)]


#: Rows of A and B per group of ``warm_up``'s inputs: small, a multiple of task.spec.MN_MULTIPLE.
WARM_ROWS = 128


def warm_up(kinds: Sequence[tuple[Sequence[int], int]], device: torch.device | str) -> None:
    """Compile and load what ``ReferencePlan`` and ``ref_kernel_many`` will launch on ``device`` for samples of
    these ``kinds``: (K per group, inputs per sample). On CUDA the Triton kernels are specialised by the
    sample's total group count (n inputs x G, rounded up to a power of two), by whether every K/2 is a multiple
    of task.reference_triton.GEMM_BYTES and by alignment, so each kind's launches are built over official inputs
    of WARM_ROWS rows per group and compiled, all kinds at once on a thread pool where triton allows
    (task.reference_triton.compiling); the first kind is then run once, which builds triton's launchers. A fresh
    H200 spent 3.4 s on the reference's first compile (2026-12-02, docs/journal.md), and 8.0 s compiling
    the benchmarks' kinds one after another; triton then caches them on disk. On the CPU only the integer path's
    choice (``_int_mm_pays``) is made. For a caller with time to spare (the parent while its worker
    starts). Raises what ``ref_kernel_many`` raises."""
    from task.inputs import generate_many

    device = torch.device(device)
    decoder = _triton_decoder() if device.type == "cuda" else None
    if decoder is None:
        _int_mm_pays()
        return
    gemms = []
    for ks, count in dict.fromkeys((tuple(ks), count) for ks, count in kinds):
        rows = [WARM_ROWS] * len(ks)
        inputs = generate_many(rows, rows, ks, len(ks), list(range(1, count + 1)), device=device)
        groups = [g for x in inputs for g in _triton_groups(x, "plain", device)[1]]
        gemms.append(decoder.PreparedGemm(groups, _key_table(device)))
    with decoder.compiling(2 * len(gemms)):
        for gemm in gemms:
            gemm.compile()
    if gemms:  # one real launch of each kernel builds triton's launcher for its signature (the same for all kinds)
        gemms[0].run()
        torch.cuda.synchronize(device)
