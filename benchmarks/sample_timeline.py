"""Where a timed sample's pause goes, phase by phase, seen from the trusted parent: one benchmark-mode run of one
case with the parent's phases wrapped in clocks (the harness itself is unchanged; the worker is unconfined so
nothing differs but the clocks). Per timed sample (ms, mean over the samples after the first):

    prepare   ArenaSample.prepare: draw, expected outputs, copies into the worker's buffers (critical path only:
              a prepare that ran ahead, while the worker finished the previous sample, counts as ahead)
    ahead     prepares run ahead of their sample (overlapped with the worker's work after its window)
    request   Session.run: the request sent until the reply decoded, window included
    window    the timed window (the reply's elapsed_ns)
    judge     judge.reply: the outputs compared with the expected ones on the device
    pause     the wall time outside the windows per sample (what --json reports as overhead_ms_per_sample)

and on CUDA the GPU time of one prepare (kernels summed by torch.profiler) next to its wall time.

    python benchmarks/sample_timeline.py --submission wgmma_sm90 --shapes benchmarks --case 0 --runs 30
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from clocks import clocked  # noqa: E402
from harness.parent import case_runner, judge, session  # noqa: E402
from harness.parent.registry import resolve  # noqa: E402
from harness.parent.runner import RunOptions, run  # noqa: E402
from harness.parent.samples import ArenaSample  # noqa: E402
from harness.parent.sandbox import Sandbox  # noqa: E402
from harness.parent.settings import load_settings  # noqa: E402
from problems.nvfp4_group_gemm.spec import ShapeSet, load_shapes  # noqa: E402

CLOCKS: dict[str, list[float]] = defaultdict(list)


def _clocked(name: str, fn):
    return clocked(name, fn, CLOCKS, scale=1e3)  # ms


def _prepare_gpu_ms(case, calls: int, device: torch.device) -> tuple[float, float]:
    """(wall ms, summed kernel ms) of one ArenaSample.prepare of ``case`` (after one untimed prepare)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from harness.parent.samples import SharedSet
    from problems.nvfp4_group_gemm.sample_buffers import Layout

    shared = SharedSet(device)
    layout = Layout.of(case, calls)
    shared.grow(layout)
    sample = ArenaSample(case, calls, "official", device, shared)
    sample.prepare(list(range(1, calls + 1)), False)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        sample.prepare(list(range(100, 100 + calls)), False)
        wall = (time.perf_counter() - t0) * 1e3
    gpu = sum(e.device_time for e in prof.events() if e.device_type == DeviceType.CUDA) / 1e3
    shared.close()
    return wall, gpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--submission", required=True)
    p.add_argument("--shapes", default="benchmarks")
    p.add_argument("--case", type=int, default=0)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = p.parse_args()
    shapes = load_shapes(args.shapes)
    case = shapes.cases[args.case]
    settings = replace(load_settings(), max_runs=args.runs, min_runs=args.runs)

    ArenaSample.prepare = _clocked("prepare", ArenaSample.prepare)
    session.Session.run = _clocked("request", session.Session.run)
    judge.reply = _clocked("judge", judge.reply)
    ahead = getattr(case_runner.CaseRunner, "_prepare_ahead", None)
    if ahead is not None:
        case_runner.CaseRunner._prepare_ahead = _clocked("ahead", ahead)
    rec = run(resolve(args.submission), ShapeSet(shapes.name, (case,)),
              RunOptions("benchmark", settings=settings, sandbox=Sandbox("off")))
    c = rec.cases[0]
    n = len(c.samples_ns)
    if n < 2:
        sys.exit(f"sample_timeline: {c.case.name} {c.status.value}: {c.message.splitlines()[0] if c.message else ''}")
    calls = settings.calls_per_sample
    window = [s * calls / 1e6 for s in c.samples_ns]
    # the last n (+1: the kernel-time pass) entries are the timed samples'; the first of them is left out
    per = {k: v[-(n + 1):-1][1:] if k != "ahead" else v[-(n + 1):][1:] for k, v in CLOCKS.items()}
    mean = {k: sum(v) / len(v) for k, v in per.items() if v}
    mean["window"] = sum(window[1:]) / (n - 1)
    mean["pause"] = c.overhead_ms_per_sample
    if "ahead" in mean and "prepare" in mean:  # prepares ahead are also counted in 'prepare': take them out
        mean["prepare"] -= mean["ahead"]
    out = {"case": c.case.name, "status": c.status.value, "samples": n, "ms": mean}
    if torch.cuda.is_available():
        wall, gpu = _prepare_gpu_ms(case, calls, torch.device("cuda"))
        out["prepare_alone"] = {"wall_ms": wall, "kernel_ms": gpu}
    print(f"{c.case.name}: {c.status.value}, {n} samples, ms per sample (mean of samples 2..{n}):")
    for k in ("prepare", "ahead", "request", "window", "judge", "pause"):
        if k in mean and mean[k] is not None:
            print(f"  {k:<8} {mean[k]:8.2f}")
    if "prepare_alone" in out:
        print(f"  one prepare alone: wall {out['prepare_alone']['wall_ms']:.2f} ms, kernels "
              f"{out['prepare_alone']['kernel_ms']:.2f} ms")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
