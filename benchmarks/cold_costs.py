"""What a fresh machine pays once before its first leaderboard (issue "Fast samples": the leaderboard's wall time on
a fresh machine): each first-use cost timed alone, with empty caches, in seconds.

    cuda_init             torch's first CUDA context
    reference_triton      the parent's first exact reference on a benchmark shape (Triton compiles its kernels)
    wgmma_cubin           wgmma_sm90's nvcc build of kernel.cu
    wgmma_cpp_path        wgmma_sm90's C++ per-call path (fast_call.cpp) through torch's extension builder
    wgmma_first_call_builds      both, as wgmma_sm90's first call runs them: nvcc in the background while the C++
                          path builds (separate caches from the two above)
    wgmma_cpp_path_extension_h   the same source built the way it was before, with torch/extension.h prepended

    python benchmarks/cold_costs.py --out cold.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = ROOT / "submissions" / "wgmma_sm90"
sys.path[:0] = [str(ROOT), str(HOST)]


def _timed(costs: dict, name: str, step) -> None:
    t0 = time.perf_counter()
    step()
    costs[name] = round(time.perf_counter() - t0, 2)
    print(f"{name:30s} {costs[name]:8.2f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="cold-"))
    for var in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "FP4BENCH_CACHE"):
        os.environ[var] = str(scratch / var.lower())
    import torch
    from torch.utils.cpp_extension import load_inline

    import wgmma_sm90_host as host
    from task.inputs import generate_input
    from task.reference import ref_kernel_many
    from task.spec import load_shapes

    costs: dict[str, float] = {}
    _timed(costs, "cuda_init", lambda: torch.zeros(1, device="cuda").sum().item())
    case = load_shapes("benchmarks").cases[0]
    inputs = [generate_input(case.m, case.n, case.k, case.g, case.seed)]
    _timed(costs, "reference_triton", lambda: (ref_kernel_many(inputs), torch.cuda.synchronize()))
    _timed(costs, "wgmma_cubin", lambda: host.build_cubin(scratch / "cubin"))
    _timed(costs, "wgmma_cpp_path", host.load_fast_call)

    def first_call_builds():  # what wgmma_sm90's first call does: nvcc in the background, the C++ path meanwhile
        finish = host.start_cubin_build(scratch / "cubin_overlapped")
        host.load_fast_call("_overlapped")
        finish()
    _timed(costs, "wgmma_first_call_builds", first_call_builds)
    source = host.FAST_CALL_SOURCE.read_text()
    _timed(costs, "wgmma_cpp_path_extension_h", lambda: load_inline(name="fast_call_extension_h",
                                                                    cpp_sources=[source], extra_cflags=["-O2"]))
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "cpus": os.cpu_count(),
                                    "torch": torch.__version__, "seconds": costs}, indent=2))


if __name__ == "__main__":
    main()
