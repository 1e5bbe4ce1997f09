"""What a case costs: FLOPs, bytes moved, and speed-of-light (SOL) times per GPU model.

Bytes are what an ideal kernel must move once: A and B (fp4, K/2 bytes a row), the plain-count scales (one byte
per 16 elements of A and B), and C written in fp16. With B200 at the task's 7.68 TB/s this reproduces the
task's published SOL (18.833, 10.667, 2.406, 1.525 us for the four benchmarks).
"""
from __future__ import annotations

from harness.hardware import GPU_PEAKS, GpuPeaks, gpu_model, peaks_for, sol_ns_of, tflops_of
from problems.nvfp4_group_gemm.spec import Case


#: The machine facts live in the harness (harness.hardware); kept importable from here for the task's users.
__all__ = ["GPU_PEAKS", "GpuPeaks", "bytes_moved", "flops", "gpu_model", "peaks_for", "sol_ns", "tflops_at"]


def flops(case: Case) -> int:
    """2 * M * N * K summed over groups."""
    return sum(2 * m * n * k for m, n, k in zip(case.m, case.n, case.k))


def bytes_moved(case: Case) -> int:
    """A + B (K/2 bytes a row) + SFA + SFB (K/16 bytes a row) + C (2 bytes an element), summed over groups."""
    total = 0
    for m, n, k in zip(case.m, case.n, case.k):
        total += (m + n) * (k // 2) + (m + n) * (k // 16) + m * n * 2
    return total


def sol_ns(case: Case, peaks: GpuPeaks, floor: bool = False) -> float:
    """Speed-of-light time in ns: max(FLOPs / MMA peak, bytes / HBM peak). ``floor=True`` uses the fastest MMA
    of any kind (the physical floor used to reject impossible times)."""
    return sol_ns_of(flops(case), bytes_moved(case), peaks, floor)


def tflops_at(case: Case, mean_ns: float) -> float:
    """Achieved TFLOP/s for a mean time in ns."""
    return tflops_of(flops(case), mean_ns)
