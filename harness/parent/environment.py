"""Facts about the machine a run uses: the device, its compute capability, driver and library versions."""
from __future__ import annotations

import platform
import subprocess
from importlib import metadata

import torch

from harness.parent.hostinfo import cpu_facts
from harness.parent.registry import DeviceFacts
from harness.results.record import Environment


def device_facts() -> DeviceFacts:
    """The current CUDA device (name, compute capability), or CPU-only."""
    if not torch.cuda.is_available():
        return cpu_facts()
    major, minor = torch.cuda.get_device_capability()
    return DeviceFacts(True, torch.cuda.get_device_name(), major, minor)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _driver() -> str:
    if not torch.cuda.is_available():
        return "none"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def environment() -> Environment:
    """The Environment record of this machine; ``timer`` says how times are taken here."""
    facts = device_facts()
    return Environment(
        device=facts.name,
        compute_capability=f"sm_{facts.cc_major}{facts.cc_minor}" if facts.cuda else "none",
        driver=_driver(),
        torch=torch.__version__,
        triton=_version("triton"),
        cutlass_dsl=_version("nvidia-cutlass-dsl"),
        python=platform.python_version(),
        hostname=platform.node(),
        timer="cuda-events" if facts.cuda else "cpu-monotonic",
    )
