"""Host-side logic of cute_wgmma_sm90: limits, tile bookkeeping, the decode's bit arithmetic, caches. No cutlass.

The kernel in ``submission.py`` calls ``decode_word`` and ``scale_half_bits`` from here on its own 32-bit
registers (they use only ``&``, ``|``, ``<<`` and ``>>``), so the CPU tests check the very arithmetic the GPU runs.
Everything else mirrors a decision the kernel makes: the group lookup from a CTA's index, the tile it owns, the
scale offsets in the blocked 32x4x4 layout (task.formats), the compile-cache key and the launch plan (device
tables per problem-size tuple, a pointer table per set of input addresses).
"""
from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from task.formats import SF_VEC, blocked_view_shape, blocked_view_strides

VARIANT = "cute_wgmma_sm90"
TARGET_ARCH = "sm_90a"
#: This file, hashed into the compile key (in a one-file export: the export itself).
HOST_SOURCE = Path(__file__)


class UnsupportedProblem(ValueError):
    """The problem (or the machine) is outside what this variant runs; the message names the limit."""


@dataclass(frozen=True)
class KernelConfig:
    """Every compile-time constant of the kernel (the group count aside): part of the compile-cache key.

    Swap AB: a CTA computes a tile of C^T, ``tile_n`` rows of the problem's N (wgmma's M side, two warpgroups of
    64) by ``tile_m`` rows of the problem's M (wgmma's N side)."""

    tile_n: int = 128  #: problem-N rows per CTA (wgmma M: 2 warpgroups x 64)
    tile_m: int = 128  #: problem-M rows per CTA (wgmma N)
    tile_k: int = 64  #: K per step: 32 bytes of a row, one 4-column block of the scale layout
    stages: int = 3  #: decoded shared-memory buffers (3: one barrier a step suffices, see the kernel)
    threads: int = 256  #: two warpgroups; thread t decodes half h = t % 2 of row t // 2 of both operands
    #: G up to which the CTA finds its group with an unrolled compare chain; above it, a binary search.
    unrolled_lookup_max_groups: int = 8


CONFIG = KernelConfig()

#: K must be a whole number of 64-wide steps (also the problem's own rule).
K_MULTIPLE = CONFIG.tile_k
#: 16-byte vector loads of A and B rows need 16-byte aligned base pointers; C and the scales are read/written in
#: 2-byte units.
PTR_ALIGN_BYTES = 16
#: In-kernel index arithmetic (element counts, scale offsets, prefix sums) is 32-bit signed.
INT32_MAX = 2**31 - 1
#: Words of one group's row in the pointer table: a, b, c, sfa, sfb addresses, then M, N, K.
TABLE_COLS = 8
#: fp16 operands carry value x scale x 2^-7 each (decode_word: x 2^-14, scale_half_bits x 2^-8, times 2^15), so
#: the fp32 sums are multiplied by 2^14 before the fp16 store: exact powers of two throughout.
SCALE_BOOST = 2.0**15
ACC_RESCALE = 2.0**14


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------------------------------
# The decode, shared with the kernel
# ---------------------------------------------------------------------------------------------------------------
def decode_word(w, u=int):
    """Eight e2m1 codes (one little-endian 32-bit word of packed K values, element 2i the low nibble of byte i)
    -> four f16x2 words (lower half the even element). Each fp16 is the code's value x 2^-14: sign to bit 15 and
    the three magnitude bits to bits 11..9 (code 1, the e2m1 subnormal 0.5, becomes the fp16 subnormal 2^-15).
    Works on Python ints and on the kernel's Uint32 values alike (``u`` types its constants: cutlass.Uint32 there,
    so no operation widens to 64 bits)."""
    lo = w & u(0x0F0F0F0F)
    hi = (w >> u(4)) & u(0x0F0F0F0F)
    lt = ((lo & u(0x08080808)) << u(4)) | ((lo & u(0x07070707)) << u(1))  # per byte: the fp16's high byte
    ht = ((hi & u(0x08080808)) << u(4)) | ((hi & u(0x07070707)) << u(1))
    d0 = ((lt & u(0xFF)) << u(8)) | ((ht & u(0xFF)) << u(24))
    d1 = (lt & u(0xFF00)) | ((ht & u(0xFF00)) << u(16))
    d2 = ((lt >> u(8)) & u(0xFF00)) | ((ht & u(0xFF0000)) << u(8))
    d3 = ((lt >> u(16)) & u(0xFF00)) | (ht & u(0xFF000000))
    return d0, d1, d2, d3


