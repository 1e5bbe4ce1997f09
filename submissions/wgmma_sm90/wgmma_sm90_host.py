"""wgmma_sm90 host logic that needs no GPU: the limits, the tile plan, input checks, the nvcc build of kernel.cu,
and the kernel's parameter block.

The constants mirror kernel.cu (a test compares them). The module name carries the variant's name because a
variant's folder goes first on ``sys.path``.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from task.formats import ATOM_BYTES, SF_VEC, blocked_view_shape, blocked_view_strides

HERE = Path(__file__).resolve().parent
KERNEL_SOURCE = HERE / "kernel.cu"
FAST_CALL_SOURCE = HERE / "fast_call.cpp"
KERNEL_NAME = "fp4_group_gemm_sm90"
#: The same kernel with A copied from the pre-pass's scratch (kernel.cu run_tile<..., PRE = true>), and the pre-pass.
KERNEL_PRE_NAME = "fp4_group_gemm_sm90_pre"
PREPASS_NAME = "fp4_predecode_a"
#: The int8 path (kernel.cu run_tile_s8: A from the int8 pre-pass, wgmma .s32.s8.s8, an fp16 fallback per tile), and
#: its pre-pass.
KERNEL_S8_NAME = "fp4_group_gemm_sm90_s8"
PREPASS_S8_NAME = "fp4_predecode_a_s8"
#: The warp-specialised loop (kernel.cu ws_run_tile): A decoded by the producers, or copied from the pre-pass.
KERNEL_WS_NAME = "fp4_group_gemm_sm90_ws"
KERNEL_WS_PRE_NAME = "fp4_group_gemm_sm90_ws_pre"

#: nvcc flags: wgmma needs the architecture-specific sm_90a target (the -gencode form; see the device notes).
NVCC_FLAGS = ("-cubin", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-lineinfo")
#: Extra nvcc arguments for experiments (bench.py): "-DWG_SKIP_MMA", "-DWG_SKIP_DECODE", or (the int8 loop)
#: "-DWG_SKIP_ACOPY" / "-DWG_SKIP_BCOPY" (A's copies; B's rows) leave a stage out (the output is wrong; the time says
#: what the rest costs); "-DWG_STAGES=N" changes the ring depth (STAGES follows), "-DWG_PRE_THREADS=N" the pre-pass's
#: block size (PRE_THREADS follows).
EXTRA_FLAGS = tuple(os.environ.get("WGMMA_SM90_NVCC_EXTRA", "").split())


def _define(name: str, default: int) -> int:
    for flag in EXTRA_FLAGS:
        if flag.startswith(f"-D{name}="):
            return int(flag.split("=", 1)[1])
    return default


#: Groups whose addresses and sizes travel in the kernel's parameter block (kernel.cu MAX_GROUPS).
MAX_GROUPS = 16
#: Rows of N per CTA (two warpgroups of 64), K per step, raw ring depth, threads per CTA (kernel.cu BN, BK,
#: STAGES, THREADS).
BN, BK, STAGES, THREADS = 128, 64, _define("WG_STAGES", 4), 256
#: Decoded A buffers (kernel.cu DEC_BUFS).
DEC_BUFS = 3
#: Columns of M per CTA that the kernel is compiled for (wgmma N sizes), ascending (bench.py may narrow them).
BM_CLASSES = (64, 96, 128)
#: The widest (kernel.cu BM_MAX): rows of a decoded A buffer, and with BN the size of a split-K partial.
BM_MAX = 128
#: Dynamic shared memory per CTA in bytes (kernel.cu SMEM_BYTES + 1024 for aligning the base to 1024 bytes):
#: DEC_BUFS decoded A buffers of BM_MAX x BK fp16, then STAGES raw stages (B rows, A rows, B scale atoms, two of A's
#: scale atoms).
STAGE_BYTES = BN * BK // 2 + BM_MAX * BK // 2 + ATOM_BYTES + 2 * ATOM_BYTES
SMEM_BYTES = DEC_BUFS * BM_MAX * BK * 2 + STAGES * STAGE_BYTES + 1024
#: A paired CTA (choose_paired): two pipelines' shared memory, one alignment pad; 2 x THREADS threads.
PAIRED_SMEM_BYTES = 2 * (SMEM_BYTES - 1024) + 1024
#: fp32 values of one split-K part's partial sums (kernel.cu split_k_last).
PARTIAL_FLOATS = BN * BM_MAX

#: The predecoded path (kernel.cu PRE_*): A copied PRE_AHEAD steps ahead into PRE_ABUFS fp16 buffers; the raw ring
#: holds B's rows and scale atom only. Shared memory per CTA with the alignment pad, single and paired.
PRE_AHEAD = STAGES - 1
PRE_ABUFS = PRE_AHEAD + 2
PRE_STAGE_BYTES = BN * BK // 2 + ATOM_BYTES
PRE_SMEM_BYTES = PRE_ABUFS * BM_MAX * BK * 2 + STAGES * PRE_STAGE_BYTES + 1024
PRE_PAIRED_SMEM_BYTES = 2 * (PRE_SMEM_BYTES - 1024) + 1024
#: The int8 path (kernel.cu S8_REGION): a pipeline's shared memory is the raw path's (its fp16 fallback is the raw
#: loop), or, with the loop of one barrier per two K steps (kernel.cu s8_pair_loop; -DWG_S8_PAIRS=0 leaves it out),
#: that loop's 8 A buffers of BM_MAX x BK int8 and 6 raw slots of B if larger; per CTA with the alignment pad,
#: single and paired.
S8_PAIRS = bool(_define("WG_S8_PAIRS", 1))
S8_REGION = max(SMEM_BYTES - 1024, 8 * BM_MAX * BK + 6 * PRE_STAGE_BYTES) if S8_PAIRS else SMEM_BYTES - 1024
S8_SMEM_BYTES = S8_REGION + 1024
S8_PAIRED_SMEM_BYTES = 2 * S8_REGION + 1024
#: The largest dynamic shared memory any launch of the two-CTA-per-SM entry points asks for (their limit is raised
#: to it; the warp-specialised entry points' to WS_SMEM_BYTES).
MAX_SMEM_BYTES = max(PAIRED_SMEM_BYTES, PRE_PAIRED_SMEM_BYTES, S8_PAIRED_SMEM_BYTES)
#: The warp-specialised loop (kernel.cu WS_*): one CTA per SM of WS_THREADS (two producer warpgroups, two consumer
#: warpgroups); WS_STAGES decoded stages (B's BN x 128 bytes and A's BM_MAX x 128 bytes of fp16, swizzled), raw
#: copies WS_AHEAD steps ahead into WS_AHEAD + 1 raw slots (each B and A row's 32 bytes and four scale bytes), then
#: 2 x WS_STAGES mbarriers; the sum rounded up to 1024, plus the alignment pad. Both entry points use the same.
WS_PRODUCERS, WS_CONSUMERS = 256, 256
WS_THREADS = WS_PRODUCERS + WS_CONSUMERS
WS_STAGES = _define("WS_DSTAGES", 6)
WS_AHEAD = _define("WS_AHEAD", 2)
WS_RAW = WS_AHEAD + 1
WS_STAGE_BYTES = (BN + BM_MAX) * BK * 2
WS_RAW_BYTES = (BN + BM_MAX) * (BK // 2 + 4)
WS_SMEM_BYTES = -(-(WS_STAGES * WS_STAGE_BYTES + WS_RAW * WS_RAW_BYTES + 16 * WS_STAGES) // 1024) * 1024 + 1024
#: bench.py's override of choose_ws (None: the rule).
WS_OVERRIDE: bool | None = None
#: bench.py's override of choose_pdl (None: the rule).
PDL_OVERRIDE: bool | None = None
#: bench.py's override of choose_pre_pdl (None: the rule).
PRE_PDL_OVERRIDE: bool | None = None
#: Threads per pre-pass block (kernel.cu PRE_THREADS; "-DWG_PRE_THREADS=N" sets both): one per (K step, row of a
#: group's tiles).
PRE_THREADS = _define("WG_PRE_THREADS", 256)
#: Bytes of one predecoded row per K step: BK fp16 values, or BK int8 ones (the int8 path).
PRE_ROW_BYTES = BK * 2
S8_ROW_BYTES = BK
#: bench.py's override of choose_s8 (None: the rule).
S8_OVERRIDE: bool | None = None


# ----------------------------------------------------------------------------------------------------------
# Checks and the tile plan
# ----------------------------------------------------------------------------------------------------------

def _expect(cond: bool, what: str, expected, got) -> None:
    if not cond:
        raise ValueError(f"wgmma_sm90: {what}: expected {expected}, got {got}")


def check_sizes(sizes) -> None:
    """Raise ValueError (expected vs got) for problem sizes the kernel cannot do: 1..MAX_GROUPS groups of
    (M, N, K, 1) with M, N >= 1 and K a positive multiple of BK = 64 (one K step is 32 bytes of a row and one
    column of blocked scale atoms)."""
    _expect(1 <= len(sizes) <= MAX_GROUPS, "group count", f"1..{MAX_GROUPS}", len(sizes))
    for i, size in enumerate(sizes):
        _expect(len(size) == 4, f"group {i} problem size", "(M, N, K, L)", size)
        m, n, k, l = size
        _expect(l == 1, f"group {i} L", 1, l)
        _expect(m >= 1 and n >= 1, f"group {i} M, N", ">= 1", (m, n))
        _expect(k >= BK and k % BK == 0, f"group {i} K", f"a positive multiple of {BK}", k)
        _expect(max(m, n) * (k // 2) < 2**31 and m * n < 2**31, f"group {i} sizes",
                "each operand under 2^31 elements", (m, n, k))


def _blocked_ok(i: int, name: str, sf: torch.Tensor, rows: int, k: int) -> None:
    shape = blocked_view_shape(rows, k // SF_VEC)
    _expect(tuple(sf.shape) == shape, f"group {i} {name} blocked shape [32, 4, ceil(rows/128), 4, K/64, 1]",
            shape, tuple(sf.shape))
    strides = blocked_view_strides(rows, k // SF_VEC)[:5]
    _expect(tuple(sf.stride())[:5] == strides, f"group {i} {name} strides (storage (rest_mn, rest_k, 32, 4, 4))",
            strides, tuple(sf.stride())[:5])
    _expect(sf.dtype in (torch.float8_e4m3fn, torch.uint8), f"group {i} {name} dtype", "float8_e4m3fn", sf.dtype)


def validate(data) -> None:
    """Raise ValueError (expected vs got) unless ``data`` is an input_t this kernel can compute: sizes as in
    check_sizes; per group a (M, K/2, 1) and b (N, K/2, 1) e2m1 pairs and c (M, N, 1) fp16, row-major; the
    reordered scales (data[2]) in the blocked 32x4x4 layout of task/formats.py; every tensor on one CUDA device,
    16-byte aligned."""
    _expect(isinstance(data, (tuple, list)) and len(data) == 4, "input_t", "a 4-tuple", type(data).__name__)
    abc, _, sf_r, sizes = data
    check_sizes(sizes)
    g = len(sizes)
    _expect(len(abc) == g and len(sf_r) == g, "entries per group list", g, (len(abc), len(sf_r)))
    dev = abc[0][0].device
    _expect(dev.type == "cuda", "device", "cuda", dev)
    for i, ((a, b, c), (sfa, sfb), (m, n, k, _)) in enumerate(zip(abc, sf_r, sizes)):
        for name, t, rows, cols, dt in (("a", a, m, k // 2, (torch.float4_e2m1fn_x2, torch.uint8)),
                                        ("b", b, n, k // 2, (torch.float4_e2m1fn_x2, torch.uint8)),
                                        ("c", c, m, n, (torch.float16,))):
            _expect(t.dtype in dt, f"group {i} {name} dtype", dt[0], t.dtype)
            _expect(tuple(t.shape) == (rows, cols, 1), f"group {i} {name} shape", (rows, cols, 1), tuple(t.shape))
            _expect(tuple(t.stride())[:2] == (cols, 1), f"group {i} {name} strides (row-major)", (cols, 1),
                    tuple(t.stride())[:2])
        _blocked_ok(i, "sfa", sfa, m, k)
        _blocked_ok(i, "sfb", sfb, n, k)
        for name, t in (("a", a), ("b", b), ("c", c), ("sfa", sfa), ("sfb", sfb)):
            _expect(t.device == dev, f"group {i} {name} device", dev, t.device)
            _expect(t.data_ptr() % 16 == 0, f"group {i} {name} address", "16-byte aligned", hex(t.data_ptr()))


def layout_key(abc, sf_r) -> tuple:
    """What validate() looked at, per tensor, except the addresses: dtype, shape, strides, device."""
    return tuple((t.dtype, t.shape, t.stride(), t.device)
                 for (a, b, c), (sa, sb) in zip(abc, sf_r) for t in (a, b, c, sa, sb))


@functools.lru_cache(maxsize=None)
def cover_m(m: int) -> tuple[int, ...]:
    """Tile widths (BM_CLASSES) covering M columns at least cost, largest first. Cost per tile: bm + 64, the A and B
    rows a K step decodes for it (BN = 128 of B), so padding costs its rows and each extra tile the B decode."""
    if m <= 0:
        return ()
    best = None
    for c in BM_CLASSES:
        rest = cover_m(m - c)
        cost = c + 64 + sum(r + 64 for r in rest)
        if best is None or cost < best[0] or (cost == best[0] and len(rest) + 1 < len(best[1])):
            best = (cost, (c, *rest))
    return tuple(sorted(best[1], reverse=True))


class Split(NamedTuple):
    """How a plan splits K (plan_tiles): the ``full`` most expensive tiles stay whole, every later tile of at least
    ``parts`` K steps becomes ``parts`` CTAs on consecutive ranges of its K steps. (1, 0): no split-K."""

    parts: int
    full: int


NO_SPLIT = Split(1, 0)


def plan_tiles(sizes, split: Split = NO_SPLIT) -> list[tuple[int, ...]]:
    """CTA tiles (group, m0, n0, bm, first K step, K steps, split slot, part, parts): the ``split.full`` most
    expensive tiles whole, then the parts of the rest, each section most expensive first. Each group's M is covered
    by cover_m's widths, N by BN rows; a split tile's parts share a slot (slot -1: not split) and take near-equal K
    ranges, the longer first. Cost: K steps x (bm + 64)."""
    whole = []
    for g, (m, n, k, _) in enumerate(sizes):
        m0 = 0
        for bm in cover_m(m):
            for n0 in range(0, n, BN):
                whole.append((k // BK * (bm + 64), g, m0, n0, bm, k // BK))
            m0 += bm
    whole.sort(key=lambda t: -t[0])
    head, rest, slot = [], [], 0
    for i, (cost, g, m0, n0, bm, steps) in enumerate(whole):
        if i < split.full or split.parts < 2 or steps < split.parts:
            (head if i < split.full else rest).append((cost, g, m0, n0, bm, 0, steps, -1, 0, 1))
            continue
        k0 = 0
        for part in range(split.parts):
            n_steps = steps // split.parts + (part < steps % split.parts)
            rest.append((n_steps * (bm + 64), g, m0, n0, bm, k0, n_steps, slot, part, split.parts))
            k0 += n_steps
        slot += 1
    rest.sort(key=lambda t: -t[0])
    return [t[1:] for t in head + rest]


def tile_table(tiles) -> list[int]:
    """plan_tiles' tiles as kernel.cu reads them (Params.tiles): two int4 per CTA, (group, m0, n0, bm) and (first K
    step, K steps, the slot's first partial or -1, part | parts << 8). A slot of P parts owns P consecutive
    partials of BN x BM_MAX fp32 in the workspace and the counter at its first partial's index."""
    first, words, partials = {}, [], 0
    for g, m0, n0, bm, k0, steps, slot, part, parts in tiles:
        if slot >= 0 and slot not in first:
            first[slot], partials = partials, partials + parts
        words += [g, m0, n0, bm, k0, steps, first.get(slot, -1), part | parts << 8]
    return words


