"""Host-side logic of the cute_grouped variant: tile bookkeeping, limits, caches. No cutlass, no GPU.

Everything here mirrors a decision the kernel in ``submission.py`` makes on the device, so it can be tested on a
CPU: the per-group tile counts and their prefix sums (grid = total tiles, one CTA per 128x128 output tile), the
group lookup a CTA does from its block index, the tile coordinates it derives, the scale-factor offsets its
layout produces in the blocked 32x4x4 layout (task.formats), the problem limits it relies on, the compile-cache
key (everything baked into the compiled artefact) and the launch-plan cache (device tables per problem-size
tuple; pointer table and TMA descriptors refreshed when any pointer changes).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from task.formats import SF_VEC, blocked_offset, blocked_view_shape, blocked_view_strides

VARIANT = "cute_grouped"


class UnsupportedProblem(ValueError):
    """The problem is outside what this variant computes correctly; the message names the limit."""


@dataclass(frozen=True)
class KernelConfig:
    """Every compile-time constant of the kernel (the group count aside): part of the compile-cache key."""

    tile_m: int = 128  #: output tile rows (= MMA M, one CTA, cta_group::1)
    tile_n: int = 128  #: output tile columns (= MMA N)
    tile_k: int = 256  #: K per pipeline stage (4 MMA instructions of K=64)
    mma_inst_k: int = 64  #: K of one tcgen05.mma kind::mxf4nvf4 instruction
    ab_stages: int = 2  #: shared-memory stages of A/B/SFA/SFB
    acc_stages: int = 1  #: accumulator stages in tensor memory (one tile per CTA)
    sf_vec: int = 16  #: elements per e4m3fn scale factor (block16)
    epilogue_warps: int = 4  #: warps 0..3 read TMEM and store C
    mma_warp: int = 4  #: issues the S2T scale copies and the MMAs
    tma_warp: int = 5  #: issues the TMA loads
    tensormap_bytes: int = 128  #: size of one TMA descriptor
    tensormaps_per_cta: int = 4  #: A, B, SFA, SFB
    #: G up to which the CTA finds its group with an unrolled compare chain; above it, a binary search.
    unrolled_lookup_max_groups: int = 8

    @property
    def threads(self) -> int:
        return 32 * (self.epilogue_warps + 2)

    @property
    def tensormap_words(self) -> int:
        """int64 words of descriptor workspace per CTA."""
        return self.tensormaps_per_cta * self.tensormap_bytes // 8


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
#: In-kernel index arithmetic (M*K, N*K, M*N element counts, prefix sums) is 32-bit signed.
INT32_MAX = 2**31 - 1
#: The grid is (total tiles, 1, 1); gridDim.x is limited to 2^31 - 1.
MAX_CTAS = 2**31 - 1


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


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


# ---------------------------------------------------------------------------------------------------------------
# Grid bookkeeping: tile counts, prefix sums, the group lookup the kernel does, tile coordinates
# ---------------------------------------------------------------------------------------------------------------
def tile_counts(shapes: Sequence[GroupShape], cfg: KernelConfig = CONFIG) -> list[int]:
    """Output tiles (= CTAs) per group."""
    return [s.tiles(cfg) for s in shapes]


def cta_prefix(counts: Sequence[int]) -> list[int]:
    """G+1 prefix sums: group g owns CTAs [prefix[g], prefix[g+1])."""
    out = [0]
    for c in counts:
        out.append(out[-1] + c)
    return out


def group_of_cta_unrolled(prefix: Sequence[int], cta: int) -> int:
    """The kernel's lookup for small G: count the group starts prefix[1..G-1] at or below ``cta``."""
    group = 0
    for start in prefix[1:-1]:
        if cta >= start:
            group += 1
    return group


def group_of_cta_bisect(prefix: Sequence[int], cta: int) -> int:
    """The kernel's lookup for large G: the first g with prefix[g+1] > cta, by binary search over [0, G)."""
    lo, hi = 0, len(prefix) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if prefix[mid + 1] <= cta:
            lo = mid + 1
        else:
            hi = mid
    return lo


def group_of_cta(prefix: Sequence[int], cta: int, cfg: KernelConfig = CONFIG) -> int:
    """The group of CTA ``cta``, chosen exactly as the compiled kernel chooses (its strategy depends on G)."""
    if not 0 <= cta < prefix[-1]:
        raise IndexError(f"CTA {cta} outside the grid of {prefix[-1]} CTAs")
    if len(prefix) - 1 <= cfg.unrolled_lookup_max_groups:
        return group_of_cta_unrolled(prefix, cta)
    return group_of_cta_bisect(prefix, cta)


def cta_tile(prefix: Sequence[int], shapes: Sequence[GroupShape], cta: int,
             cfg: KernelConfig = CONFIG) -> tuple[int, int, int]:
    """(group, m tile, n tile) of CTA ``cta``; tiles run M-fastest inside a group, as in the kernel."""
    g = group_of_cta(prefix, cta, cfg)
    rest = cta - prefix[g]
    tiles_m = shapes[g].tiles_m(cfg)
    return g, rest % tiles_m, rest // tiles_m


# ---------------------------------------------------------------------------------------------------------------
# The blocked 32x4x4 scale layout as the kernel addresses it
# ---------------------------------------------------------------------------------------------------------------
def sf_tile_offset(tile_mn: int, k_tile: int, rest_k: int, cfg: KernelConfig = CONFIG) -> int:
    """Byte offset of the first scale of output-tile row block ``tile_mn`` and K tile ``k_tile``."""
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
        shapes.append(GroupShape(m, n, k))
    total = sum(tile_counts(shapes, cfg))
    if total > MAX_CTAS:
        raise UnsupportedProblem(f"{variant}: {total} output tiles exceed the grid limit of {MAX_CTAS} CTAs")
    return tuple(shapes)


