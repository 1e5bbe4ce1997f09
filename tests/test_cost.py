"""task/cost.py: GPU models by device name."""
from __future__ import annotations

from task.cost import gpu_model, peaks_for


def test_gpu_model_names_a_known_model_or_keeps_the_device_name():
    assert gpu_model("NVIDIA H200") == "H200"
    assert gpu_model("NVIDIA B200") == "B200"
    assert gpu_model("CPU (x86_64)") == "CPU (x86_64)"
    assert peaks_for("nvidia h100 80gb hbm3").model == "H100"
    assert peaks_for("CPU (x86_64)") is None
