"""Host-side logic of the cute_dense_per_group variant: limits, grid, caches. No cutlass, no GPU.

The kernel in ``submission.py`` is one dense NVFP4 GEMM compiled once with dynamic (M, N, K); the grouped problem
is computed by launching it once per group. This module holds what the host decides around those launches, in a
form a CPU test can check: the problem limits the kernel relies on, the grid of each launch, the scale-factor
offsets its layout produces in the blocked 32x4x4 layout (task.formats), the compile-cache key (everything baked
into the artefact: no shape is) and the per-call launch-argument cache (keyed on every pointer and size, so any
change rebuilds the arguments).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import torch

from task.formats import SF_VEC, blocked_offset, blocked_view_shape, blocked_view_strides

VARIANT = "cute_dense_per_group"


class UnsupportedProblem(ValueError):
    """The problem is outside what this variant computes correctly; the message names the limit."""


@dataclass(frozen=True)
class KernelConfig:
    """Every compile-time constant of the kernel: the whole compile-cache key besides arch and DSL version."""

    tile_m: int = 128  #: output tile rows (= MMA M, one CTA, cta_group::1)
    tile_n: int = 128  #: output tile columns (= MMA N)
    tile_k: int = 256  #: K per pipeline stage (4 MMA instructions of K=64)
    mma_inst_k: int = 64  #: K of one tcgen05.mma kind::mxf4nvf4 instruction
    ab_stages: int = 4  #: shared-memory stages of A/B/SFA/SFB (4 x 36 KiB)
    acc_stages: int = 1  #: accumulator stages in tensor memory (one tile per CTA)
    sf_vec: int = 16  #: elements per e4m3fn scale factor (block16)
    epilogue_warps: int = 4  #: warps 0..3 read TMEM and store C
    mma_warp: int = 4  #: issues the S2T scale copies and the MMAs
    tma_warp: int = 5  #: issues the TMA loads

    @property
    def threads(self) -> int:
        return 32 * (self.epilogue_warps + 2)


CONFIG = KernelConfig()

# ---------------------------------------------------------------------------------------------------------------
# Limits (README "Shape limits" gives the reasoning for each)
# ---------------------------------------------------------------------------------------------------------------
#: K must be a whole number of K tiles: the kernel loads 128x256 A/B tiles and 128x16 scale tiles per stage.
K_MULTIPLE = CONFIG.tile_k
#: The kernel promises the compiler N % 32 == 0 (cute.assume on the C row stride: 16-byte vector stores).
N_MULTIPLE = 32
#: The kernel promises the compiler 32-byte aligned base pointers for A, B, C, SFA and SFB.
PTR_ALIGN_BYTES = 32
#: In-kernel index arithmetic (M*K, N*K, M*N element counts) is 32-bit signed.
INT32_MAX = 2**31 - 1
#: Grid (ceil(M/128), ceil(N/128), 1): gridDim.x up to 2^31 - 1, gridDim.y up to 65535.
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class GroupShape:
    """One group's GEMM: C[M, N] = A[M, K] @ B[N, K]^T."""

    m: int
    n: int
    k: int


def launch_grid(shape: GroupShape, cfg: KernelConfig = CONFIG) -> tuple[int, int, int]:
    """One CTA per 128x128 output tile: (M tiles, N tiles, L=1)."""
    return ceil_div(shape.m, cfg.tile_m), ceil_div(shape.n, cfg.tile_n), 1


