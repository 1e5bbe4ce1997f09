"""Input generation: the official draw order (bit-identical on any CUDA GPU) and a full-range mode.

Official order (docs/problem.md, "The official generator"): ``torch.manual_seed(seed)``, then per
group A, B, C on the device generator, SFA, SFB on the CPU generator, then SFA/SFB reordered on the device
generator. Without a GPU the device draws come from the CPU generator (values then differ from a GPU run).
"""
from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, Sequence

import torch

from problems.nvfp4_group_gemm import input_t
from problems.nvfp4_group_gemm.formats import BLOCKED_PERMUTE, SF_VEC, blocked_index, blocked_shape
from problems.nvfp4_group_gemm.spec import DATA_MODES, K_MULTIPLE

DataMode = Literal["official", "full-range"]
#: The official generator keeps each nibble's sign bit and two low bits: codes 0..3 and 8..11
#: (0, +-0.5, +-1, +-1.5).
OFFICIAL_NIBBLE_MASK = 0b1011_1011
#: Full-range scale bound: 36 * (15/8)^2, the largest |e2m1 product| times the largest mantissa product.
_FULL_RANGE_PRODUCT = 36.0 * (15.0 / 8.0) ** 2
FP16_MAX = 65504.0
#: e4m3fn's normal exponents: 2^-6 (code 0x08) .. 2^8 (448 = 0x7E).
E4M3FN_MIN_EXP, E4M3FN_MAX_EXP = -6, 8
#: Full-range scales: one in FULL_RANGE_SCALE_CLASSES is zero (0x00, a block a quantiser found all zero), one is
#: subnormal (exponent field 0, mantissa 1..7: 2^-9 .. 7 * 2^-9, a block of tiny values), the rest normal.
FULL_RANGE_SCALE_CLASSES = 16
FULL_RANGE_ZERO_SHARE = 1 / FULL_RANGE_SCALE_CLASSES
FULL_RANGE_SUBNORMAL_SHARE = 1 / FULL_RANGE_SCALE_CLASSES


def default_device() -> torch.device:
    """Where the "cuda" tensors of input_t live: the current CUDA device, or the CPU when there is none."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _reordered(sf: torch.Tensor, rows: int, sf_cols: int, device: torch.device, gen_fill) -> torch.Tensor:
    """The blocked view of ``sf`` ([rows, sf_cols]); storage filled by ``gen_fill(shape)`` first (padding)."""
    storage = gen_fill(blocked_shape(rows, sf_cols))
    view = storage.permute(*BLOCKED_PERMUTE)
    flat = storage.view(-1)
    flat[blocked_index(rows, sf_cols, device).view(-1)] = sf.to(device).reshape(-1)
    return view


def _official_scales(rows: int, sf_cols: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(1, 3, (1, rows, sf_cols), dtype=torch.int8, generator=gen).to(
        torch.float8_e4m3fn).permute(1, 2, 0)


def full_range_scale_exponent(k: int) -> int:
    """Full-range data: S such that every product sfa * sfb of one 16-block is at most 2^S * (15/8)^2, with
    ``S = floor(log2(65504 / (36 * (15/8)^2 * K)))``. Then |C| <= K * 6 * 6 * max(sfa * sfb) <= 65504: no fp16
    overflow whatever the codes. (K=256: S=1; K=7168: S=-4.)"""
    return math.floor(math.log2(FP16_MAX / (_FULL_RANGE_PRODUCT * k)))


#: The smallest S full-range scales can reach: both sides' exponents t - 1 and S - t - 1 must stay normal.
_FULL_RANGE_MIN_S = 2 * (E4M3FN_MIN_EXP + 1)


def full_range_max_k() -> int:
    """The largest K (a multiple of spec.K_MULTIPLE) for which full-range scales can keep the fp16 output
    bounded: 529,920 (S = -10). Larger K would need scales below e4m3fn's normal range."""
    k = int(FP16_MAX / (_FULL_RANGE_PRODUCT * 2.0**_FULL_RANGE_MIN_S)) // K_MULTIPLE * K_MULTIPLE
    while full_range_scale_exponent(k) < _FULL_RANGE_MIN_S:  # float rounding at the boundary
        k -= K_MULTIPLE
    while full_range_scale_exponent(k + K_MULTIPLE) >= _FULL_RANGE_MIN_S:
        k += K_MULTIPLE
    return k