def _check_tensor(t, where: str, dtype: torch.dtype, shape: tuple, strides: tuple | None) -> None:
    if t.dtype != dtype:
        raise UnsupportedProblem(f"{where}: expected dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise UnsupportedProblem(f"{where}: expected shape {shape}, got {tuple(t.shape)}")
    if strides is not None:
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
    """Everything baked into one compiled artefact. The seed keyed on the group count alone."""

    variant: str
    config: KernelConfig
    num_groups: int  #: compile-time constant: sizes the pointer/size tables and picks the group lookup
    arch: str  #: e.g. sm_100a
    dsl_version: str  #: the CuTe DSL that generated the code


def compile_key(num_groups: int, arch: str, dsl_version: str, cfg: KernelConfig = CONFIG) -> CompileKey:
    """The key for a kernel with ``num_groups`` groups. M, N, K and the pointers are runtime data (read from
    device tables), so they are deliberately not part of it."""
    return CompileKey(VARIANT, cfg, int(num_groups), arch, dsl_version)


# ---------------------------------------------------------------------------------------------------------------
# Launch plans: device tables per problem-size tuple, pointer table and descriptors refreshed on pointer change
# ---------------------------------------------------------------------------------------------------------------
PointerRows = tuple[tuple[int, ...], ...]


def input_pointers(data) -> tuple[PointerRows, PointerRows]:
    """((a, b, c) per group, (sfa_reordered, sfb_reordered) per group) data pointers."""
    abc, _sfs, sfs_reordered, _sizes = data
    return (tuple((a.data_ptr(), b.data_ptr(), c.data_ptr()) for a, b, c in abc),
            tuple((sfa.data_ptr(), sfb.data_ptr()) for sfa, sfb in sfs_reordered))


def upload_rows(dst: torch.Tensor, rows) -> None:
    """Copy host ``rows`` into device table ``dst`` without racing the previous launch.

    The seed rewrote one pinned host buffer in place and copied it with non_blocking=True: when pointers change
    on consecutive calls, the CPU can overwrite that buffer before the previous asynchronous copy has read it.
    Here every upload uses a fresh pinned buffer; PyTorch's caching host allocator records the copy where it was
    queued and does not hand the block out again before the copy is done.
    """
    host = torch.tensor(rows, dtype=dst.dtype)
    if dst.device.type == "cuda":
        dst.copy_(host.pin_memory(), non_blocking=True)
    else:
        dst.copy_(host)


@dataclass
class LaunchPlan:
    """Device-side tables for one problem-size tuple and the pointer state of its descriptor workspace."""

    shapes: tuple[GroupShape, ...]
    prefix: tuple[int, ...]
    sizes_t: torch.Tensor  #: int32 [G, 4] (M, N, K, L)
    prefix_t: torch.Tensor  #: int32 [G + 1]
    tensormaps_t: torch.Tensor  #: int64 [total CTAs, 4, 16]: one descriptor per operand per CTA
    abc_ptrs_t: torch.Tensor  #: int64 [G, 3]
    sf_ptrs_t: torch.Tensor  #: int64 [G, 2]
    pointers: tuple | None = None  #: pointers the device tables hold (None: never uploaded)
    descriptors_valid: bool = False  #: the workspace holds descriptors for ``pointers`` (a launch completed)
    extras: dict = field(default_factory=dict)  #: launcher-owned objects (e.g. cute pointers to the tables)

    @property
    def num_groups(self) -> int:
        return len(self.shapes)

    @property
    def total_ctas(self) -> int:
        return self.prefix[-1]

    def begin_launch(self, pointers: tuple[PointerRows, PointerRows]) -> bool:
        """Bring the pointer table up to date; True when the kernel must rebuild its TMA descriptors."""
        if pointers != self.pointers:
            upload_rows(self.abc_ptrs_t, pointers[0])
            upload_rows(self.sf_ptrs_t, pointers[1])
            self.pointers = pointers
            self.descriptors_valid = False
        return not self.descriptors_valid

    def end_launch(self) -> None:
        """The launch was issued: the workspace now holds descriptors for ``pointers``."""
        self.descriptors_valid = True


def build_plan(shapes: Sequence[GroupShape], device: torch.device | str, cfg: KernelConfig = CONFIG) -> LaunchPlan:
    shapes = tuple(shapes)
    prefix = tuple(cta_prefix(tile_counts(shapes, cfg)))
    g = len(shapes)
    return LaunchPlan(
        shapes=shapes,
        prefix=prefix,
        sizes_t=torch.tensor([(s.m, s.n, s.k, 1) for s in shapes], dtype=torch.int32, device=device),
        prefix_t=torch.tensor(prefix, dtype=torch.int32, device=device),
        tensormaps_t=torch.zeros((prefix[-1], cfg.tensormaps_per_cta, cfg.tensormap_bytes // 8),
                                 dtype=torch.int64, device=device),
        abc_ptrs_t=torch.zeros((g, 3), dtype=torch.int64, device=device),
        sf_ptrs_t=torch.zeros((g, 2), dtype=torch.int64, device=device),
    )


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
            plan = self._builder(shapes, device)
            self._plans[key] = plan
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def __len__(self) -> int:
        return len(self._plans)
