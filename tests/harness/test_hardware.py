"""harness/hardware.py: GPU models by device name, and the roofline figures; problems.nvfp4_group_gemm.cost keeps them
importable."""
from __future__ import annotations

from harness.hardware import GPU_PEAKS, gpu_model, peaks_for, sol_ns_of, tflops_of
from problems.nvfp4_group_gemm import cost


def test_gpu_model_names_a_known_model_or_keeps_the_device_name():
    assert gpu_model("NVIDIA H200") == "H200"
    assert gpu_model("NVIDIA B200") == "B200"
    assert gpu_model("CPU (x86_64)") == "CPU (x86_64)"
    assert peaks_for("nvidia h100 80gb hbm3").model == "H100"
    assert peaks_for("CPU (x86_64)") is None


def test_roofline_figures_take_flops_and_bytes():
    b200 = peaks_for("NVIDIA B200")
    # memory-bound: 7.68e6 bytes at 7.68 TB/s is exactly 1000 ns
    assert sol_ns_of(2, 7_680_000, b200) == 1000.0
    # compute-bound on the floor: 1978.9e6 FLOPs at H200's 1978.9 TFLOP/s fp8 peak is 1000 ns
    assert round(sol_ns_of(1_978_900_000, 0, peaks_for("H200"), floor=True), 9) == 1000.0
    assert tflops_of(2_000_000, 1000.0) == 2.0
    assert cost.GPU_PEAKS is GPU_PEAKS and cost.gpu_model is gpu_model
