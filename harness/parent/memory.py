"""Memory a run needs, estimated from the case sizes before any input is drawn, against what the machine has free.

A request of n inputs (1 for a correctness call, ``calls_per_sample`` for a timed sample) holds at once, on the
device the inputs live on (beside the parent's L2 clear buffer, ``l2_clear_bytes``, held for the whole run): in the
parent, the n inputs it draws for the expected outputs, those outputs, the outputs received back from the worker,
and the exact reference's fp64 workspace for the largest group; in each worker, its own n inputs and n outputs. The
outputs also cross the pipe as bytes (a copy on each side, host memory). A case that cannot fit is refused before
anything is drawn (exit 113), instead of the parent dying of an out-of-memory error halfway through a run.

The figures are estimates (allocator slack, the CUDA contexts and Python itself are not counted), so only a case
that cannot fit is refused.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from harness import plugs
from harness.shapes import DEFAULT_PROBLEM

GIB = 1024**3


def _plug(problem: str):
    return plugs.get(problem)


def input_bytes(case, problem: str = DEFAULT_PROBLEM) -> int:
    """Bytes of one drawn input of ``case`` (every tensor, padding included: the plug's ``input_bytes``)."""
    return _plug(problem).input_bytes(case)


def output_bytes(case, problem: str = DEFAULT_PROBLEM) -> int:
    """Bytes of one call's outputs (the plug's ``output_spec``; nvfp4_group_gemm: G fp16 tensors [M, N, 1])."""
    return _plug(problem).output_spec(case).nbytes


def reference_bytes(case, problem: str = DEFAULT_PROBLEM) -> int:
    """The exact reference's working set beyond its input and output (the plug's ``reference_bytes``;
    nvfp4_group_gemm: its largest group in fp64)."""
    return _plug(problem).reference_bytes(case)


@dataclass(frozen=True)
class Need:
    """Estimated bytes one request of a case needs: ``device`` where the inputs live (the GPU, or the CPU when
    there is none), ``host`` the outputs crossing the pipe (host memory in every case)."""

    device: int
    host: int


def case_need(case, inputs_per_request: int, workers: int = 1, problem: str = DEFAULT_PROBLEM) -> Need:
    """What one request of ``inputs_per_request`` inputs of ``case`` (of ``problem``) needs with ``workers``
    worker processes (``compare`` runs two). Bytes; see the module docstring for what is counted."""
    n, out = inputs_per_request, output_bytes(case, problem)
    one = input_bytes(case, problem) + out
    device = (workers + 1) * n * one + n * out + reference_bytes(case, problem)
    return Need(device, 2 * workers * n * out)


def _proc_meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """Room left under this process's cgroup v2 memory limit, or None without a limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
    except (OSError, ValueError):
        return None


def host_available() -> int | None:
    """Bytes of host memory free for new allocations (Linux MemAvailable, capped by a cgroup limit; elsewhere
    the free physical pages), or None when the system does not say."""
    found = [x for x in (_proc_meminfo_available(), _cgroup_available()) if x is not None]
    if not found:
        try:
            found = [os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
        except (ValueError, OSError, AttributeError):
            return None
    return max(0, min(found))


def cuda_available() -> int:
    """Bytes free on the current CUDA device (``torch.cuda.mem_get_info``)."""
    import torch

    return torch.cuda.mem_get_info()[0]


def l2_clear_bytes(problem: str = DEFAULT_PROBLEM, device_total: int | None = None) -> tuple[int, str]:
    """The bytes the parent's L2 clear writes before each timed sample: the official loop's
    (``TimingLoop.l2_clear_bytes``: 4 GiB for nvfp4_gemv, whose eval.py takes utils.py's (1024, 1024, 1024)
    float32 fill; 62.5 GiB for the others, whose eval_better_bench*.py fill (16000, 1024, 1024)), at most half of
    ``device_total`` (bytes; None: no bound). The clear's GPU time matters, not just its size: the worker queues
    its calls while the GPU clears, so a longer clear hides more of a host-bound submission's launch time, as it
    does in the official loop. Returns (bytes, a note when the official figure was cut, else "")."""
    official = _plug(problem).timing.l2_clear_bytes
    if device_total is None or official <= device_total // 2:
        return official, ""
    cut = device_total // 2
    return cut, (f"L2 clear: {fmt_gib(cut)} before each sample, half this GPU's memory (the official loop of "
                 f"{problem} writes {fmt_gib(official)})")


def device_total_bytes() -> int | None:
    """The current CUDA device's memory (bytes), None without CUDA."""
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory if \
        torch.cuda.is_available() else None


def fmt_gib(nbytes: float) -> str:
    """Bytes as GiB with one decimal, or MiB below 1 GiB (``12.3 GiB``, ``512 MiB``)."""
    if nbytes >= GIB:
        return f"{nbytes / GIB:.1f} GiB"
    return f"{math.ceil(nbytes / 1024**2)} MiB"


def check_fits(cases, inputs_per_request: int, workers: int, cuda: bool, problem: str = DEFAULT_PROBLEM) -> None:
    """Refuse a shape set with a case whose estimated need exceeds free memory. ``cuda``: the inputs live on the
    current CUDA device (else on the CPU, where device and host needs add up). ``cases``: ``problem``'s.

    Raises MemoryError naming the first case that cannot fit, the memory it needs and the memory available."""
    plug = _plug(problem)
    host_free = host_available()
    device_free = cuda_available() if cuda else host_free
    clear = l2_clear_bytes(problem, device_total_bytes())[0] if cuda else 0  # held by the parent all run long
    for case in cases:
        need = case_need(case, inputs_per_request, workers, problem)
        checks = [("GPU", need.device + clear, device_free), ("CPU", need.host, host_free)] if cuda else \
                 [("CPU", need.device + need.host, host_free)]
        for where, needed, free in checks:
            if free is not None and needed > free:
                text = plug.case_text(case)
                label = f"{case.name} ({text})" if case.name else text
                raise MemoryError(
                    f"case {label} needs about {fmt_gib(needed)} of {where} memory ({inputs_per_request} "
                    f"input{'s' if inputs_per_request != 1 else ''} a request, with their outputs and the exact "
                    f"reference, in fp4bench and {workers} worker{'s' if workers != 1 else ''}"
                    f"{f', and the L2 clear of {fmt_gib(clear)}' if where == 'GPU' else ''}); "
                    f"{fmt_gib(free)} available")
