"""What a case costs: FLOPs, bytes moved, and speed-of-light (SOL) times per GPU model.

Bytes are what an ideal kernel must move once: A and B (fp4, K/2 bytes a row), the plain-count scales (one byte
per 16 elements of A and B), and C written in fp16. With B200 at the task's 7.68 TB/s this reproduces the
task's published SOL (18.833, 10.667, 2.406, 1.525 us for the four benchmarks).
"""
from __future__ import annotations

from dataclasses import dataclass

from task.spec import Case


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet peaks of one GPU model. ``exact_tflops``: the fastest MMA that computes this problem exactly
    (FP4 on Blackwell, bf16/fp16 on Hopper); ``floor_tflops``: the fastest MMA of any kind (a physical floor:
    no kernel can beat it, exact or not); ``hbm_tbps``: memory bandwidth, TB/s."""

    model: str
    exact_tflops: float
    floor_tflops: float
    hbm_tbps: float
    source: str


#: Matched against the device name, first hit wins.
GPU_PEAKS: tuple[GpuPeaks, ...] = (
    GpuPeaks("B200", exact_tflops=7274.0, floor_tflops=7274.0, hbm_tbps=7.68,
             source="task SOL at 1.5 GHz: 148 SMs x 32768 FP4 FLOP/clk; HBM 7.68 TB/s (task.yml)"),
    GpuPeaks("H200", exact_tflops=989.4, floor_tflops=1978.9, hbm_tbps=4.8,
             source="NVIDIA H200 SXM datasheet: dense bf16 989.4, dense fp8 1978.9 TFLOP/s, HBM3e 4.8 TB/s"),
    GpuPeaks("H100", exact_tflops=989.4, floor_tflops=1978.9, hbm_tbps=3.35,
             source="NVIDIA H100 SXM datasheet: dense bf16 989.4, dense fp8 1978.9 TFLOP/s, HBM3 3.35 TB/s"),
)


def peaks_for(device_name: str) -> GpuPeaks | None:
    """The GpuPeaks whose model name occurs in ``device_name`` (e.g. "NVIDIA H200"), or None if unknown."""
    for peaks in GPU_PEAKS:
        if peaks.model.lower() in device_name.lower():
            return peaks
    return None



def gpu_model(device: str) -> str:
    """The GPU model a device name belongs to ("NVIDIA H200" -> "H200"; GPU_PEAKS), or the device name itself
    when it is not a known model (e.g. a CPU)."""
    peaks = peaks_for(device)
    return peaks.model if peaks else device

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
    tflops = peaks.floor_tflops if floor else peaks.exact_tflops
    return max(flops(case) / (tflops * 1e12), bytes_moved(case) / (peaks.hbm_tbps * 1e12)) * 1e9


def tflops_at(case: Case, mean_ns: float) -> float:
    """Achieved TFLOP/s for a mean time in ns."""
    return flops(case) / mean_ns / 1e3
