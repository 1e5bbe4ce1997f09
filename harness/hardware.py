"""Machine facts: datasheet peaks of the GPU models fp4bench knows, and the roofline figures built on them.

Nothing here knows a problem: a problem gives FLOPs and bytes for a case (harness/problem.py ``flops``,
``bytes_moved``); this module turns them into speed-of-light times and achieved rates for one GPU model.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet peaks of one GPU model. ``exact_tflops``: the fastest MMA that computes the NVFP4 problems
    exactly (FP4 on Blackwell, bf16/fp16 on Hopper); ``floor_tflops``: the fastest MMA of any kind (a physical
    floor: no kernel can beat it, exact or not); ``hbm_tbps``: memory bandwidth, TB/s."""

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


def default_device():
    """Where the "cuda" tensors of an input live: the current CUDA device, or the CPU when there is none (a
    ``torch.device``; imports torch)."""
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def sol_ns_of(flops: int, nbytes: int, peaks: GpuPeaks, floor: bool = False) -> float:
    """Speed-of-light time in ns of ``flops`` operations moving ``nbytes`` bytes: max(FLOPs / MMA peak, bytes /
    HBM peak). ``floor=True`` uses the fastest MMA of any kind (the physical floor that rejects impossible
    times)."""
    tflops = peaks.floor_tflops if floor else peaks.exact_tflops
    return max(flops / (tflops * 1e12), nbytes / (peaks.hbm_tbps * 1e12)) * 1e9


def tflops_of(flops: int, mean_ns: float) -> float:
    """Achieved TFLOP/s of ``flops`` operations in ``mean_ns`` ns."""
    return flops / mean_ns / 1e3
