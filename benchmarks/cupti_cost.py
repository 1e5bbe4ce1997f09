"""What a kernel-time pass costs the worker, by how torch.profiler is driven (issue 15: the leaderboard's four
passes took 4.7 s of a 21.8 s run on the H200). Per way, the mean ms of entering the profiler, the calls, leaving
it and reading its events, and the busy time (us per call) each way reports, over --reps passes of --calls calls
of a stand-in workload (one GEMM and --small elementwise ops per call); and apart, the process's first pass,
which starts the profiler up:

    cpu+cuda  activities CPU and CUDA, prof.events() (what the worker's passes do)
    cuda      activity CUDA only, prof.events()
    raw       activity CUDA only, the Kineto events read directly (prof.profiler.kineto_results.events());
              on the H200 their durations differed from the parsed events' by up to 0.17 us on short kernels

On a machine without CUDA every way profiles the CPU only (busy time: none).

    python benchmarks/cupti_cost.py --reps 5 --out cupti_cost.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.worker.timing import busy_us  # noqa: E402

WAYS = ("cpu+cuda", "cuda", "raw")


def _intervals(prof, way: str, cuda: bool) -> list[tuple[float, float]]:
    """(start, end) in us of every device event of the pass."""
    if not cuda:
        return []
    if way == "raw":
        return [(e.start_ns() / 1e3, e.end_ns() / 1e3) for e in prof.profiler.kineto_results.events()
                if e.device_type() == DeviceType.CUDA]
    return [(e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == DeviceType.CUDA]


def one_pass(way: str, work, calls: int, cuda: bool) -> dict:
    """One profiled pass of ``calls`` calls of ``work``: ms per phase and the busy us per call."""
    acts = ([ProfilerActivity.CPU] if way == "cpu+cuda" or not cuda else []) + (
        [ProfilerActivity.CUDA] if cuda else [])
    t0 = time.perf_counter()
    prof = profile(activities=acts)
    prof.__enter__()
    t1 = time.perf_counter()
    for _ in range(calls):
        work()
    if cuda:
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    prof.__exit__(None, None, None)
    t3 = time.perf_counter()
    spans = _intervals(prof, way, cuda)
    t4 = time.perf_counter()
    return {"enter_ms": (t1 - t0) * 1e3, "calls_ms": (t2 - t1) * 1e3, "exit_ms": (t3 - t2) * 1e3,
            "events_ms": (t4 - t3) * 1e3, "busy_us_per_call": busy_us(spans) / calls if spans else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--calls", type=int, default=15)
    p.add_argument("--size", type=int, default=4096, help="the GEMM's M = N = K (CUDA; 256 on the CPU)")
    p.add_argument("--small", type=int, default=50, help="elementwise ops per call")
    p.add_argument("--first", choices=WAYS, default=WAYS[0], help="the way of the process's first pass")
    p.add_argument("--before-context", action="store_true",
                   help="start the profiler up (an empty pass) before the CUDA context exists")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    empty_ms = None
    if args.before_context:
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]):
            pass
        empty_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    torch.empty(1, device=dev)
    context_ms = (time.perf_counter() - t0) * 1e3
    n = args.size if cuda else 256
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16 if cuda else torch.float32)
    v = torch.zeros(1024, device=dev)

    def work():
        x @ x
        for _ in range(args.small):
            v.add_(1.0)

    for _ in range(3):
        work()
    first = one_pass(args.first, work, args.calls, cuda)  # starts the profiler up: reported apart
    rows = {}
    for _ in range(args.reps):
        for way in WAYS:
            rows.setdefault(way, []).append(one_pass(way, work, args.calls, cuda))
    out = {"cuda": cuda, "torch": torch.__version__, "calls": args.calls, "context_ms": context_ms,
           "empty_pass_before_context_ms": empty_ms, "first_way": args.first, "first_pass": first, "ways": {}}
    print(f"empty pass before the context {empty_ms} ms; context {context_ms:.1f} ms; "
          f"the process's first pass ({args.first}): "
          + "  ".join(f"{k} {v:.2f}" for k, v in first.items() if k.endswith("_ms")))
    for way, rs in rows.items():
        mean = {k: sum(r[k] for r in rs) / len(rs) for k in ("enter_ms", "calls_ms", "exit_ms", "events_ms")}
        busy = [r["busy_us_per_call"] for r in rs if r["busy_us_per_call"] is not None]
        mean["busy_us_per_call"] = sum(busy) / len(busy) if busy else None
        out["ways"][way] = mean
        print(f"{way:9s} " + "  ".join(f"{k} {val:.2f}" if val is not None else f"{k} -" for k, val in mean.items()))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
