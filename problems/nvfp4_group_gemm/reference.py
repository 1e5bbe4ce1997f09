"""The exact reference: ``C_g = (A_g * SFA_g) @ (B_g * SFB_g)^T`` for every group, rounded once to fp16; the entry
points the rest of the code imports.

Two paths that give the same bits wherever both apply:

- ``ref_kernel_fp64``: the ground truth. Decode e2m1 and e4m3fn exactly into fp64, multiply in fp64, round once
  to fp16. Every product of two (e2m1 x e4m3fn) values has at most 12 significant bits, so fp64 products are
  exact; for official data the sums are exact too (multiples of 1/4 well inside 2^53). The fp64 -> fp16 step goes
  through fp32 with round-to-odd, which makes it a single correct rounding (fp32 keeps 13 more bits than fp16).
- ``ref_kernel``: per group, when ``exact_in_fp32`` holds, an exact decode into bf16 and a GEMM with fp32
  accumulation, rounded once to fp16 (CUDA: one Triton GEMM for every group that decodes in registers,
  reference_triton; the torch table decode and a GEMM with fp32 output where triton does not import; on the
  CPU an int8 decode and an integer GEMM where the elements fit int8 and ``torch._int_mm`` is the faster on the
  host, else fp32); otherwise the fp64 path.

Where the rest lives: the bound and its proof in reference_bound, the fast paths in reference_paths,
where the scale bytes are read in reference_scales, the compile warm-up in reference_warm (``warm_up``,
re-exported here), the Triton kernels in reference_triton. This module holds the fp64 ground truth and the
dispatch: per input, the bound is read after one sync and each group takes the fast or the fp64 path; inputs are
batched (``ref_kernel_many``, ``ReferencePlan``) to keep launches and syncs few.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from problems.nvfp4_group_gemm import input_t, output_t
from problems.nvfp4_group_gemm.formats import SF_VEC, decode_e2m1, decode_e4m3fn
from problems.nvfp4_group_gemm.reference_bound import _group_exact, _key_table, _read_stats, _scale_stats, exact_in_fp32
from problems.nvfp4_group_gemm.reference_paths import (_fast, _fast_cpu, _queue_triton_many, _triton_decoder,
                                                      _triton_groups, dequantize_lut)
from problems.nvfp4_group_gemm.reference_scales import Scales, _load_codes, _scale_sources
from problems.nvfp4_group_gemm.reference_warm import warm_up

__all__ = ["ReferencePlan", "dequantize", "dequantize_lut", "exact_in_fp32", "ref_kernel", "ref_kernel_fp64",
           "ref_kernel_many", "round_to_fp16", "warm_up"]

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


def ref_kernel(data: input_t, *, scales: Scales = "plain", decode: Decode = "auto") -> output_t:
    """Expected outputs for ``data``: one fp16 [M, N, 1] tensor per group, on the device of ``a``; the same bits
    as ``ref_kernel_fp64``.

    Per group, ``exact_in_fp32``'s bound is checked from the scale bytes (and, when that fails, from the largest
    e2m1 magnitude present); groups that pass take the fast decode and one fp32-accumulating GEMM, the others the
    fp64 path. Work is batched per input to keep launches few (one GEMM per group, one rounding for all; the fast
    outputs are views of one buffer); on CUDA all of it is queued before the one sync that reads the bounds.

    ``scales="plain"`` reads the plain scales (sfasfb_tensors, CPU), as the official reference does;
    ``"reordered"`` reads the blocked copies already on the GPU (sfasfb_reordered_tensors), valid only when both
    hold the same scales, as inputs draws them.

    ``decode="auto"``: on CUDA with triton importable, one Triton launch takes the scale statistics and one runs
    every group's GEMM, decoding in registers (reference_triton.grouped_gemm); elsewhere the torch decode (a
    65536-entry table gathered by an int32 index per byte, one gather for the statistics). ``"torch"`` forces the
    torch decode, ``"triton"`` the Triton GEMM. Raises ValueError for an unknown ``scales`` or ``decode``,
    ``decode="triton"`` without CUDA inputs or triton, or inconsistent shapes.
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
    (reference_triton.PreparedGemm), so a run is two launches, one sync and the bound per group; anything else
    runs ``ref_kernel_many`` each time. It holds references to every tensor of ``inputs``. ``decoder``: the
    reference_triton module to use (default: the imported one, for CUDA inputs). Raises as ref_kernel_many
    does, at construction."""

    def __init__(self, inputs: Sequence[input_t], *, scales: Scales = "plain", decoder=None):
        self.inputs, self.scales = list(inputs), scales
        checked = [_checked(x, scales, "auto") for x in self.inputs]
        if decoder is None:  # tests pass the interpreted reference_triton, which runs on CPU tensors
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
