"""Each call's time in a window, call by call (us; issue 15 fidelity): where fp4bench's means exceed the official
loop's. An event is recorded after every call (``harness.worker.timing.marking``), which adds host time to each
call alike. Prints per shape and variant the mean of call 1, call 2, calls 3..15 and all calls.

In one process (default), interleaved sample by sample, the official loop against fp4bench's window with one of
its steps added at a time:

    official         the same 15 inputs every sample, device sync, plain L2 clear, start event, calls
    guard            the calls through the native guard's run_calls (``run_window``), same plain clear
    guard_snap       + the threads' CPU snapshot (threads.snapshot) before the sync, as the worker takes it
    guard_l2         + the persisting-L2 reset through the driver before the clear (fp4bench's L2Flush)
    guard_watch      + the stream watch after the end mark
    guard_copy, official_copy   + a device-to-device copy of the inputs' size right before (the worker's copy
                     of its inputs into its own memory)
    guard_snap_l2_watch_copy    all of them

With ``--worker-log FILE``: the ``percall N K t1 .. t15`` lines a worker started with FP4BENCH_PER_CALL_LOG=1
wrote to its log (``fp4bench run --worker-log FILE``), one per timed window, the last ``--samples`` per shape.

    python benchmarks/per_call_probe.py --submission wgmma_sm90 --shapes benchmarks --samples 40
    FP4BENCH_PER_CALL_LOG=1 python -m harness run --submission wgmma_sm90 --shapes benchmarks --mode leaderboard \
        --no-store --worker-log /tmp/wl.txt && python benchmarks/per_call_probe.py --submission wgmma_sm90 \
        --worker-log /tmp/wl.txt
"""
from __future__ import annotations

import argparse
import collections
import statistics

import torch
from submission_loader import load_submission

from harness.worker import native, threads
from harness.worker.timing import L2Flush, StreamWatch, marking, per_call_us, read_per_call_lines, run_window
from task.inputs import generate_input
from task.spec import load_shapes


VARIANTS = ("official", "guard", "guard_snap", "guard_l2", "guard_watch", "guard_copy", "official_copy",
            "guard_snap_l2_watch_copy")


def _cuda_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size() if obj.is_cuda else 0
    return sum(_cuda_bytes(x) for x in obj) if isinstance(obj, (list, tuple)) else 0


def _row(name: str, calls: list[list[float]]) -> str:
    first = statistics.mean(c[0] for c in calls)
    second = statistics.mean(c[1] for c in calls)
    rest = statistics.mean(statistics.mean(c[2:]) for c in calls)
    total = statistics.mean(sum(c) / len(c) for c in calls)
    return f"{name}: call1 {first:.2f} call2 {second:.2f} calls3+ {rest:.2f} mean {total:.2f} us ({len(calls)} samples)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", required=True)
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--worker-log", default=None)
    args = parser.parse_args()
    cases = load_shapes(args.shapes).cases
    if args.worker_log:
        with open(args.worker_log) as f:
            seen = read_per_call_lines(f)
        for case in cases:
            got = seen.get((case.n[0], case.k[0]))
            if got:
                print(_row(f"fp4bench {case.name}", got[-args.samples:]))
        return
    variant, module = load_submission(args.submission)
    dev = torch.device("cuda", 0)
    plain, full = L2Flush(dev, limit=False, lines=False), L2Flush(dev)
    native.build()
    window = native.load()
    window.arm()
    watch = StreamWatch(dev)
    big = torch.empty(2, 1 << 30, dtype=torch.uint8, device=dev)
    for case in cases:
        inputs = [generate_input(case.m, case.n, case.k, case.g, case.seed + 42 * (j + 1)) for j in range(15)]
        nbytes = sum(_cuda_bytes(x) for x in inputs)
        module.custom_kernel(inputs[0])
        rows = collections.defaultdict(list)
        for i in range(args.samples):
            for name in VARIANTS:
                if "copy" in name:  # the worker's copy of its inputs right before the window
                    n = min(nbytes, big.shape[1])
                    big[1, :n].copy_(big[0, :n])
                marks = []
                kernel = marking(module.custom_kernel, marks)
                if name.startswith("official"):  # the official loop, with the same event after every call
                    torch.cuda.synchronize()
                    plain()
                    start = torch.cuda.Event(enable_timing=True)
                    start.record()
                    for x in inputs:
                        kernel(x)
                    torch.cuda.synchronize()
                    rows[name].append(per_call_us(start.elapsed_time, marks))
                    continue
                run_window(window, kernel, inputs, lambda o, s: (), True, full if "l2" in name else plain,
                           watch if "watch" in name else None, threads.snapshot if "snap" in name else lambda: None)
                rows[name].append(per_call_us(lambda ev: window.ms_after_start(ev.cuda_event), marks))
                window.cleared()
                window.release()
        for name in VARIANTS:
            print(_row(f"{name} {case.name}", rows[name][3:]))


if __name__ == "__main__":
    main()