def check_full_range_k(k: int) -> None:
    """Raises ValueError, naming ``k`` and the limit, when full-range data cannot be drawn for this K."""
    if k > full_range_max_k():
        raise ValueError(f"full-range data cannot bound the fp16 output for K={k}: its scales keep |C| <= 65504 "
                         f"only up to K={full_range_max_k()}")


def _full_range_scales(rows_a: int, rows_b: int, sf_cols: int, k: int, device: torch.device,
                       gen: torch.Generator):
    """Scales over e4m3fn's whole range, anti-correlated per 16-block so no output can overflow.

    Normals: per scale-column j a shared exponent t_j is drawn; sfa exponents are t_j + {-1, 0}, sfb exponents
    S - t_j + {-1, 0}, mantissas uniform over 0..7. t_j is drawn from [max(-5, S - 8), min(8, S + 5)] so both
    stay within e4m3fn's normal exponents [-6, 8] (2^-6 .. 448). Then each scale independently becomes zero
    (share FULL_RANGE_ZERO_SHARE) or a subnormal m * 2^-9, m uniform over 1..7 (share
    FULL_RANGE_SUBNORMAL_SHARE). A subnormal is below 2^-6, the smallest normal either side can draw, and zero
    is below everything, so the bound sfa * sfb <= 2^S * (15/8)^2 still holds for every block.

    Returns (sfa, sfb): CPU float8_e4m3fn tensors [rows_a, sf_cols, 1] and [rows_b, sf_cols, 1]. Raises
    ValueError when K is too large to bound (``check_full_range_k``).
    """
    check_full_range_k(k)
    s = full_range_scale_exponent(k)
    lo, hi = max(E4M3FN_MIN_EXP + 1, s - E4M3FN_MAX_EXP), min(E4M3FN_MAX_EXP, s - E4M3FN_MIN_EXP - 1)
    t = torch.randint(lo, hi + 1, (sf_cols,), device=device, generator=gen)

    def draw(rows: int, centre: torch.Tensor) -> torch.Tensor:
        shape = (rows, sf_cols)
        exp = centre + torch.randint(-1, 1, shape, device=device, generator=gen)
        man = torch.randint(0, 8, shape, device=device, generator=gen)
        man = torch.where((exp == 8) & (man == 7), 6, man)  # exponent 8, mantissa 7 is e4m3fn's NaN: use 448
        bits = ((exp + 7) << 3) | man
        kind = torch.randint(0, FULL_RANGE_SCALE_CLASSES, shape, device=device, generator=gen)
        subnormal = torch.randint(1, 8, shape, device=device, generator=gen)  # exponent field 0
        bits = torch.where(kind == 1, subnormal, torch.where(kind == 0, 0, bits))
        return bits.to(torch.uint8).view(torch.float8_e4m3fn).cpu().unsqueeze(-1)

    return draw(rows_a, t), draw(rows_b, s - t)


