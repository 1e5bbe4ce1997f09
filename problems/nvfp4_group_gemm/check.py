"""Output checks: what came back (container, type, dtype, shape, device) and whether the values match.

Tolerance is the official one (task.yml): |got - expected| <= atol + rtol * |expected| with rtol = atol = 1e-3;
NaN or +-inf where the other has none is a mismatch. A check returns evidence, not a bool.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.problem import OutputMeta, ReferenceError  # the contract's: the judge catches it from every plug

RTOL = 1e-3
ATOL = 1e-3
#: How many mismatching elements a report lists.
SHOW_MISMATCHES = 5


def describe(obj) -> OutputMeta:
    """OutputMeta of any object returned by a submission."""
    t = type(obj)
    name = f"{t.__module__}.{t.__qualname__}"
    if isinstance(obj, torch.Tensor):
        return OutputMeta(name, t is torch.Tensor, str(obj.dtype), tuple(obj.shape), str(obj.device))
    return OutputMeta(name, False)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def validate_container(container: str, metas: list[OutputMeta], sizes: list[tuple[int, int, int, int]],
                       device: str) -> str | None:
    """None if the outputs are a list of G plain fp16 tensors [M, N, 1] on ``device``; else what is wrong.

    ``container`` is the returned object's type name (``builtins.list`` expected; output_t is a list).
    """
    if container != "builtins.list":
        return f"expected a list of {_count(len(sizes), 'tensor')} (output_t), got {container}"
    if len(metas) != len(sizes):
        return f"expected {_count(len(sizes), 'output')} (one per group), got {len(metas)}"
    for g, (meta, (m, n, _k, _l)) in enumerate(zip(metas, sizes)):
        if not meta.plain_tensor:
            kind = "a tensor subclass" if meta.tensor_subclass or meta.dtype else "not a tensor"
            return f"output {g}: expected torch.Tensor, got {meta.type_name} ({kind})"
        problems = []
        if meta.dtype != "torch.float16":
            problems.append(f"dtype {meta.dtype} (expected torch.float16)")
        if meta.shape != (m, n, 1):
            problems.append(f"shape {list(meta.shape)} (expected [{m}, {n}, 1])")
        if torch.device(meta.device) != torch.device(device):
            problems.append(f"device {meta.device} (expected {device})")
        if problems:
            return f"output {g}: " + ", ".join(problems)
    return None


@dataclass(frozen=True)
class Evidence:
    """Result of comparing one output with its reference: ``mismatches`` of ``total`` elements;
    ``first`` lists (index, got, expected) for the first few."""

    mismatches: int
    total: int
    first: tuple[tuple[tuple[int, ...], float, float], ...] = ()

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def describe(self, label: str = "") -> str:
        if self.ok:
            return f"{label}all {self.total} elements match"
        shown = "; ".join(f"[{', '.join(map(str, i))}] got {g!r} expected {e!r}" for i, g, e in self.first)
        return (f"{label}{self.mismatches} of {self.total} elements differ (rtol={RTOL}, atol={ATOL}); "
                f"first: {shown}")


#: fp16's exponent field: all ones exactly for inf and NaN (IEEE 754 binary16).
FP16_EXPONENT_MASK = 0x7C00


def all_finite_fp16(values: torch.Tensor) -> bool:
    """True when no element of the fp16 tensor ``values`` (any shape, any device) is inf or NaN: the largest
    exponent field, read as int16 bits, is below all ones (one integer pass and one reduction, where
    ``torch.isfinite`` on fp16 costs about 10x more on a CPU). Raises ValueError for another dtype."""
    if values.dtype != torch.float16:
        raise ValueError(f"expected a torch.float16 tensor, got {values.dtype}")
    if values.numel() == 0:
        return True
    return int((values.reshape(-1).view(torch.int16) & FP16_EXPONENT_MASK).max()) < FP16_EXPONENT_MASK


def compare(got: torch.Tensor, expected: torch.Tensor, rtol: float = RTOL, atol: float = ATOL) -> Evidence:
    """Compare two same-shape tensors elementwise with the official tolerance.

    Raises ReferenceError if ``expected`` holds NaN or inf, ValueError if the shapes differ.
    """
    if got.shape != expected.shape:
        raise ValueError(f"shape {list(got.shape)} vs expected {list(expected.shape)}")
    exp = expected.to(torch.float64)
    if not torch.isfinite(exp).all():
        raise ReferenceError("the reference output holds NaN or inf")
    g = got.to(device=exp.device, dtype=torch.float64)
    bad = ~((g - exp).abs() <= atol + rtol * exp.abs())  # NaN compares False: a NaN in got is a mismatch
    count = int(bad.sum())
    first = ()
    if count:
        idx = bad.nonzero()[:SHOW_MISMATCHES].tolist()
        first = tuple((tuple(i), float(g[tuple(i)]), float(exp[tuple(i)])) for i in idx)
    return Evidence(count, exp.numel(), first)


def check_outputs(got: list[torch.Tensor], expected: list[torch.Tensor]) -> str | None:
    """None if every group matches; else the evidence of the first group that does not."""
    for g, (o, e) in enumerate(zip(got, expected)):
        ev = compare(o, e)
        if not ev.ok:
            return ev.describe(f"output {g}: ")
    return None
