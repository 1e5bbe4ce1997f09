"""Building blocks of the NVFP4 problems' input draws: the device and generators, the official scale tensors
(plain and blocked, in the official order), and full-range scales.

Official draws (reference-kernels ``problems/nvidia/<problem>/reference.py``): ``torch.manual_seed(seed)``, then
every tensor on the CUDA generator in the order each problem's ``generate_input`` draws it. Here each input gets
private generators seeded the same way (the same streams, the caller's global RNG state left alone); without a
GPU the device draws come from the CPU generator (values then differ from a GPU run, layouts do not).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from problems._nvfp4.formats import ATOM_BYTES, BLOCKED_PERMUTE, blocked_index, blocked_rest

#: Full-range data: every partial sum of one output stays below ``bound`` (problems.nvfp4_group_gemm.inputs' argument):
#: per 16-block the scales' product is at most 2^S * (15/8)^2, and |e2m1| <= 6, so with
#: S = floor(log2(bound / (36 * (15/8)^2 * K))), |sum| <= K * 36 * 2^S * (15/8)^2 <= bound.
_FULL_RANGE_PRODUCT = 36.0 * (15.0 / 8.0) ** 2
FP16_MAX = 65504.0
#: Scale exponents full-range data draws: 2^-9 .. 2^8. Below e4m3fn's normals (2^-6) the scale is the subnormal
#: power of two 2^e (codes 1, 2, 4), so every drawn scale is at most 2^e * 15/8.
E_MIN, E_MAX = -9, 8
E_NORMAL_MIN = -6
#: One scale in this many becomes zero, one a random subnormal m * 2^-9 (m in 1..7; only where the drawn exponent
#: is normal, so the bound holds), as in problems.nvfp4_group_gemm.inputs.
SCALE_CLASSES = 16
#: The smallest S: both sides' exponents t - 1 and S - t - 1 must stay >= E_MIN.
_MIN_S = 2 * (E_MIN + 1)


def device_and_generators(seed: int, device=None) -> tuple[torch.device, torch.Generator]:
    """(device, generator of that device seeded ``seed``). ``device`` None: the current CUDA device, or the CPU
    when there is none."""
    if device is None:
        dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    else:
        dev = torch.device(device)
    gen = torch.Generator(device=dev) if dev.type == "cuda" else torch.Generator()
    return dev, gen.manual_seed(seed)


def blocked_storage_shape(l: int, rows: int, sf_k: int) -> tuple[int, ...]:
    """Storage of the blocked layout for ``l`` batches: (l, rest_mn, rest_k, 32, 4, 4)."""
    return (l, *blocked_rest(rows, sf_k), 32, 4, 4)


def scatter_blocked(storage: torch.Tensor, plain: torch.Tensor) -> torch.Tensor:
    """Write plain scales (l, rows, sf_k) into blocked ``storage`` (``blocked_storage_shape``, contiguous, same
    dtype) at their blocked offsets (padding untouched); returns the exposed view [32, 4, rest_mn, 4, rest_k, l]."""
    l, rows, sf_k = plain.shape
    per_batch = math.prod(blocked_rest(rows, sf_k)) * ATOM_BYTES
    index = blocked_index(rows, sf_k, storage.device).unsqueeze(0) + \
        per_batch * torch.arange(l, device=storage.device).view(l, 1, 1)
    storage.view(-1)[index.view(-1)] = plain.to(storage.device).reshape(-1)
    return storage.permute(*BLOCKED_PERMUTE)


def official_scales(l: int, rows: int, sf_k: int, draw: Callable[[tuple[int, ...]], torch.Tensor],
                    pad: Callable[[tuple[int, ...]], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The official ``create_scale_factor_tensors`` order: the plain scales ``draw((l, rows, sf_k))`` first, then
    the blocked storage ``pad(storage shape)`` (its padding stays), then the scatter.

    Returns (plain [rows, sf_k, l] float8_e4m3fn, a permuted view of (l, rows, sf_k) storage; blocked view
    [32, 4, rest_mn, 4, rest_k, l]), both on the draws' device.
    """
    plain = draw((l, rows, sf_k))
    blocked = scatter_blocked(pad(blocked_storage_shape(l, rows, sf_k)), plain)
    return plain.permute(1, 2, 0), blocked


