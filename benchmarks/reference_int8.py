"""The exact reference as an int8 decode in memory and an integer GEMM, against the fused Triton GEMM it would
replace (issue 15: the reference is the largest GPU piece of a sample's pause). Measured, not adopted.

Where ``task.reference._int8_shift`` admits both operands of a group (official data: every element is
``e = h * (q >> mu)`` in -6..6), ``decode_int8`` (one Triton launch for every operand) writes the integers ``e``
as int8 [R, K] and ``torch._int_mm`` (cuBLAS, int32 accumulation: exact) multiplies them per group; the scaling by
``2^(mu_A + mu_B - 20)`` and the fp16 rounding are task.reference's integer path (its module docstring: exact).
Per benchmark shape, 15 inputs drawn as one sample's; both paths over all their groups, interleaved, between one
pair of CUDA events (L2 cleared first), the bits compared, then one torch.profiler pass of each. Writes JSON.

    python benchmarks/reference_int8.py --out int8.json

H200, 2026-12-02 (the same kernel and timing as a scratch script that session): the same bits on all four
benchmarks; kernels 5.4 against 6.6 ms on g8_n4096_k7168 (0.6 statistics + 3.5 decode + 0.9 cuBLAS int8 + 0.3
scaling, against 0.6 + 5.9 fused) and 4.0 against 4.0 on g8_n7168_k2048; the decode ran at about 1.5 TB/s and the
per-group cuBLAS calls kept the wall host-bound (14.3 against 12.4 ms on g8_n4096_k7168).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path
from typing import Sequence

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from task.reference_triton import _ALIGN, _BLOCK, _MIN_OPS, _check_operand  # noqa: E402

#: Rows per program and packed bytes per row per step of ``_int8_kernel``.
INT8_BLOCK_ROWS, INT8_BLOCK_BYTES, INT8_WARPS = 16, 256, 4
#: Per-operand descriptor of ``_int8_kernel``, one int64 row each, in this order.
_INT8_FIELDS = ("packed address", "packed row stride", "scales address", "scales row stride", "rows",
                "padded rows", "packed bytes per row", "output offset (int16 words)", "first program", "shift mu")
(_I_PACKED, _I_PACKED_STRIDE, _I_SCALES, _I_SCALES_STRIDE, _I_ROWS, _I_PADDED, _I_HALF_K, _I_OUT, _I_FIRST,
 _I_MU) = (tl.constexpr(i) for i in range(10))
_IWIDTH = tl.constexpr(len(_INT8_FIELDS))


@triton.jit
def _e2m1_halves(nibble):
    """int32 e2m1 codes (0..15) -> their values in halves as signed integers: magnitudes 0, 1, 2, 3, 4, 6, 8, 12
    (code & 7: exponent field e = code >> 1 & 3, mantissa bit b; e = 0 gives b, else (2 + b) << (e - 1)), the
    sign from bit 3."""
    magnitude = nibble & 7
    e = magnitude >> 1
    halves = tl.where(e == 0, magnitude, (2 + (magnitude & 1)) << tl.maximum(e - 1, 0))
    return tl.where((nibble & 8) != 0, -halves, halves)


@triton.jit
def _e4m3fn_q(code):
    """int32 e4m3fn bytes -> the scale as q * 2^-9 with q a signed integer: subnormals (exponent field 0) q =
    mantissa, normals q = (8 + mantissa) << (exponent - 1). NaN codes give garbage (never asked for)."""
    magnitude = code & 0x7F
    e = magnitude >> 3
    q = tl.where(e == 0, magnitude & 7, (8 + (magnitude & 7)) << tl.maximum(e - 1, 0))
    return tl.where((code & 0x80) != 0, -q, q)


@triton.jit
def _int8_kernel(meta_ptr, out_ptr, n_ops, OPS: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                 ALIGNED: tl.constexpr):
    pid = tl.program_id(0)
    ops = tl.arange(0, OPS)
    firsts = tl.load(meta_ptr + ops * _IWIDTH + _I_FIRST, mask=ops < n_ops, other=2**62)
    op = tl.sum((firsts <= pid).to(tl.int32), 0) - 1
    desc = meta_ptr + op * _IWIDTH
    packed = tl.load(desc + _I_PACKED).to(tl.pointer_type(tl.uint8))
    packed_stride = tl.load(desc + _I_PACKED_STRIDE)
    scales = tl.load(desc + _I_SCALES).to(tl.pointer_type(tl.uint8))
    scales_stride = tl.load(desc + _I_SCALES_STRIDE)
    n_rows, padded = tl.load(desc + _I_ROWS), tl.load(desc + _I_PADDED)
    half_k = tl.load(desc + _I_HALF_K)
    mu = tl.load(desc + _I_MU).to(tl.int32)
    out = out_ptr + tl.load(desc + _I_OUT)
    if ALIGNED:
        packed = tl.multiple_of(packed, _ALIGN)
        packed_stride = tl.multiple_of(packed_stride, _ALIGN)
        scales_stride = tl.multiple_of(scales_stride, _BLOCK)
        half_k = tl.multiple_of(half_k, _ALIGN)
        out = tl.multiple_of(out, _ALIGN)
    rows = (pid - tl.load(desc + _I_FIRST)) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok, store_ok = rows < n_rows, rows < padded
    blocks = tl.arange(0, BLOCK_BYTES // _BLOCK)
    lane = tl.arange(0, _BLOCK)
    for k0 in range(0, half_k, BLOCK_BYTES):
        scol = k0 // _BLOCK + blocks
        col_ok = (scol < half_k // _BLOCK)[None, :]
        code = tl.load(scales + rows[:, None] * scales_stride + scol[None, :], mask=row_ok[:, None] & col_ok,
                       other=0)
        step = (_e4m3fn_q(code.to(tl.int32)) >> mu)[:, :, None]  # exact: every nonzero q is a multiple of 2^mu
        within = scol[:, None] * _BLOCK + lane[None, :]
        x = tl.load(packed + rows[:, None, None] * packed_stride + within[None, :, :],
                    mask=(row_ok[:, None] & col_ok)[:, :, None], other=0).to(tl.int32)
        low = _e2m1_halves(x & 15) * step
        high = _e2m1_halves(x >> 4) * step
        word = (low & 0xFF) | ((high & 0xFF) << 8)  # element 2i (low nibble) at the lower address
        tl.store(out + rows[:, None, None] * half_k + within[None, :, :], word.to(tl.int16),
                 mask=(store_ok[:, None] & col_ok)[:, :, None])


def decode_int8(operands: Sequence[tuple[torch.Tensor, torch.Tensor, int, int]], block_rows: int = INT8_BLOCK_ROWS,
                block_bytes: int = INT8_BLOCK_BYTES, num_warps: int = INT8_WARPS) -> list[torch.Tensor]:
    """Decode every operand to integers ``e = h * (q >> mu)`` in one launch, queued on the current stream (no
    sync): ``h`` the e2m1 value in halves, ``q`` the e4m3fn scale as ``q * 2^-9`` (task.reference's integer units),
    so that value x scale = ``e * 2^(mu - 10)``.

    ``operands``: per operand (packed, scales, mu, padded rows): uint8 [R, K/2] e2m1 pairs (element 2i the low
    nibble) and uint8 [R, K/16] e4m3fn bytes with unit column strides, on one CUDA device (or the CPU under
    TRITON_INTERPRET); ``mu`` at most the 2-adic valuation of every nonzero ``q`` of the operand, and every ``e``
    inside int8 (``task.reference._int8_shift`` decides both: the kernel does not check); ``padded rows`` >= R.

    Returns per operand an int8 [padded rows, K] tensor (views of one buffer), rows past R zero. Raises ValueError
    naming the operand for a wrong dtype, shape, stride or device, or padded rows below R.
    """
    if not operands:
        return []
    device = operands[0][0].device
    for i, (packed, scales, _mu, padded) in enumerate(operands):
        _check_operand(i, packed, scales, device)
        if padded < packed.shape[0]:
            raise ValueError(f"operand {i}: padded rows must be at least its {packed.shape[0]} rows, got {padded}")
    sizes = [padded * p.shape[1] for p, _s, _mu, padded in operands]  # int16 words: two int8 per packed byte
    out = torch.empty(sum(sizes), dtype=torch.int16, device=device)
    host, offset, first = [], 0, 0
    for (packed, scales, mu, padded), size in zip(operands, sizes):
        host += [packed.data_ptr(), packed.stride(0), scales.data_ptr(), scales.stride(0), packed.shape[0], padded,
                 packed.shape[1], offset, first, mu]
        offset, first = offset + size, first + max(1, triton.cdiv(padded, block_rows))
    fields = [host[i * _IWIDTH.value: (i + 1) * _IWIDTH.value] for i in range(len(operands))]
    aligned = all(row[0] % _ALIGN.value == 0 and row[1] % _ALIGN.value == 0 and row[3] % _BLOCK.value == 0
                  and row[6] % _ALIGN.value == 0 and row[7] % _ALIGN.value == 0 for row in fields)
    desc = torch.tensor(host, dtype=torch.int64).to(device, non_blocking=True)
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        _int8_kernel[(first,)](desc, out, len(operands), OPS=max(_MIN_OPS, triton.next_power_of_2(len(operands))),
                               BLOCK_ROWS=block_rows, BLOCK_BYTES=block_bytes, ALIGNED=aligned,
                               num_warps=num_warps)
    return [w.view(torch.int8).view(padded, 2 * p.shape[1])
            for w, (p, _s, _mu, padded) in zip(out.split(sizes), operands)]


def _int8_groups(groups, mus: Sequence[int]) -> torch.Tensor:
    """Every group's fp16 output (flat, group after group) by decode_int8 and one torch._int_mm per group, from the
    per-operand ``mus`` (A0, B0, A1, ...; all groups must share mu_A + mu_B, as official data does)."""
    from task.reference import SCALE_UNIT_EXP
    dev = groups[0][0].device
    sizes = [a.shape[0] * b.shape[0] for a, _sa, b, _sb in groups]
    out32 = torch.empty(sum(sizes), dtype=torch.int32, device=dev)
    decoded = decode_int8([x for g, (a, sa, b, sb) in enumerate(groups)
                           for x in ((a, sa, mus[2 * g], max(17, a.shape[0])), (b, sb, mus[2 * g + 1], b.shape[0]))])
    for g, ((a, _sa, b, _sb), slot) in enumerate(zip(groups, out32.split(sizes))):
        m, n = a.shape[0], b.shape[0]  # torch._int_mm takes more than 16 rows: A is padded with zero rows
        if m > 16:
            torch._int_mm(decoded[2 * g], decoded[2 * g + 1].T, out=slot.view(m, n))
        else:
            slot.view(m, n).copy_(torch._int_mm(decoded[2 * g], decoded[2 * g + 1].T)[:m])
    exponents = {mus[2 * g] + mus[2 * g + 1] for g in range(len(groups))}
    assert len(exponents) == 1, exponents
    return torch.mul(out32, 2.0 ** (exponents.pop() - 2 * (SCALE_UNIT_EXP + 1))).to(torch.float16)


def main() -> None:
    from harness.worker.timing import L2Flush
    from task import reference_triton as rt
    from task.inputs import generate_many
    from task.reference import _int8_shift, _key_table, _read_stats, _triton_groups
    from task.spec import load_shapes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dev = torch.device("cuda", 0)
    flush, keys = L2Flush(dev, limit=False, lines=False), _key_table(dev)

    def fused(groups):
        outs, stats = rt.grouped_gemm(groups, keys)
        _read_stats(stats)
        return torch.cat([o.flatten() for o in outs])

    def integer(groups):
        bounds = _read_stats(rt.scale_stats([op for a, sa, b, sb in groups for op in ((a, sa), (b, sb))], keys))
        mus = [_int8_shift(bd) for bd in bounds]
        assert None not in mus, "an operand does not fit int8"
        return _int8_groups(groups, mus)

    def timed(f) -> float:
        torch.cuda.synchronize()
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    def kernels(f) -> dict[str, float]:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            f()
            torch.cuda.synchronize()
        return {e.key[:60]: round(e.device_time_total / 1e3, 3) for e in prof.key_averages() if e.device_time_total}

    rows = []
    for case in load_shapes(args.shapes).cases:
        inputs = generate_many(case.m, case.n, case.k, case.g, [case.seed + 42 * (j + 1) for j in range(15)])
        groups = [g for x in inputs for g in _triton_groups(x, "plain", dev)[1]]
        same = bool(torch.equal(fused(groups).view(torch.int16), integer(groups).view(torch.int16)))
        times = {"fused": [], "int8": []}
        for _ in range(args.reps):
            for name, f in (("fused", fused), ("int8", integer)):
                times[name].append(timed(lambda: f(groups)))
        row = {"case": case.name, "same_bits": same, **{k: statistics.median(v) for k, v in times.items()},
               "fused_kernels_ms": kernels(lambda: fused(groups)), "int8_kernels_ms": kernels(lambda: integer(groups))}
        print(json.dumps(row), flush=True)
        rows.append(row)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
