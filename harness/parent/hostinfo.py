"""What can be learnt about this machine without importing torch: whether an NVIDIA GPU could be present at all,
and the CPU-only device facts. Commands that only need to know "no GPU here" (``list`` on a CPU machine, the
installer choosing PyTorch's CPU build) ask here and skip torch's 1-2 s import; everything else asks
harness.parent.environment, which asks torch.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

from harness.parent.registry import DeviceFacts

#: Where Linux's NVIDIA driver lists the GPUs it drives (one folder each).
_PROC_GPUS = Path("/proc/driver/nvidia/gpus")
#: Device nodes that mean a GPU may be reachable even without the Linux driver's /proc entries (WSL2: /dev/dxg).
_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def cpu_facts() -> DeviceFacts:
    """DeviceFacts of a machine used without a GPU: ``CPU (<processor or machine>)``, e.g. ``CPU (x86_64)``."""
    return DeviceFacts(False, f"CPU ({platform.processor() or platform.machine()})")


def nvidia_gpu_present() -> bool:
    """False only when this machine certainly has no NVIDIA GPU to use: Linux's driver lists none under
    /proc/driver/nvidia/gpus, or, without that folder, there is no NVIDIA device node and no ``nvidia-smi``
    that lists a GPU. True means "maybe": ask torch (harness.parent.environment.device_facts) for the facts."""
    if _PROC_GPUS.is_dir():
        return any(_PROC_GPUS.iterdir())
    if any(os.path.exists(node) for node in _DEVICE_NODES):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return True  # a driver tool that hangs or fails is still a driver: let torch decide
    return listed.returncode != 0 or "GPU" in listed.stdout
