"""Install PyTorch into the running Python before the project (the Makefile calls this), choosing the build.

- On Linux without an NVIDIA GPU (harness.parent.hostinfo), PyPI's torch is the CUDA build (about 3 GB of CUDA
  libraries nobody will use), so torch is installed first from PyTorch's own CPU wheel index, with a short
  timeout and no retries. If that index cannot be reached (or has no wheel for this Python), nothing is
  installed here and the project install takes torch from the default index instead, as before.
- With an NVIDIA GPU, elsewhere than Linux (PyPI's wheels are the CPU build there), or when ``PIP_CONSTRAINT`` is
  set (CI pins its wheel through it and must not reach out to another index), nothing is done here.

``--report`` prints which build is installed (after the project install). Uses only the standard library: it
runs before anything else is installed.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.parent.hostinfo import nvidia_gpu_present  # noqa: E402  (after the repo root is on the path)

#: PyTorch's wheel index for CPU-only builds.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: pip's socket timeout (s) for the CPU index: a blocked network fails fast instead of waiting pip's default.
CPU_INDEX_TIMEOUT_S = 10


def torch_requirement(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The torch requirement of the project's dependencies (e.g. ``torch>=2.6``), read from pyproject.toml so
    the range is stated once. Raises ValueError when there is none."""
    match = re.search(r'"(torch(?:[<>=!~ ][^"]*)?)"', pyproject.read_text())
    if not match:
        raise ValueError(f"{pyproject}: no torch requirement in the dependencies")
    return match.group(1)


def choose(environ, platform: str, gpu: bool) -> str | None:
    """Why torch should NOT come from the CPU index here (a sentence), or None when it should."""
    if environ.get("PIP_CONSTRAINT"):
        return f"torch pinned by PIP_CONSTRAINT ({environ['PIP_CONSTRAINT']}): installed with the project"
    if gpu:
        return "NVIDIA GPU found: torch (CUDA build) comes from the default index with the project"
    if not platform.startswith("linux"):
        return f"no CPU-only index needed on {platform}: the default index's torch is a CPU build"
    return None


def cpu_install_command(python: str, requirement: str) -> list[str]:
    """The pip command that installs ``requirement`` from PyTorch's CPU index, failing fast."""
    return [python, "-m", "pip", "install", "--quiet", "--timeout", str(CPU_INDEX_TIMEOUT_S), "--retries", "0",
            "--index-url", CPU_INDEX, requirement]


def install(environ=os.environ, platform: str = sys.platform, gpu: bool | None = None, run=subprocess.run,
            python: str = sys.executable, say=print) -> bool:
    """Install torch from the CPU index when ``choose`` says so; ``say`` what happened. Returns True when torch
    was installed here, False when it is left to the project install (the default index)."""
    reason = choose(environ, platform, nvidia_gpu_present() if gpu is None else gpu)
    if reason is not None:
        say(reason)
        return False
    requirement = torch_requirement()
    say(f"no NVIDIA GPU: installing {requirement} (CPU build) from {CPU_INDEX}")
    if run(cpu_install_command(python, requirement)).returncode == 0:
        return True
    say(f"{CPU_INDEX} could not be reached (or has no wheel for this Python): torch comes from the default "
        f"index with the project")
    return False


def report() -> str:
    """Which torch build this Python has, e.g. ``torch 2.13.0+cpu: CPU build`` or ``... CUDA 13.0 build``."""
    import warnings

    warnings.filterwarnings("ignore")  # e.g. "Failed to initialize NumPy" before numpy is installed
    import torch

    cuda = torch.version.cuda
    return f"torch {torch.__version__}: {'CUDA ' + cuda if cuda else 'CPU'} build"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true", help="print which torch build is installed")
    args = parser.parse_args(argv)
    if args.report:
        print(report())
    else:
        install()
    return 0


if __name__ == "__main__":
    sys.exit(main())
