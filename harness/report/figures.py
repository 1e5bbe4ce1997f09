"""Derived figures per case and per run (TFLOP/s, speed of light, intervals, status) and how numbers are shown.

Units: times are stored in ns and shown in us; throughput in TFLOP/s (10^12 FLOP/s); "% SOL" is the
speed-of-light time over the measured mean time (100 % = at the roofline), for the GPU model the run used
(harness.hardware.peaks_for), and only for runs timed with CUDA events. FLOPs, bytes and labels are the run's
problem's (its plug: ``plug_of``). The task's own B200 SOL (1.5 GHz FP4, 7.68 TB/s)
is always shown beside it. Shapes are numbered from 1 wherever people read them (``shape_number``); the machine
formats keep 0-based positions (CSV ``case_index``, JSON ``index``, the official POPCORN keys).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

from harness.results.ranking import Comparison, Interval, geomean_ci, mean_ci
from harness.results.record import CaseResult, Environment, RunRecord, Status
from harness import plugs
from harness.hardware import GPU_PEAKS, GpuPeaks, peaks_for, sol_ns_of, tflops_of
from harness.shapes import DEFAULT_PROBLEM

#: The task's own reference GPU: its SOL column appears in every report.
TASK_GPU = "B200"


def task_peaks(plug=None) -> GpuPeaks:
    """The task's reference GPU peaks (B200 at 1.5 GHz) from harness.hardware.GPU_PEAKS, with ``plug``'s
    ``task_fp4_tflops`` where its task.yml's table assumes another FP4 peak."""
    b200 = next(p for p in GPU_PEAKS if p.model == TASK_GPU)
    tflops = (plug or plugs.get(DEFAULT_PROBLEM)).task_fp4_tflops
    return b200 if tflops is None else dataclasses.replace(b200, exact_tflops=tflops, floor_tflops=tflops)


# ------------------------------------------------------------------------------------------ per-case figures
def shape_number(index: int) -> str:
    """How the shape at 0-based position ``index`` of a set is numbered wherever people read it: from 1."""
    return str(index + 1)


def plug_of(run: RunRecord):
    """The plug of the problem ``run`` ran (plugs.get)."""
    return plugs.get(run.problem)


def shape_label(case, plug=None) -> str:
    """The case's name, or its plug's label when it has none (``plug`` None: nvfp4_group_gemm's,
    ``G=2 M=[..] N=[..] K=[..]``)."""
    if case.name:
        return case.name
    return (plug or plugs.get(DEFAULT_PROBLEM)).label(case)


def sol_ns(case, peaks: GpuPeaks, plug=None, floor: bool = False) -> float:
    """Speed-of-light ns of ``case`` on ``peaks`` from its plug's FLOPs and bytes (``plug`` None:
    nvfp4_group_gemm's)."""
    plug = plug or plugs.get(DEFAULT_PROBLEM)
    return sol_ns_of(plug.flops(case), plug.bytes_moved(case), peaks, floor)


def run_peaks(run: RunRecord) -> GpuPeaks | None:
    """Peaks of the GPU model the run was timed on; None for CPU-timed runs or unknown models."""
    if run.environment.timer == "cpu-monotonic":
        return None
    return peaks_for(run.environment.device)


@dataclass(frozen=True)
class CaseFigures:
    """Derived numbers for one case of one run. Times in ns; ``tflops`` TFLOP/s; ``pct_sol_here`` percent of
    the run's GPU model's speed of light (None when unknown or not measured); ``ci`` the 95 % interval of the
    mean (ns)."""

    index: int
    result: CaseResult
    label: str
    ci: Interval | None
    tflops: float | None
    sol_here_ns: float | None
    pct_sol_here: float | None
    sol_task_ns: float
    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        """FLOP per byte moved once."""
        return self.flops / self.bytes


def case_figures(run: RunRecord) -> list[CaseFigures]:
    """Per-case derived figures (TFLOP/s, SOL, interval) for every case of ``run``, in order."""
    peaks, plug = run_peaks(run), plug_of(run)
    out = []
    for i, r in enumerate(run.cases):
        s = r.stats
        timed = s is not None and s.mean_ns > 0
        sol_here = sol_ns(r.case, peaks, plug) if peaks else None
        out.append(CaseFigures(
            i, r, shape_label(r.case, plug),
            mean_ci(s) if timed else None,
            tflops_of(plug.flops(r.case), s.mean_ns) if timed else None,
            sol_here,
            100.0 * sol_here / s.mean_ns if timed and sol_here else None,
            sol_ns(r.case, task_peaks(plug), plug),
            plug.flops(r.case), plug.bytes_moved(r.case)))
    return out


def run_geomean_ci(run: RunRecord) -> Interval | None:
    """95 % interval (ns) on the run's geomean of per-case means, when the run is complete and every case passed
    with timings; else None (a geomean over part of a shape set is not comparable)."""
    if not run.complete or not run.cases or not all(c.passed and c.stats and c.stats.mean_ns > 0
                                                        for c in run.cases):
        return None
    return geomean_ci([c.stats for c in run.cases])