def split_partials(tiles) -> int:
    """Partials (and counters) the plan's split slots need: the sum of their parts."""
    return sum(parts for *_, slot, part, parts in tiles if slot >= 0 and part == 0)


#: Resident CTAs per SM (128 registers x 256 threads, 89 KB of shared memory each).
CTAS_PER_SM = 2
#: Split K only when each part keeps at least this many K steps (H200: halves of 16 steps lost, g8_n7168_k2048
#: 97 -> 120 us; halves of 56 won, g8_n4096_k7168 182 -> 170 us).
MIN_SPLIT_STEPS = 32
#: The most parts a split tile takes (the kernel's part word holds up to 255).
MAX_SPLIT_PARTS = 4
#: bench.py's override of choose_split (None: the rule).
SPLIT_OVERRIDE: Split | None = None


#: bench.py's override of choose_paired (None: the rule).
PAIRED_OVERRIDE: bool | None = None


def choose_paired(sizes, num_sms: int) -> bool:
    """True (one CTA of 2 x THREADS threads per tile, two pipelines on the two halves of K, kernel.cu run_tile)
    when the unsplit tiles number at most ``num_sms``, so an SM would otherwise run a single pipeline, and every K
    has at least two steps. Measured on the H200 (trace): one pipeline alone on an SM takes 500 ns per K step, two
    on an SM 700-760 ns each."""
    if PAIRED_OVERRIDE is not None:
        return PAIRED_OVERRIDE
    return len(plan_tiles(sizes)) <= num_sms and all(k // BK >= 2 for _, _, k, _ in sizes)


def choose_split(sizes, num_sms: int) -> Split:
    """When the unsplit tiles fill the CTA slots (CTAS_PER_SM x num_sms) more than once with a last wave at most
    half full: the full waves' tiles whole, and the R tiles left split into P = slots // R parts (at most
    MAX_SPLIT_PARTS, each of at least MIN_SPLIT_STEPS K steps), so their parts fill about one more wave; else no
    split. The first benchmark (352 tiles, 264 slots on the H200) runs 264 whole tiles, then 88 tiles in three
    parts. Grids of at most one CTA per SM get paired CTAs instead (choose_paired): split-K there merged its
    partials through L2 and read 38.8 / 21.0 us on the last two benchmarks, paired 36.7 / 18.3."""
    if SPLIT_OVERRIDE is not None:
        return SPLIT_OVERRIDE
    tiles, slots = len(plan_tiles(sizes)), CTAS_PER_SM * num_sms
    left = tiles % slots
    if tiles <= slots or not 0 < left <= slots // 2:
        return NO_SPLIT
    parts = min(MAX_SPLIT_PARTS, slots // left)
    while parts >= 2 and any(k // BK // parts < MIN_SPLIT_STEPS for _, _, k, _ in sizes):
        parts -= 1
    return Split(parts, tiles - left) if parts >= 2 else NO_SPLIT


#: bench.py's override of choose_predecode (None: the rule).
PREDECODE_OVERRIDE: bool | None = None
#: Predecode A when the grid's K steps per CTA slot reach this (see choose_predecode). The benchmarks run 149, 88,
#: 29 and 12 steps per slot. With the pre-pass's stores coalesced, ``bench.py --time`` with the rule at 50 and with
#: ``--predecode 1``, two rounds each in one H200 call (2026-12-01, kernels alone, us): 111.3 / 111.6, 68.5 / 68.8,
#: 33.2 / 32.5, 16.3 / 18.9, so the pre-pass pays from somewhere between 12 and 29 steps per slot; 20 splits them.
#: (Before the stores were coalesced it lost at 29: 34.4 against 34.9.)
MIN_PREDECODE_STEPS_PER_SLOT: float = 20


def choose_ws(sizes, num_sms: int) -> bool:
    """True: run the warp-specialised loop (fp4_group_gemm_sm90_ws / _ws_pre; one CTA per SM, no paired CTAs; the
    split and predecode choices as for the other loop). Off until it is measured on the H200 (issue 19)."""
    if WS_OVERRIDE is not None:
        return WS_OVERRIDE
    return False


def choose_pdl(sizes, num_sms: int) -> bool:
    """True: launch the main kernel with programmatic dependent launch (PDL, sm_90): it may be scheduled while
    the kernel queued before it (the pre-pass, or the previous call's main kernel) finishes, and waits
    (kernel.cu pdl_begin) before it reads or writes anything. The fp16 pre-pass is always a plain launch, the int8
    one by choose_pre_pdl. Not for the warp-specialised loop, whose entry points do not wait.

    H200, 2026-12-01, ``bench.py --time``, two rounds each in one call, us per call alone, the rule against
    ``--pdl 0``: 112.5 / 112.7, 68.4 / 68.9, 31.2 / 32.4, 16.3 / 17.3 on the four benchmarks (the first three
    predecode). With the pre-pass also launched under PDL it had lost on the shapes that predecode (111.6 -> 113.6,
    68.8 -> 69.0, 32.5 -> 34.6), hence the plain fp16 pre-pass (that one waited at its start, holding its slots)."""
    if PDL_OVERRIDE is not None:
        return PDL_OVERRIDE
    return True


#: Launch the int8 pre-pass under PDL when the grid runs at least this many K steps per CTA slot (choose_pre_pdl).
#: H200, 2026-12-03, ``bench.py --time --pre-pdl 0`` / ``1``, two rounds each in one call, kernels alone, us:
#: 96.19 / 93.42, 61.47 / 58.93, 25.60 / 24.24, 15.23 / 16.70 (second round 96.06 / 93.39, 61.40 / 58.99, 25.48 /
#: 24.20, 15.18 / 16.77): a gain at 149, 88 and 29 steps per slot, a loss at 12.
MIN_PRE_PDL_STEPS_PER_SLOT: float = 20


def choose_pre_pdl(sizes, num_sms: int) -> bool:
    """True: launch the int8 pre-pass (kernel.cu fp4_predecode_a_s8) under PDL too, when the main kernel is (the
    caller checks both), for grids of at least MIN_PRE_PDL_STEPS_PER_SLOT K steps per CTA slot. It may then start
    once every CTA of the previous call's main kernel has started, load and decode its A while that kernel finishes,
    and write the scratch and flags only after its griddepcontrol.wait (the previous main kernel done); the main
    kernel's own wait then covers both. The previous call's main kernel writes only its c tensors and this plan's
    own buffers, so the early reads of this call's A, sfa (and the main kernel's of B, sfb) see final inputs unless
    an input aliases the previous call's c (not an input_t the task makes)."""
    if PRE_PDL_OVERRIDE is not None:
        return PRE_PDL_OVERRIDE
    return steps_per_slot(sizes, num_sms) >= MIN_PRE_PDL_STEPS_PER_SLOT


def choose_s8(sizes, num_sms: int) -> bool:
    """True: the int8 path (kernel.cu run_tile_s8; implies the int8 pre-pass). With scales of 1 and 2 only (the
    official generator's), 2 x value x scale is an integer in -24..24, so wgmma .s32.s8.s8 (k32, twice the fp16
    rate on Hopper) sums the products exactly; a tile whose scales are anything else (full-range data) runs again on
    the fp16 raw path, so every input is computed, the others more slowly. Not with the warp-specialised loop."""
    if S8_OVERRIDE is not None:
        return S8_OVERRIDE
    return True


def next_epoch(epoch: int) -> int:
    """The int8 path's epoch for the next call (Params.epoch): epoch + 1, wrapping to 1 past int32's largest, never 0
    (the flags start at 0). fast_call.cpp counts the same way."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def predecode_rows(m: int) -> int:
    """Rows of a group's predecoded A: the sum of its tile widths (cover_m), so every tile's rows are present; rows
    from M on are zero."""
    return sum(cover_m(m))


def scratch_offsets(sizes, row_bytes: int = PRE_ROW_BYTES) -> tuple[list[int], int]:
    """Byte offset of each group's predecoded A in the scratch, and the scratch's size: group g takes
    predecode_rows(M) x K/BK x ``row_bytes`` (PRE_ROW_BYTES, or S8_ROW_BYTES for the int8 path; K step-major: step
    s, row r at (s x rows + r) x row_bytes), each group 1024-byte aligned."""
    offsets, total = [], 0
    for m, _, k, _ in sizes:
        offsets.append(total)
        total += -(-predecode_rows(m) * (k // BK) * row_bytes // 1024) * 1024
    return offsets, total


def prepass_blocks(sizes) -> int:
    """Blocks of the pre-pass launch: per group ceil(rows x K steps / PRE_THREADS) (kernel.cu fp4_predecode_a)."""
    return sum(-(-predecode_rows(m) * (k // BK) // PRE_THREADS) for m, _, k, _ in sizes)


def choose_predecode(sizes, num_sms: int) -> bool:
    """True (a pre-pass decodes every group's A once; the main loop copies it instead of decoding it per CTA along
    N) when the grid runs at least MIN_PREDECODE_STEPS_PER_SLOT K steps per CTA slot (CTAS_PER_SM x num_sms; the
    pipelines of paired CTAs count as slots): the shorter the loops, the less the saved decode covers the pre-pass
    and the second launch."""
    if PREDECODE_OVERRIDE is not None:
        return PREDECODE_OVERRIDE
    return steps_per_slot(sizes, num_sms) >= MIN_PREDECODE_STEPS_PER_SLOT


def steps_per_slot(sizes, num_sms: int) -> float:
    """The grid's K steps (every CTA's, with the split rule's tiles) per CTA slot (CTAS_PER_SM x num_sms; the
    pipelines of paired CTAs count as slots): how long the main kernel runs against one pre-pass. The benchmarks:
    149, 88, 29 and 12 on 132 SMs."""
    return sum(t[5] for t in plan_tiles(sizes, choose_split(sizes, num_sms))) / (CTAS_PER_SM * num_sms)


# ----------------------------------------------------------------------------------------------------------
# Build
# ----------------------------------------------------------------------------------------------------------

def find_nvcc() -> str:
    """nvcc on PATH, else under $CUDA_HOME or /usr/local/cuda*. Raises RuntimeError when there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(map(str, Path("/usr/local").glob(
        "cuda-*")), reverse=True)]
    for root in roots:
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    raise RuntimeError("wgmma_sm90: nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda*); it builds kernel.cu "
                       "for sm_90a on the first call")


def source_digest() -> str:
    """Hash of kernel.cu and the nvcc flags: names the cached cubin."""
    h = hashlib.sha256(KERNEL_SOURCE.read_bytes())
    h.update(repr(NVCC_FLAGS + EXTRA_FLAGS).encode())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """$FP4BENCH_CACHE/wgmma_sm90, else ~/.cache/fp4bench/wgmma_sm90."""
    base = os.environ.get("FP4BENCH_CACHE") or Path.home() / ".cache" / "fp4bench"
    return Path(base) / "wgmma_sm90"


def nvcc_command(out: Path, verbose: bool = False) -> list[str]:
    """The nvcc command that compiles kernel.cu to the cubin ``out`` (``verbose``: ptxas's register and spill
    report on stderr)."""
    return [find_nvcc(), *NVCC_FLAGS, *EXTRA_FLAGS, *(["-Xptxas", "-v"] if verbose else []), "-o", str(out),
            str(KERNEL_SOURCE)]


def build_cubin(out_dir: Path | None = None, verbose: bool = False) -> Path:
    """Compile kernel.cu to an sm_90a cubin (cached by source_digest); returns its path. Raises RuntimeError with
    nvcc's output when the compile fails. ``verbose`` recompiles and prints ptxas's report."""
    return start_cubin_build(out_dir, verbose)()


def start_cubin_build(out_dir: Path | None = None, verbose: bool = False) -> Callable[[], Path]:
    """``build_cubin`` without waiting for it: nvcc starts now, in its own process, unless the cubin is cached; the
    function returned waits for it and returns the cubin's path, raising RuntimeError with nvcc's output when the
    compile failed. The variant's first call builds the C++ per-call path meanwhile (the README's "Builds")."""
    out_dir = Path(out_dir) if out_dir else cache_dir()
    out = out_dir / f"{KERNEL_NAME}_{source_digest()}.cubin"
    if out.is_file() and not verbose:
        return lambda: out
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = nvcc_command(tmp, verbose)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True)

    @functools.cache
    def finish() -> Path:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"wgmma_sm90: nvcc failed ({' '.join(cmd)}):\n{stdout}{stderr}")
        if verbose:
            print(stderr, end="")
        os.replace(tmp, out)
        return out

    return finish


