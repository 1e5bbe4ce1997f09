"""When the fast reference is exact: the bound ``exact_in_fp32`` checks, from the scale bytes alone (a 256-entry key
table) and, failing that, the largest e2m1 magnitude present.

Why the fast path is exact. Work in integer units:

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

Official data (values 0, +-0.5, +-1, +-1.5, scales 1 or 2: ``mu = 9``, ``Q = 1024``) passes up to
``K = 2^22 / 144 = 29127`` with ``H = 12`` assumed, and up to ``K = 466033`` with the ``H = 3`` present; full-range
data (inputs ``data="full-range"``) mixes scale exponents and mantissas and falls back to fp64."""
from __future__ import annotations

from typing import Sequence

import torch

from problems.nvfp4_group_gemm.formats import E2M1_VALUES, e4m3fn_value

#: Largest |e2m1| in halves (6 = 12 / 2): what ``exact_in_fp32`` assumes when the data is not looked at.
E2M1_MAX_HALVES = 12
#: fp32's significand: integer multiples n * u with |n| <= 2^24 are exact.
FP32_SIGNIFICAND_BITS = 24
#: A finite e4m3fn scale is q * 2^-SCALE_UNIT_EXP with q an integer.
SCALE_UNIT_EXP = 9
#: Scale statistics key for NaN codes (wins every max) and for zero codes (loses every max).
_NAN_KEY, _ZERO_KEY = 64, -64


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
    """This module docstring's condition ``K H_A H_B Q_A Q_B <= 2^(24 + mu_A + mu_B)`` in exact integers, from
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
    A sufficient condition, proven in this module's docstring; False whenever a NaN scale is present.
    """
    codes = [_codes(sf).reshape(-1).to(sfa.device) for sf in (sfa, sfb)]
    stats_a, stats_b = _read_stats(_scale_stats(torch.cat(codes), [c.numel() for c in codes]))
    return _group_exact(k, stats_a, stats_b, a, b)