def run_status(run: RunRecord) -> str:
    """``passed``, ``skipped`` (every case, e.g. a GPU the variant cannot use), ``passed (s of n skipped)``,
    ``incomplete (n cases recorded[, k not passed])`` or ``failed (k of n cases[, s skipped])``."""
    n = len(run.cases)
    skipped = sum(1 for c in run.cases if c.status is Status.SKIPPED)
    failed = sum(1 for c in run.cases if not c.passed) - skipped
    if not run.complete:
        return (f"incomplete ({n} case{'s' if n != 1 else ''} recorded"
                + (f", {failed + skipped} not passed)" if failed + skipped else ")"))
    if failed:
        return f"failed ({failed} of {n} cases" + (f", {skipped} skipped)" if skipped else ")")
    if skipped == n and n:
        return "skipped"
    return f"passed ({skipped} of {n} skipped)" if skipped else "passed"


def run_labels(runs: Sequence[RunRecord]) -> list[str]:
    """A short label per run: the variant name; ``<problem>/<name>`` when variants of two problems share the name
    (as ``fp4bench list`` names them); with the run id when the same one appears twice."""
    names = [r.submission.name for r in runs]
    labels = [n if names.count(n) == 1 or len({x.problem for x in runs if x.submission.name == n}) == 1
              else f"{r.problem}/{n}" for n, r in zip(names, runs)]
    return [label if labels.count(label) == 1 else f"{label} ({r.run_id})" for label, r in zip(labels, runs)]


# ------------------------------------------------------------------------------------------------ numbers
def short_commit(commit: str) -> str:
    """The first 10 hex digits of a commit, keeping a ``-dirty`` mark (harness.parent.runner.git_commit)."""
    return commit[:10] + ("-dirty" if commit.endswith("-dirty") else "")


def fmt_us(ns: float | None) -> str:
    """ns -> a us string with 3-4 significant digits (``""`` for None)."""
    if ns is None or not math.isfinite(ns):
        return "" if ns is None else "inf"
    us = ns / 1e3
    if us >= 1000:
        return f"{us:.0f}"
    if us >= 100:
        return f"{us:.1f}"
    if us >= 10:
        return f"{us:.2f}"
    return f"{us:.3f}"


def fmt_tflops(x: float | None) -> str:
    """TFLOP/s with one decimal, or three significant digits below 1 (CPU rates are fractions of one, and
    ``0.0`` would read as nothing); ``""`` for None."""
    if x is None:
        return ""
    return f"{x:.1f}" if x >= 1 else f"{x:.3g}"


def fmt_pct(x: float | None) -> str:
    """A percentage (of SOL) with one decimal, or two significant digits below 1 (not ``0.0``); ``""`` for
    None."""
    if x is None:
        return ""
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def fmt_interval_us(iv: Interval | None) -> str:
    """``[low, high]`` in us, or ``unbounded (1 sample)``."""
    if iv is None:
        return ""
    if not math.isfinite(iv.high):
        return "unbounded (1 sample)"
    return f"[{fmt_us(iv.low)}, {fmt_us(iv.high)}]"


#: A 95 % interval wider than this, relative to its estimate (1.0: +-100 %), says only that there were too few
#: samples for their noise; it is shown as ``too few samples``, not as a percentage.
MAX_SHOWN_REL_HALF_WIDTH = 1.0
TOO_FEW = "too few samples"


def fmt_pm(iv: Interval | None) -> str:
    """The interval's relative half-width, e.g. ``±0.42 %``; ``too few samples`` when it is unbounded (one
    sample) or wider than MAX_SHOWN_REL_HALF_WIDTH."""
    if iv is None:
        return ""
    if not math.isfinite(iv.high) or iv.rel_half_width > MAX_SHOWN_REL_HALF_WIDTH:
        return TOO_FEW
    pct = 100 * iv.rel_half_width
    return f"±{pct:.2f} %" if pct < 1 else f"±{pct:.1f} %" if pct < 10 else f"±{pct:.0f} %"


def fmt_change(c: Comparison) -> str:
    """A run-over-run change in percent with its 95 % half-width, e.g. ``-20.0 % ±0.4``; the half-width is
    ``too few samples`` past MAX_SHOWN_REL_HALF_WIDTH."""
    text = f"{100 * (c.ratio - 1):+.1f} %"
    if not math.isfinite(c.high):
        return f"{text} ({TOO_FEW})"
    half = max(c.high - c.ratio, c.ratio - c.low)
    return f"{text} ({TOO_FEW})" if half / c.ratio > MAX_SHOWN_REL_HALF_WIDTH else f"{text} ±{100 * half:.1f}"


def finite(x: float | None) -> float | None:
    """``x``, or None when it is None or not finite (JSON has no inf or nan)."""
    return x if x is not None and math.isfinite(x) else None


# ------------------------------------------------------------------------------------------------ words
def device_text(env: Environment) -> str:
    """The device once: ``NVIDIA H200 (sm_90, driver 580.159)``, or ``CPU (x86_64)`` when there is no GPU."""
    known = [x for x in (env.compute_capability, f"driver {env.driver}" if env.driver != "none" else "")
             if x and x != "none"]
    return f"{env.device} ({', '.join(known)})" if known else env.device


def timer_text(env: Environment) -> str:
    """How the run's times were taken, in words: ``CUDA events`` or ``a monotonic CPU clock``."""
    return "CUDA events" if env.timer == "cuda-events" else "a monotonic CPU clock"


def first_line(text: str, width: int = 160) -> str:
    """The first line of ``text``, cut at ``width`` characters with ``...``."""
    first = text.splitlines()[0] if text else ""
    return first[:width] + ("..." if len(first) > width else "")