def scale_half_bits(b, u=int):
    """One e4m3fn byte -> the fp16 bits of its value x 2^-8 (sign, then exponent and mantissa shifted as one:
    e4m3's bias 7 against fp16's 15; e4m3 subnormals land on fp16 subnormals). Exact for every finite code.
    ``u`` types the constants, as in decode_word."""
    return ((b & u(0x80)) << u(8)) | ((b & u(0x7F)) << u(7))


def sf_pair_index(row, step, half, rest_k):
    """Index, in 2-byte units, of the two scales (columns 4 step + 2 half and + 1) of ``row`` in the blocked
    layout: task.formats.blocked_offset(row, 4 step + 2 half, rest_k) / 2 (4 columns of a row are contiguous)."""
    return ((row >> 7) * rest_k + step) * 256 + (row & 31) * 8 + ((row >> 5) & 3) * 2 + half


# ---------------------------------------------------------------------------------------------------------------
# Grid bookkeeping
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupShape:
    """One group's GEMM: C[M, N] = A[M, K] @ B[N, K]^T."""

    m: int
    n: int
    k: int

    def tiles_m(self, cfg: KernelConfig = CONFIG) -> int:
        return ceil_div(self.m, cfg.tile_m)

    def tiles_n(self, cfg: KernelConfig = CONFIG) -> int:
        return ceil_div(self.n, cfg.tile_n)

    def tiles(self, cfg: KernelConfig = CONFIG) -> int:
        return self.tiles_m(cfg) * self.tiles_n(cfg)


def cta_prefix(shapes: Sequence[GroupShape], cfg: KernelConfig = CONFIG) -> list[int]:
    """G+1 prefix sums of the tiles per group: group g owns CTAs [prefix[g], prefix[g+1])."""
    out = [0]
    for s in shapes:
        out.append(out[-1] + s.tiles(cfg))
    return out


def group_of_cta(prefix: Sequence[int], cta: int, cfg: KernelConfig = CONFIG) -> int:
    """The group of CTA ``cta``, found as the kernel finds it (a compare chain for small G, else bisection)."""
    if not 0 <= cta < prefix[-1]:
        raise IndexError(f"CTA {cta} outside the grid of {prefix[-1]} CTAs")
    if len(prefix) - 1 <= cfg.unrolled_lookup_max_groups:
        return sum(1 for start in prefix[1:-1] if cta >= start)
    lo, hi = 0, len(prefix) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if prefix[mid + 1] <= cta:
            lo = mid + 1
        else:
            hi = mid
    return lo


def cta_tile(prefix: Sequence[int], shapes: Sequence[GroupShape], cta: int,
             cfg: KernelConfig = CONFIG) -> tuple[int, int, int]:
    """(group, m tile, n tile) of CTA ``cta``; M tiles run fastest inside a group, as in the kernel."""
    g = group_of_cta(prefix, cta, cfg)
    rest = cta - prefix[g]
    tiles_m = shapes[g].tiles_m(cfg)
    return g, rest % tiles_m, rest // tiles_m


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------
def validate_sizes(problem_sizes: Sequence[Sequence[int]], cfg: KernelConfig = CONFIG) -> tuple[GroupShape, ...]:
    """Check every group's (M, N, K, L); raise UnsupportedProblem naming the limit."""
    if len(problem_sizes) < 1:
        raise UnsupportedProblem(f"{VARIANT}: expected at least 1 group, got 0")
    shapes = []
    for g, size in enumerate(problem_sizes):
        where = f"{VARIANT}: group {g}"
        if len(size) != 4:
            raise UnsupportedProblem(f"{where}: expected (M, N, K, L), got {tuple(size)!r}")
        m, n, k, l = (int(x) for x in size)
        if l != 1:
            raise UnsupportedProblem(f"{where}: L must be 1, got L={l}")
        if m < 1 or n < 1:
            raise UnsupportedProblem(f"{where}: M and N must be >= 1, got M={m}, N={n}")
        if k < K_MULTIPLE or k % K_MULTIPLE:
            raise UnsupportedProblem(f"{where}: K must be a positive multiple of {K_MULTIPLE}, got K={k}")
        for name, count in (("M*K", m * k), ("N*K", n * k), ("M*N", m * n)):
            if count > INT32_MAX:
                raise UnsupportedProblem(
                    f"{where}: {name} = {count} elements exceeds the kernel's 32-bit index range ({INT32_MAX})")
        shapes.append(GroupShape(m, n, k))
    total = cta_prefix(shapes, cfg)[-1]
    if total > INT32_MAX:
        raise UnsupportedProblem(f"{VARIANT}: {total} output tiles exceed the grid limit of {INT32_MAX} CTAs")
    return tuple(shapes)


