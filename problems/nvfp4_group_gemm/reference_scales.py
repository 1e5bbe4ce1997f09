"""Where the reference reads each operand's scale bytes: the plain tensors (sfasfb_tensors) or the blocked copies
(sfasfb_reordered_tensors) unblocked, in place or staged onto the device in one copy."""
from __future__ import annotations

from typing import Literal, Sequence

import torch

from problems.nvfp4_group_gemm import input_t
from problems.nvfp4_group_gemm.formats import SF_VEC

Scales = Literal["plain", "reordered"]


def _unblocked(reordered: torch.Tensor, rows: int, blocks: int) -> torch.Tensor:
    """The [rows, blocks] scales held in a blocked view [32, 4, rest_mn, 4, rest_k, 1] (formats.BLOCKED_PERMUTE
    of the storage), as a slice of one copy: the view's dims (r%32, (r%128)//32, r//128, j%4, j//4) permuted to
    (r//128, (r%128)//32, r%32, j//4, j%4), so that row-major order is (r, j)."""
    _, _, rest_mn, _, rest_k, _ = reordered.shape
    full = reordered[..., 0].permute(2, 1, 0, 4, 3).reshape(rest_mn * 128, rest_k * 4)
    return full[:rows, :blocks]


def _scale_sources(data: input_t, scales: Scales) -> list[torch.Tensor]:
    """Every operand's scale bytes (A0, B0, A1, B1, ...) as uint8 [R, K/16] views where they lie (``scales``: the
    plain tensors, or a slice of one unblocked copy of each reordered tensor)."""
    abc, sfs, sfs_reordered, _ = data
    if scales == "plain":
        return [sf[:, :, 0].view(torch.uint8) for pair in sfs for sf in pair]
    shapes = [(p.shape[0], p.shape[1] * 2 // SF_VEC) for a, b, _ in abc for p in (a, b)]
    return [_unblocked(r.view(torch.uint8), *shape)
            for r, shape in zip((r for pair in sfs_reordered for r in pair), shapes)]


def _staged(sources: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """``sources`` (uint8 [R, K/16] each, any device) copied into one flat uint8 tensor on ``device``."""
    flat = torch.empty(sum(s.numel() for s in sources), dtype=torch.uint8, device=device)
    for slot, source in zip(flat.split([s.numel() for s in sources]), sources):
        # non_blocking: a pageable source is staged before the call returns, without a stream sync
        slot.view(source.shape).copy_(source, non_blocking=True)
    return flat


def _load_codes(data: input_t, scales: Scales, device: torch.device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Every operand's scale bytes (A0, B0, A1, B1, ...) in one flat int32 tensor on ``device``, and per operand
    an int32 [R, K/16] view of it."""
    sources = _scale_sources(data, scales)
    codes = _staged(sources, device).to(torch.int32)
    return codes, [c.view(s.shape) for c, s in zip(codes.split([s.numel() for s in sources]), sources)]


def _scale_bytes_on(data: input_t, scales: Scales, device: torch.device) -> list[torch.Tensor]:
    """Every operand's scale bytes as uint8 [R, K/16] on ``device`` with unit column stride: in place where the
    source already is, else slices of one staged copy."""
    sources = _scale_sources(data, scales)
    in_place = [s.device == device and s.stride(1) == 1 for s in sources]
    moved = [s for s, ok in zip(sources, in_place) if not ok]
    staged = iter(_staged(moved, device).split([s.numel() for s in moved]) if moved else [])
    return [s if ok else next(staged).view(s.shape) for s, ok in zip(sources, in_place)]