def load_fast_call():
    """Build (once per source digest, in torch's extension cache) and import fast_call.cpp, the C++ per-call path.
    Needs a C++ compiler and torch's headers, no GPU. Raises what torch.utils.cpp_extension raises when it
    cannot."""
    from torch.utils.cpp_extension import load  # noqa: PLC0415  (slow import, only when building)

    digest = hashlib.sha256(FAST_CALL_SOURCE.read_bytes()).hexdigest()[:12]
    # load, not load_inline: load_inline prepends torch/extension.h, the header fast_call.cpp avoids
    return load(name=f"wgmma_sm90_fast_call_{digest}", sources=[str(FAST_CALL_SOURCE)],
                extra_cflags=["-O2"], verbose=False)


# ----------------------------------------------------------------------------------------------------------
# The kernel's parameter block
# ----------------------------------------------------------------------------------------------------------

class Params(ctypes.Structure):
    """kernel.cu ``struct Params``: addresses (a, b, c, sfa, sfb: kind-major, MAX_GROUPS each), the tile table's,
    split-K workspace's and counters' device addresses, each group's M, N, K and predecoded rows, the predecode
    flag and each group's predecoded A address; the int8 path's per-group flags (device address) and the call's
    epoch (counted up per call; a flag equal to it sends the group to the fp16 fallback)."""

    _fields_ = [("addr", ctypes.c_uint64 * (5 * MAX_GROUPS)), ("tiles", ctypes.c_uint64), ("ws", ctypes.c_uint64),
                ("cnt", ctypes.c_uint64), ("m", ctypes.c_int32 * MAX_GROUPS), ("n", ctypes.c_int32 * MAX_GROUPS),
                ("k", ctypes.c_int32 * MAX_GROUPS), ("mpad", ctypes.c_int32 * MAX_GROUPS),
                ("predecode", ctypes.c_int32), ("pre", ctypes.c_uint64 * MAX_GROUPS), ("flags", ctypes.c_uint64),
                ("epoch", ctypes.c_int32)]


def make_params(sizes, tiles: int, ws: int = 0, cnt: int = 0, scratch: int = 0, flags: int = 0) -> Params:
    """A parameter block for ``sizes`` with every group address 0 (a call writes them), the tile table at device
    address ``tiles`` and the split-K workspace and counters at ``ws`` and ``cnt``. With a ``scratch`` address
    (scratch_offsets' size), the predecoded path: its flag set, each group's rows and scratch address; with
    ``flags`` (the int8 path: MAX_GROUPS int32, zero, on the device), its rows int8 (S8_ROW_BYTES) and epoch 0 (a
    call counts it up before it launches, so it never meets a zero flag)."""
    p = Params()
    p.tiles, p.ws, p.cnt, p.flags = tiles, ws, cnt, flags
    offsets, _ = scratch_offsets(sizes, S8_ROW_BYTES if flags else PRE_ROW_BYTES)
    for g, (m, n, k, _) in enumerate(sizes):
        p.m[g], p.n[g], p.k[g] = m, n, k
        p.mpad[g] = predecode_rows(m)
        if scratch:
            p.pre[g] = scratch + offsets[g]
    p.predecode = 1 if scratch else 0
    return p
