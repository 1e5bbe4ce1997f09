"""Time a submission the way the official evaluator does, in one process, with none of fp4bench's integrity
measures: the problem's official loop (``--problem``, its plug's TimingLoop: nvfp4_group_gemm reuses 15 inputs,
seed + 42 each, in every sample; gemv's leaderboard draws one new input a sample, seed + 13), one event pair per
sample, the L2 cleared as that loop clears it (harness.parent.memory.l2_clear_bytes), no rechecks, no stream
watch, no fingerprint. It exists to show that fp4bench's checks do
not move an honest submission's times: compare its per-shape means with `python -m harness run --mode benchmark`.

    python benchmarks/official_style.py --submission torch_reference --shapes benchmarks --out FILE.json

``--settings`` takes the same run settings file as fp4bench (stopping rule of ``--mode``), so both stop alike;
each shape's wall time is recorded, the baseline for what fp4bench's checks add per run.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from submission_loader import load_submission

from harness import plugs
from harness.parent.memory import device_total_bytes, l2_clear_bytes
from harness.parent.settings import load_settings
from harness.results.stats import summarize
from harness.shapes import DEFAULT_PROBLEM, load_shapes
from harness.worker.timing import L2Flush, busy_us, measure


def _kernel_ns(kernel, inputs, flush) -> float:
    """The GPU's busy time over one pass of ``inputs`` (the union of every CUDA kernel's interval, overlaps counted
    once), per call (ns), from torch.profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    flush()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for x in inputs:
            kernel(x)
        torch.cuda.synchronize()
    return busy_us([(e.time_range.start, e.time_range.end) for e in prof.events()
                    if e.device_type == DeviceType.CUDA]) * 1e3 / len(inputs)


def _official_inputs(plug, case) -> list:
    """The inputs one sample of the official loop times: ``calls_per_sample`` drawn once (seed + seed_step each,
    reused by every sample), or, for a loop of one call a sample, the case's own draw."""
    loop = plug.timing
    if loop.calls_per_sample == 1:
        return [plug.generate(case, case.seed)]
    return [plug.generate(case, case.seed + loop.seed_step * (j + 1)) for j in range(loop.calls_per_sample)]


def _fresh_samples(kernel, plug, case, rule, flush) -> tuple[list[float], list]:
    """A loop that draws a new input before every sample (gemv's leaderboard: seed += seed_step), one call a
    sample. Returns the per-call times (ns) and the last sample's inputs."""
    samples, t0, i = [], time.perf_counter_ns(), 0
    while True:
        i += 1
        inputs = [plug.generate(case, case.seed + plug.timing.seed_step * i)]
        samples += [s.per_call_ns for s in measure(kernel, inputs, 1, flush=flush)]
        if rule.is_finished(samples, time.perf_counter_ns() - t0):
            return samples, inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", required=True)
    parser.add_argument("--problem", default=DEFAULT_PROBLEM, choices=plugs.names())
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--settings", type=Path, default=None, help="fp4bench run settings (default configs/run.yml)")
    parser.add_argument("--mode", default="benchmark", choices=("benchmark", "leaderboard"))
    parser.add_argument("--kernel-time", action="store_true",
                        help="after timing, one pass under torch.profiler: kernels' device time per call (CUDA)")
    args = parser.parse_args()
    variant, module = load_submission(args.submission)
    cuda = torch.cuda.is_available()
    plug = plugs.get(args.problem)
    flush = L2Flush(torch.device("cuda", 0), limit=False, lines=False,
                    nbytes=l2_clear_bytes(args.problem, device_total_bytes())[0]) if cuda else None
    rule = load_settings(args.settings).stopping_rule(args.mode)
    results = []
    for case in load_shapes(args.shapes, args.problem).cases:
        wall0 = time.monotonic()
        label = case.name or plug.case_text(case)
        inputs = _official_inputs(plug, case)
        module.custom_kernel(inputs[0])  # warm-up
        if plug.timing.fresh_inputs_each_sample and args.mode == "leaderboard":
            samples, inputs = _fresh_samples(module.custom_kernel, plug, case, rule, flush)
        else:
            samples = [s.per_call_ns for s in measure(module.custom_kernel, inputs, rule, flush=flush)]
        s = summarize(samples)
        results.append({"case": label, "runs": s.runs, "mean_ns": s.mean_ns, "std_ns": s.std_ns,
                        "wall_s": time.monotonic() - wall0,
                        "kernel_ns": _kernel_ns(module.custom_kernel, inputs, flush) if args.kernel_time and cuda
                        else None})
        print(f"{label}: {s.mean_ns / 1e3:.2f} us over {s.runs} samples", flush=True)
    args.out.write_text(json.dumps({"submission": variant.name, "problem": args.problem,
                                    "device": torch.cuda.get_device_name() if cuda else "cpu",
                                    "results": results}, indent=2))

if __name__ == "__main__":
    main()