# ---------------------------------------------------------------------------------------------------------------
# The blocked 32x4x4 scale layout as the kernel addresses it
# ---------------------------------------------------------------------------------------------------------------
def sf_tile_offset(tile_mn: int, k_tile: int, rest_k: int, cfg: KernelConfig = CONFIG) -> int:
    """Byte offset of the first scale a CTA loads for row block ``tile_mn`` at K tile ``k_tile``."""
    return blocked_offset(tile_mn * cfg.tile_m, k_tile * cfg.tile_k // cfg.sf_vec, rest_k)


def sf_tile_bytes(cfg: KernelConfig = CONFIG) -> int:
    """Scale bytes one stage loads per operand: 128 rows x 16 scale columns, contiguous in the blocked layout."""
    return cfg.tile_m * cfg.tile_k // cfg.sf_vec


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------
def validate_sizes(problem_sizes: Sequence[Sequence[int]], cfg: KernelConfig = CONFIG,
                   variant: str = VARIANT) -> tuple[GroupShape, ...]:
    """Check every group's (M, N, K, L) against the kernel's limits; raise UnsupportedProblem naming the limit."""
    if len(problem_sizes) < 1:
        raise UnsupportedProblem(f"{variant}: expected at least 1 group, got 0")
    shapes = []
    for g, size in enumerate(problem_sizes):
        where = f"{variant}: group {g}"
        if len(size) != 4:
            raise UnsupportedProblem(f"{where}: expected (M, N, K, L), got {tuple(size)!r}")
        m, n, k, l = (int(x) for x in size)
        if l != 1:
            raise UnsupportedProblem(f"{where}: L must be 1, got L={l}")
        if m < 1 or n < 1:
            raise UnsupportedProblem(f"{where}: M and N must be >= 1, got M={m}, N={n}")
        if k < cfg.tile_k or k % K_MULTIPLE:
            raise UnsupportedProblem(
                f"{where}: K must be a positive multiple of {K_MULTIPLE} (whole {cfg.tile_m}x{cfg.tile_k} K tiles), "
                f"got K={k}")
        if n % N_MULTIPLE:
            raise UnsupportedProblem(
                f"{where}: N must be a multiple of {N_MULTIPLE} (the kernel assumes it for 16-byte C stores), "
                f"got N={n}")
        for name, count in (("M*K", m * k), ("N*K", n * k), ("M*N", m * n)):
            if count > INT32_MAX:
                raise UnsupportedProblem(
                    f"{where}: {name} = {count} elements exceeds the kernel's 32-bit index range ({INT32_MAX})")
        shape = GroupShape(m, n, k)
        gx, gy, _ = launch_grid(shape, cfg)
        if gx > MAX_GRID_X or gy > MAX_GRID_Y:
            raise UnsupportedProblem(
                f"{where}: grid ({gx}, {gy}) exceeds the launch limits ({MAX_GRID_X}, {MAX_GRID_Y})")
        shapes.append(shape)
    return tuple(shapes)


def _check_tensor(t, where: str, dtype: torch.dtype, shape: tuple, strides: tuple) -> None:
    if t.dtype != dtype:
        raise UnsupportedProblem(f"{where}: expected dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise UnsupportedProblem(f"{where}: expected shape {shape}, got {tuple(t.shape)}")
    got = tuple(t.stride())
    # A stride of a size-1 dimension never moves the pointer; compare only the others.
    if any(s != e for s, e, d in zip(got, strides, shape) if d != 1):
        raise UnsupportedProblem(f"{where}: expected strides {strides} (the canonical layout), got {got}")
    if t.data_ptr() % PTR_ALIGN_BYTES:
        raise UnsupportedProblem(
            f"{where}: base pointer must be {PTR_ALIGN_BYTES}-byte aligned, got address {t.data_ptr():#x}")


def validate_inputs(data, cfg: KernelConfig = CONFIG, variant: str = VARIANT) -> tuple[GroupShape, ...]:
    """Validate a whole ``input_t`` (sizes, dtypes, shapes, strides, alignment, devices) before any launch."""
    abc, _sfs, sfs_reordered, problem_sizes = data
    if not (len(abc) == len(sfs_reordered) == len(problem_sizes)):
        raise UnsupportedProblem(
            f"{variant}: expected one entry per group in abc, sf_reordered and problem_sizes, got "
            f"{len(abc)}, {len(sfs_reordered)}, {len(problem_sizes)}")
    shapes = validate_sizes(problem_sizes, cfg, variant)
    device = abc[0][0].device
    fp4, fp8 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
    for g, (s, (a, b, c), (sfa, sfb)) in enumerate(zip(shapes, abc, sfs_reordered)):
        where = f"{variant}: group {g}"
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
# Compile cache key
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompileKey:
    """Everything baked into the compiled artefact. M, N, K and the pointers are kernel arguments, so one artefact
    serves every group and every call."""

    variant: str
    config: KernelConfig
    arch: str  #: e.g. sm_100a
    dsl_version: str  #: the CuTe DSL that generated the code


def compile_key(arch: str, dsl_version: str, cfg: KernelConfig = CONFIG) -> CompileKey:
    return CompileKey(VARIANT, cfg, arch, dsl_version)


# ---------------------------------------------------------------------------------------------------------------
# Per-call launch arguments
# ---------------------------------------------------------------------------------------------------------------
#: (a, b, sfa_reordered, sfb_reordered, c) data pointers and (M, N, K) of one group.
GroupLaunch = tuple[int, int, int, int, int, int, int, int]


def group_launches(data, shapes: Sequence[GroupShape]) -> tuple[GroupLaunch, ...]:
    """What each per-group launch needs, as plain integers: the launch-argument cache key."""
    abc, _sfs, sfs_reordered, _sizes = data
    return tuple(
        (a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), c.data_ptr(), s.m, s.n, s.k)
        for s, (a, b, c), (sfa, sfb) in zip(shapes, abc, sfs_reordered)
    )


class ArgsCache:
    """Launch arguments built from a key (every pointer and size of a call), least recently used dropped
    beyond ``capacity``. A changed pointer or size is a different key, so stale arguments are never reused."""

    def __init__(self, build: Callable[[Hashable], object], capacity: int = 64):
        self.capacity = capacity
        self._build = build
        self._entries: OrderedDict[Hashable, object] = OrderedDict()
        self.builds = 0  #: how many times arguments were (re)built: a miss counter for tests and reports

    def get(self, key: Hashable):
        value = self._entries.get(key)
        if value is None:
            value = self._build(key)
            self.builds += 1
            self._entries[key] = value
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return value

    def __len__(self) -> int:
        return len(self._entries)