def full_range_exponent(k: int, bound: float = FP16_MAX) -> int:
    """S for full-range scales bounding every partial sum of a K-long dot product by ``bound``."""
    return math.floor(math.log2(bound / (_FULL_RANGE_PRODUCT * k)))


def full_range_max_k(bound: float = FP16_MAX, multiple: int = 64) -> int:
    """The largest K (a multiple of ``multiple``) whose full-range scales can keep partial sums below ``bound``
    (S >= -16): 33,935,360 for fp16's 65504, 132,096 for 255 (dual_gemm's per-product bound)."""
    k = int(bound / (_FULL_RANGE_PRODUCT * 2.0**_MIN_S)) // multiple * multiple
    while k > 0 and full_range_exponent(k, bound) < _MIN_S:
        k -= multiple
    while full_range_exponent(k + multiple, bound) >= _MIN_S:
        k += multiple
    return k


def full_range_scales(l: int, sf_k: int, k: int, rows_a: int, rows_b: Sequence[int], gen: torch.Generator,
                      device: torch.device, bound: float = FP16_MAX) -> list[torch.Tensor]:
    """Scales over e4m3fn's range for one A and the B operands it multiplies, anti-correlated per 16-block so
    that every partial sum of A's rows with any B row stays within ``bound``.

    Per (batch, scale column) an exponent t is drawn from [max(E_MIN+1, S-E_MAX), min(E_MAX, S-E_MIN-1)]; A's
    exponents are t + {-1, 0}, each B's S - t + {-1, 0}; a normal exponent gets a uniform mantissa (0..7; 448's
    neighbour NaN avoided), a lower one is the subnormal 2^e. Then each scale independently becomes zero (one in
    SCALE_CLASSES) or, where its exponent is normal, a subnormal m * 2^-9 (one in SCALE_CLASSES).

    Returns float8_e4m3fn tensors (l, rows, sf_k) on ``device``: A's, then one per ``rows_b``. Raises ValueError
    naming K and the limit when K is too large for ``bound`` (``full_range_max_k``).
    """
    s = full_range_exponent(k, bound)
    if s < _MIN_S:
        raise ValueError(f"full-range data cannot bound the output for K={k}: its scales keep every sum below "
                         f"{bound:g} only up to K={full_range_max_k(bound)}")
    lo, hi = max(E_MIN + 1, s - E_MAX), min(E_MAX, s - E_MIN - 1)
    t = torch.randint(lo, hi + 1, (l, 1, sf_k), device=device, generator=gen)

    def side(rows: int, centre: torch.Tensor) -> torch.Tensor:
        shape = (l, rows, sf_k)
        exp = centre + torch.randint(-1, 1, shape, device=device, generator=gen)
        man = torch.randint(0, 8, shape, device=device, generator=gen)
        man = torch.where((exp == E_MAX) & (man == 7), 6, man)  # exponent 8, mantissa 7 is e4m3fn's NaN
        normal = exp >= E_NORMAL_MIN
        bits = torch.where(normal, ((exp + 7) << 3) | man, 1 << (exp - E_MIN).clamp(min=0))
        kind = torch.randint(0, SCALE_CLASSES, shape, device=device, generator=gen)
        subnormal = torch.randint(1, 8, shape, device=device, generator=gen)
        bits = torch.where((kind == 1) & normal, subnormal, torch.where(kind == 0, 0, bits))
        return bits.to(torch.uint8).view(torch.float8_e4m3fn)

    return [side(rows_a, t)] + [side(rows, s - t) for rows in rows_b]


def with_blocked(plain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain scales (l, rows, sf_k) -> (the [rows, sf_k, l] view, their blocked view with zero padding)."""
    l, rows, sf_k = plain.shape
    storage = torch.zeros(blocked_storage_shape(l, rows, sf_k), dtype=plain.dtype, device=plain.device)
    return plain.permute(1, 2, 0), scatter_blocked(storage, plain)
