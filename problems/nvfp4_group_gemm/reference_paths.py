"""The fast paths of the exact reference, each exact wherever reference_bound's bound holds:

- the torch decode (``_decode``: a 65536-entry table gathered by one int32 index per byte) then one GEMM per group
  with fp32 output (``_fast``, ``_gemms``): bf16 operands on CUDA, fp32 on the CPU;
- the CPU's integer path (``_fast_int8``): an int8 table decode and ``torch._int_mm``, taken where the elements
  fit int8 and ``_int_mm_pays`` finds it the faster on the host (``_fast_cpu`` chooses);
- on CUDA, one Triton launch for the scale statistics and one GEMM over every group that decodes in registers
  (reference_triton.grouped_gemm, reached through ``_queue_triton_many``).

The CPU's integer path. Where the bound holds, ``x = e * 2^(mu - 10)`` with ``e = h * (q >> mu)`` an integer (every
nonzero ``q`` of the operand is a multiple of ``2^mu``). When ``H * (Q >> mu) <= 127`` for both operands every ``e``
is an int8, an int32-accumulating GEMM (``torch._int_mm``) returns ``S = sum e_A e_B`` exactly, and
reference_bound's bound is ``|S| <= 2^24``: ``S`` converts to fp32 exactly, the scaling by
``2^(mu_A + mu_B - 20)`` is exact, and the fp16 conversion is the one rounding. Official data has ``e`` in -6..6
(``Q >> mu = 2``, ``H <= 12`` assumed: 24).

The H200 measurement behind the fast path (docs/hardware.md, 2026-11-30): bf16 operands with fp32 output
(``torch.mm(a, b, out_dtype=torch.float32)``) matched the fp64 reference bit for bit, and the decode into wide
dtypes cost more than the GEMM, hence the table decode here; on CUDA the Triton GEMM writes no decoded operand
at all (reference_triton.grouped_gemm; its tensor-core sums are covered by reference_bound's argument).
cuBLAS's reduced-precision reductions (``allow_bf16_reduced_precision_reduction``) only apply when the output type is
narrower than the fp32 compute type, never with fp32 output; bf16 is used rather than fp16 so
``allow_fp16_accumulation`` cannot apply either.
"""
from __future__ import annotations

import time
from typing import Sequence

import torch

from problems.nvfp4_group_gemm import input_t
from problems.nvfp4_group_gemm.formats import E2M1_VALUES, SF_VEC, e4m3fn_value
from problems.nvfp4_group_gemm.reference_bound import E2M1_MAX_HALVES, SCALE_UNIT_EXP, _NAN_KEY, _codes, _key_table, _q
from problems.nvfp4_group_gemm.reference_scales import Scales, _scale_bytes_on


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
    20)`` in fp32, one rounding to fp16 (exact: this module's docstring). Outputs are views of one buffer."""
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


_TRITON: list = []


def _triton_decoder():
    """reference_triton, or None where triton does not import (imported once, on first use)."""
    if not _TRITON:
        try:
            from problems.nvfp4_group_gemm import reference_triton
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
    as reference_triton.grouped_gemm takes them."""
    codes, operands = _triton_operands(data, scales, device)
    return codes, [(*operands[2 * g], *operands[2 * g + 1]) for g in range(len(operands) // 2)]


def _fast_triton(decoder, data: input_t, scales: Scales, device: torch.device):
    """The CUDA fast path of one input: its scale statistics and every group's GEMM, decoded in registers, by
    reference_triton.grouped_gemm (two launches). Returns (uint8 [R, K/16] scale bytes per operand, int32
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