def _check_tensor(t, where: str, dtype: torch.dtype, shape: tuple, strides: tuple) -> None:
    if t.dtype != dtype:
        raise UnsupportedProblem(f"{where}: expected dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise UnsupportedProblem(f"{where}: expected shape {shape}, got {tuple(t.shape)}")
    got = tuple(t.stride())
    if any(s != e for s, e, d in zip(got, strides, shape) if d != 1):  # a size-1 dimension's stride never moves
        raise UnsupportedProblem(f"{where}: expected strides {strides} (the canonical layout), got {got}")
    if t.data_ptr() % PTR_ALIGN_BYTES:
        raise UnsupportedProblem(
            f"{where}: base pointer must be {PTR_ALIGN_BYTES}-byte aligned, got address {t.data_ptr():#x}")


def validate_inputs(data, cfg: KernelConfig = CONFIG) -> tuple[GroupShape, ...]:
    """Validate a whole ``input_t`` (sizes, dtypes, shapes, strides, alignment, one device) before any launch."""
    abc, _sfs, sfs_reordered, problem_sizes = data
    if not (len(abc) == len(sfs_reordered) == len(problem_sizes)):
        raise UnsupportedProblem(
            f"{VARIANT}: expected one entry per group in abc, sf_reordered and problem_sizes, got "
            f"{len(abc)}, {len(sfs_reordered)}, {len(problem_sizes)}")
    shapes = validate_sizes(problem_sizes, cfg)
    device = abc[0][0].device
    fp4, fp8 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
    for g, (s, (a, b, c), (sfa, sfb)) in enumerate(zip(shapes, abc, sfs_reordered)):
        where = f"{VARIANT}: group {g}"
        half_k = s.k // 2
        _check_tensor(a, f"{where} a", fp4, (s.m, half_k, 1), (half_k, 1, s.m * half_k))
        _check_tensor(b, f"{where} b", fp4, (s.n, half_k, 1), (half_k, 1, s.n * half_k))
        _check_tensor(c, f"{where} c", torch.float16, (s.m, s.n, 1), (s.n, 1, s.m * s.n))
        _check_tensor(sfa, f"{where} sfa_reordered", fp8, blocked_view_shape(s.m, s.k // SF_VEC),
                      blocked_view_strides(s.m, s.k // SF_VEC))
        _check_tensor(sfb, f"{where} sfb_reordered", fp8, blocked_view_shape(s.n, s.k // SF_VEC),
                      blocked_view_strides(s.n, s.k // SF_VEC))
        for name, t in (("a", a), ("b", b), ("c", c), ("sfa_reordered", sfa), ("sfb_reordered", sfb)):
            if t.device != device:
                raise UnsupportedProblem(f"{where} {name}: expected device {device}, got {t.device}")
    return shapes


# ---------------------------------------------------------------------------------------------------------------
# Compile key and the on-disk cache of compiled kernels
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompileKey:
    """Everything baked into one compiled artefact."""

    variant: str
    config: KernelConfig
    num_groups: int  #: sizes the tables and picks the group lookup
    arch: str
    dsl_version: str
    source_sha: str  #: sha256 of the kernel's source files: an edited kernel never loads a stale object

    def digest(self) -> str:
        """16 hex digits naming this key's object file in the cache folder."""
        return hashlib.sha256(repr(self).encode()).hexdigest()[:16]


def source_digest(paths: Sequence[Path]) -> str:
    """sha256 over the bytes of ``paths`` (the kernel's own files), 16 hex digits."""
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).read_bytes())
    return h.hexdigest()[:16]


def compile_key(num_groups: int, dsl_version: str, source_sha: str, cfg: KernelConfig = CONFIG,
                arch: str = TARGET_ARCH) -> CompileKey:
    """The key of the kernel for ``num_groups`` groups. M, N, K and pointers are runtime data (device tables)."""
    return CompileKey(VARIANT, cfg, int(num_groups), arch, dsl_version, source_sha)


def cache_dir() -> Path:
    """Where compiled kernels persist between processes: ``$FP4BENCH_CACHE/cute_wgmma_sm90`` (in the sandbox,
    the variant's own writable build folder), else ``~/.cache/fp4bench/cute_wgmma_sm90``."""
    base = os.environ.get("FP4BENCH_CACHE") or str(Path.home() / ".cache" / "fp4bench")
    return Path(base) / VARIANT


# ---------------------------------------------------------------------------------------------------------------
# Launch plans: device tables per problem-size tuple, a pointer table per set of input addresses
# ---------------------------------------------------------------------------------------------------------------
def table_rows(data, shapes: Sequence[GroupShape]) -> tuple[tuple[int, ...], ...]:
    """One row per group: a, b, c, sfa_reordered, sfb_reordered addresses, then M, N, K (TABLE_COLS words)."""
    abc, _sfs, sfs_reordered, _sizes = data
    return tuple((a.data_ptr(), b.data_ptr(), c.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), s.m, s.n, s.k)
                 for (a, b, c), (sfa, sfb), s in zip(abc, sfs_reordered, shapes))


#: Pointer tables a plan keeps, one per set of input addresses: the official loop cycles through 15 input sets a
#: sample (drawn once), so after the first sample every call finds its table on the GPU and uploads nothing.
TABLES_PER_PLAN = 64


@dataclass
class PointerTable:
    """One uploaded int64 [G, TABLE_COLS] table of input addresses and sizes (``table_rows``)."""

    tensor: torch.Tensor
    extras: dict = field(default_factory=dict)  #: launcher-owned objects (the kernel's pointer to it)


@dataclass
class LaunchPlan:
    """Device tables for one problem-size tuple: the CTA prefix sums and a pointer table per set of addresses
    (least recently used dropped beyond ``capacity``)."""

    shapes: tuple[GroupShape, ...]
    prefix: tuple[int, ...]
    prefix_t: torch.Tensor  #: int32 [G + 1]
    capacity: int = TABLES_PER_PLAN
    tables: OrderedDict = field(default_factory=OrderedDict)  #: table_rows(...) -> PointerTable
    uploads: int = 0  #: tables uploaded so far
    extras: dict = field(default_factory=dict)  #: launcher-owned objects (the kernel's pointer to prefix_t)

    @property
    def num_groups(self) -> int:
        return len(self.shapes)

    @property
    def total_ctas(self) -> int:
        return self.prefix[-1]

    def table_for(self, rows) -> PointerTable:
        """The table holding ``rows``, uploaded the first time these addresses come, ordered on the default queue
        like the launches (torch's current one in fp4bench's worker and in the official runner). Each upload copies
        from a fresh pinned buffer: torch's caching host allocator does not hand it out again before the copy read
        it."""
        table = self.tables.get(rows)
        if table is not None:
            self.tables.move_to_end(rows)
            return table
        host = torch.tensor(rows, dtype=torch.int64)
        device = self.prefix_t.device
        if device.type == "cuda":
            tensor = torch.empty(host.shape, dtype=torch.int64, device=device)
            tensor.copy_(host.pin_memory(), non_blocking=True)
        else:
            tensor = host
        table = self.tables[rows] = PointerTable(tensor)
        self.uploads += 1
        while len(self.tables) > self.capacity:
            self.tables.popitem(last=False)
        return table


def build_plan(shapes: Sequence[GroupShape], device: torch.device | str, cfg: KernelConfig = CONFIG) -> LaunchPlan:
    """The plan for ``shapes``: the CTA prefix sums on ``device``, no pointer table yet."""
    shapes = tuple(shapes)
    prefix = tuple(cta_prefix(shapes, cfg))
    return LaunchPlan(shapes, prefix, torch.tensor(prefix, dtype=torch.int32, device=device))


class PlanCache:
    """Launch plans keyed by (device, problem sizes), least recently used dropped beyond ``capacity``."""

    def __init__(self, capacity: int = 32, builder: Callable[..., LaunchPlan] = build_plan):
        self.capacity = capacity
        self._builder = builder
        self._plans: OrderedDict[tuple, LaunchPlan] = OrderedDict()

    def get(self, shapes: Sequence[GroupShape], device: torch.device | str) -> LaunchPlan:
        key = (str(torch.device(device)), tuple(shapes))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._builder(shapes, device)
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def __len__(self) -> int:
        return len(self._plans)