def generate_input(m: Sequence[int], n: Sequence[int], k: Sequence[int], g: int, seed: int,
                   data: DataMode = "official", device: torch.device | str | None = None) -> input_t:
    """Build one nvfp4_group_gemm input (see the package's input_t for shapes, dtypes and devices).

    ``data="official"`` reproduces the official generator draw for draw (bit-identical on CUDA for the same
    seed); ``data="full-range"`` draws all 16 e2m1 codes and scales over e4m3fn's range, zeros and subnormals
    included (shares and bounds in ``_full_range_scales``), same layouts. Raises ValueError for an unknown data
    mode, inconsistent sizes, or a K too large for full-range data (``check_full_range_k``).
    """
    if data not in DATA_MODES:
        raise ValueError(f"data mode must be one of {DATA_MODES}, got {data!r}")
    if not (len(m) == len(n) == len(k) == g):
        raise ValueError(f"expected g={g} entries in m, n, k; got {len(m)}, {len(n)}, {len(k)}")
    dev = torch.device(device) if device is not None else default_device()
    # torch.manual_seed(seed) as the official generator does, but on private generators (same streams) so that
    # several inputs can be drawn at once and the caller's global RNG state is left alone.
    gen_cpu = torch.Generator().manual_seed(seed)
    gen = torch.Generator(device=dev).manual_seed(seed) if dev.type == "cuda" else gen_cpu
    abc, sfs, sfs_reordered, sizes = [], [], [], []
    for mi, ni, ki in zip(m, n, k):
        sf_cols = ki // SF_VEC
        if data == "official":
            a = torch.randint(255, (1, mi, ki // 2), dtype=torch.uint8, device=dev, generator=gen) & OFFICIAL_NIBBLE_MASK
            b = torch.randint(255, (1, ni, ki // 2), dtype=torch.uint8, device=dev, generator=gen) & OFFICIAL_NIBBLE_MASK
        else:
            a = torch.randint(256, (1, mi, ki // 2), dtype=torch.uint8, device=dev, generator=gen)
            b = torch.randint(256, (1, ni, ki // 2), dtype=torch.uint8, device=dev, generator=gen)
        a = a.permute(1, 2, 0).view(torch.float4_e2m1fn_x2)
        b = b.permute(1, 2, 0).view(torch.float4_e2m1fn_x2)
        c = torch.randn((1, mi, ni), dtype=torch.float16, device=dev, generator=gen).permute(1, 2, 0)
        if data == "official":
            sfa, sfb = _official_scales(mi, sf_cols, gen_cpu), _official_scales(ni, sf_cols, gen_cpu)
        else:
            sfa, sfb = _full_range_scales(mi, ni, sf_cols, ki, dev, gen)

        def pad_fill(shape):
            return torch.randint(1, 3, shape, dtype=torch.int8, device=dev, generator=gen).to(torch.float8_e4m3fn)

        sfa_r = _reordered(sfa[:, :, 0], mi, sf_cols, dev, pad_fill)
        sfb_r = _reordered(sfb[:, :, 0], ni, sf_cols, dev, pad_fill)
        abc.append((a, b, c))
        sfs.append((sfa, sfb))
        sfs_reordered.append((sfa_r, sfb_r))
        sizes.append((mi, ni, ki, 1))
    return abc, sfs, sfs_reordered, sizes


_POOL: ThreadPoolExecutor | None = None
_POOL_THREADS: set[int] = set()


def _register_pool_thread() -> None:
    _POOL_THREADS.add(threading.get_ident())


def generation_threads() -> frozenset[int]:
    """Idents of the threads ``generate_many`` draws on (so a caller can tell them from anybody else's)."""
    return frozenset(_POOL_THREADS)


def generate_many(m: Sequence[int], n: Sequence[int], k: Sequence[int], g: int, seeds: Sequence[int],
                  data: DataMode = "official", device: torch.device | str | None = None) -> list[input_t]:
    """``generate_input`` for each seed, drawn concurrently (each input has its own generators, and torch
    releases the GIL inside its ops); the result is the same as drawing them one after another."""
    global _POOL
    if len(seeds) == 1:
        return [generate_input(m, n, k, g, seeds[0], data, device)]
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="fp4bench-gen",
                                   initializer=_register_pool_thread)
    dev = torch.device(device) if device is not None else default_device()
    return list(_POOL.map(lambda s: generate_input(m, n, k, g, s, data, dev), seeds))
