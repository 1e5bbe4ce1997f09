"""Host cost of a triton_grouped call per launch path, against the GPU time of the kernel (issue 5).

On the small benchmark shapes a call's GPU work is shorter than the Python that launches it, so the timed loop
measures the host. Per benchmark shape and per launch path (``direct``: cuLaunchKernel through ctypes;
``runner``: Triton's compiled-kernel runner; ``jit``: Triton's JIT every call), on 15 fresh inputs:

    host us     wall time of the 15 calls / 15, GPU idle at the start (median of ROUNDS)
    gpu us      the same 15 calls queued behind a 20 ms GPU sleep, timed by events: the kernels alone
    loop us     the official loop: L2 cleared, 15 calls between one pair of events (median of ROUNDS)

Needs a CUDA GPU. Writes host_cost.json and host_cost.md under --out.

    python3 submissions/triton_grouped/host_cost.py --out DIR
    python3 submissions/triton_grouped/host_cost.py --parts --out DIR   # the fast path's pieces, us per call
"""
import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

import torch  # noqa: E402

from harness.worker.task_alias import alias_task  # noqa: E402
from problems.nvfp4_group_gemm.inputs import generate_many  # noqa: E402
from problems.nvfp4_group_gemm.spec import load_shapes  # noqa: E402

alias_task("nvfp4_group_gemm")  # submission.py's ``from task import``, as the worker resolves it
_spec = importlib.util.spec_from_file_location("triton_grouped_submission", HERE / "submission.py")
sub = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sub
_spec.loader.exec_module(sub)

CALLS, ROUNDS = 15, 15
MODES = ("direct", "runner", "jit")


def timed_calls(inputs) -> float:
    """us per call of custom_kernel on ``inputs`` between one pair of CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for d in inputs:
        sub.custom_kernel(d)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / len(inputs)


def measure(inputs, flush) -> dict:
    """Host, GPU-only and official-loop times (us per call) of custom_kernel on ``inputs``."""
    host, loop = [], []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for d in inputs:
            sub.custom_kernel(d)
        host.append((time.perf_counter_ns() - t0) / len(inputs) / 1e3)
        torch.cuda.synchronize()
        flush.zero_()
        loop.append(timed_calls(inputs))
    flush.zero_()
    torch.cuda._sleep(40_000_000)  # about 20 ms: every launch below is queued before the first kernel starts
    gpu = timed_calls(inputs)
    return {"host_us": statistics.median(host), "gpu_us": gpu, "loop_us": statistics.median(loop)}


def parts(inputs) -> dict:
    """us per call of each piece of custom_kernel's fast path (a plan with a direct launch must exist), median of
    ROUNDS passes over ``inputs``: the sizes lookup, the addresses, the layout tuple and its comparison, the
    launch alone, and the whole call."""
    plan = sub._FAST[tuple(inputs[0][3])]
    ptrs = [[t.data_ptr() for (a, b, c), (sa, sb) in zip(d[0], d[2]) for t in (a, b, c, sa, sb)] for d in inputs]
    pieces = {
        "lookup": lambda d, i: sub._FAST.get(tuple(d[3])),
        "addresses": lambda d, i: [t.data_ptr() for (a, b, c), (sa, sb) in zip(d[0], d[2])
                                   for t in (a, b, c, sa, sb)],
        "layout": lambda d, i: sub._layout(d[0], d[2]) == plan.layout,
        "launch": lambda d, i: plan.direct(ptrs[i]),
        "call": lambda d, i: sub.custom_kernel(d),
    }
    out = {}
    for name, fn in pieces.items():
        times = []
        for _ in range(ROUNDS):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for i, d in enumerate(inputs):
                fn(d, i)
            times.append((time.perf_counter_ns() - t0) / len(inputs) / 1e3)
        out[name] = statistics.median(times)
    torch.cuda.synchronize()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="benchmarks")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--parts", action="store_true", help="time the pieces of the fast path (direct launch only)")
    args = ap.parse_args()
    flush = torch.empty(torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    rows = []
    lines = ["| shape | launch | host us per call | GPU us per call | official loop us per call | direct taken |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for case in load_shapes(args.shapes).cases:
        inputs = generate_many(case.m, case.n, case.k, case.g, [case.seed + 42 * i for i in range(CALLS)],
                               "official")
        if args.parts:
            for d in inputs[:2]:
                sub.custom_kernel(d)
            r = {"case": case.name, **parts(inputs)}
            rows.append(r)
            lines.append(f"| {case.name} | parts | " + " ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "case")
                         + " | | | |")
            print(lines[-1], flush=True)
            continue
        for mode in MODES:
            sub._PLANS.clear()
            sub._LAUNCH = mode
            for d in inputs[:2]:
                sub.custom_kernel(d)
            torch.cuda.synchronize()
            direct = any(p.direct is not None for p in sub._PLANS.values())
            r = {"case": case.name, "launch": mode, "direct": direct, **measure(inputs, flush)}
            rows.append(r)
            lines.append(f"| {case.name} | {mode} | {r['host_us']:.1f} | {r['gpu_us']:.1f} | {r['loop_us']:.1f} | "
                         f"{direct} |")
            print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host_cost.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows},
                                                        indent=2))
    (args.out / "host_cost.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
