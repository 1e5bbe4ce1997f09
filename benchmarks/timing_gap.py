"""Where does fp4bench's honest-timing gap come from? (issue 3)

fp4bench times an honest submission slower than the official loop does (H200, 2026-11-29: triton_grouped
g2_n4096_k1536 62.6 us against 37.6 us). This script times one submission in ONE process under the official
loop and under each difference between the two. Variants are interleaved (sample s of every variant, then
sample s + 1 of every variant), so a drift of the machine over the run (clocks, other tenants) falls on all
of them alike:

    official        the same 15 inputs every sample (the official evaluator)
    official_idle   the same inputs, but the process sleeps IDLE_S before each sample (fp4bench's worker waits
                    about that long for the parent's reference outputs)
    official_l2     the same inputs, with fp4bench's L2 clear (persisting-L2 limit set to 0 and persisting
                    lines reset through the driver, then the buffer zeroed) instead of a plain buffer zeroing
    official_l2limit, official_l2reset   only one of those two driver calls, then the buffer zeroed
    fresh           15 newly drawn inputs every sample (fp4bench's rule), drawn as the worker draws them
    fresh_idle      fresh + idle: what fp4bench's worker does
    fresh_idle_gc   fresh_idle, then gc.collect() right before the window
    fresh_idle_spin fresh, then IDLE_S of CPU busy-waiting (a worker polling for go) instead of sleeping
    fresh_idle_warm fresh_idle, then one untimed call on an extra fresh input right before the window
    fresh_idle_warmprev  sleep IDLE_S, one untimed call on the previous sample's input, then draw and time
                    (the call cannot see the inputs it will be timed on)
    fresh_idle_gpuwarm[N]  fresh_idle, then N ms (default GPU_WARM_MS) of GPU work that is not the
                    submission's (zeroing the flush buffer), then a synchronize: the GPU's clocks are up when the
                    window opens, but the window still starts on an idle GPU, so a slow first host call still counts
    official_peer   the official loop while a second process holds an idle CUDA context on the same GPU (as
                    fp4bench's parent does while its worker is timed)
    any of them + _hidden (e.g. fresh_idle_hidden): a GPU spin queued after the L2 clear and before the start
                    event, so every call's host path is hidden: what is left above ``official_hidden`` is the
                    GPU's own (cold inputs), what ``fresh_idle`` adds on top of ``fresh_idle_hidden`` is host time

Per variant: mean and median per-call time over the window (events on a GPU, a monotonic clock on the CPU),
the host time per call (time for the Python call to return), and on a GPU the first call's time against the
mean of the rest (events between calls; with ``--events ends`` only the window's two events, as the official
loop records them, and the first/rest columns are then host times). Writes JSON and a markdown table.

    python benchmarks/timing_gap.py --submission triton_grouped --shapes benchmarks --samples 20 --out DIR
"""
from __future__ import annotations

import argparse
import collections
import gc
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from submission_loader import load_submission

from harness.parent.seeds import sample_seeds
from harness.worker.timing import L2Flush, measure
from task.inputs import generate_many
from task.spec import load_shapes

CALLS = 15
IDLE_S = 0.3  # --idle-ms sets it
#: GPU clock cycles a ``_hidden`` variant queues before its start event (about 2 ms at 1.98 GHz; the host queues 15
#: calls well within it).
HIDE_CYCLES = 4_000_000
GPU_WARM_MS = 5.0
VARIANTS = ("official", "official_idle", "official_l2", "official_l2limit", "official_l2reset", "fresh", "fresh_idle", "fresh_idle_gc", "fresh_idle_spin",
            "fresh_idle_warm", "fresh_idle_warmprev", "fresh_idle_gpuwarm", "official_peer")
#: The peer process of official_peer: a CUDA context with some memory, idle until killed.
PEER = "import sys, time, torch; x = torch.ones(1 << 28, device='cuda'); torch.cuda.synchronize(); " \
       "print('ready', flush=True); time.sleep(3600)"


def _draw(case, seeds):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the worker draws: one intra-op thread per pool thread
    try:
        return generate_many(case.m, case.n, case.k, case.g, seeds, "official")
    finally:
        torch.set_num_threads(threads)


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def one_sample(kernel, inputs, flush, per_call: bool = True, hide: bool = False) -> dict:
    """Time ``kernel`` on every input back to back; per-call window time, host time per call, and the first
    call's time against the mean of the others (``per_call``: events between calls on a GPU, the host clock on
    the CPU; else the host time of each call), ns. ``hide``: queue HIDE_CYCLES of GPU spin before the start
    event."""
    s = measure(kernel, inputs, 1, flush=flush, per_call=per_call, queue_behind_cycles=HIDE_CYCLES if hide else 0)[0]
    each = s.call_ns if per_call else s.host_call_ns
    return {"per_call_ns": s.per_call_ns, "host_ns": s.host_ns / s.calls, "first_ns": each[0],
            "rest_ns": statistics.mean(each[1:]) if s.calls > 1 else each[0]}


class Variant:
    """One variant's state across the interleaved samples: its fixed inputs, the last inputs it timed, its rows."""

    def __init__(self, name: str, kernel, case, cuda: bool, flush, per_call: bool = True, idle_s: float = IDLE_S):
        self.hide = name.endswith("_hidden")
        name = name.removesuffix("_hidden")
        self.label = name + ("_hidden" if self.hide else "")
        self.name, self.kernel, self.case, self.cuda, self.per_call = name, kernel, case, cuda, per_call
        self.idle_s = idle_s
        self.flush = flush[name.rsplit("_", 1)[-1]] if cuda else None  # a key of its own or the plain clear
        self.fixed = _draw(case, sample_seeds(case.seed, 0, CALLS)) if name.startswith("official") else None
        self.previous = None
        self.rows = []
        kernel((self.fixed or _draw(case, [case.seed + 3]))[0])  # compile / warm caches once
        _sync(cuda)

    def sample(self, s: int) -> None:
        name, case, kernel = self.name, self.case, self.kernel
        inputs = self.fixed
        if inputs is None and not name.endswith("_warmprev"):
            inputs = _draw(case, sample_seeds(case.seed, s + 1, CALLS))
        _sync(self.cuda)
        if name.endswith("_spin"):
            end = time.perf_counter() + self.idle_s
            while time.perf_counter() < end:
                pass
        elif "idle" in name:
            time.sleep(self.idle_s)
        if name.endswith("_gc"):
            gc.collect()
        warm = re.fullmatch(r".*_gpuwarm(\d*)", name)
        if warm and self.cuda:
            end = time.perf_counter() + float(warm.group(1) or GPU_WARM_MS) / 1e3
            while time.perf_counter() < end:
                for _ in range(10):
                    self.flush()
                torch.cuda.synchronize()
        if name.endswith("_warm"):
            kernel(_draw(case, [case.seed + 7 + s])[0])
        if name.endswith("_warmprev"):
            kernel(self.previous if self.previous is not None else _draw(case, [case.seed + 7])[0])
            inputs = _draw(case, sample_seeds(case.seed, s + 1, CALLS))
            _sync(self.cuda)
            self.previous = inputs[-1]
        self.rows.append(one_sample(kernel, inputs, self.flush, self.per_call, self.hide and self.cuda))

    def summary(self) -> dict:
        per_call = [r["per_call_ns"] for r in self.rows]
        return ({k: statistics.mean(r[k] for r in self.rows) for k in self.rows[0]}
                | {"median_ns": statistics.median(per_call), "samples": len(self.rows)})


def run_case(names: list[str], kernel, case, samples: int, cuda: bool, flush, per_call: bool = True,
             idle_s: float = IDLE_S) -> dict:
    """Interleaved samples of every variant on one case; returns {variant: summary}."""
    variants = [Variant(n, kernel, case, cuda, flush, per_call, idle_s) for n in names]
    for s in range(samples):
        for v in variants:
            v.sample(s)
    return {v.label: v.summary() for v in variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", required=True)
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--events", choices=("per-call", "ends"), default="per-call",
                        help="an event after every call (default), or only the window's two (the official loop's)")
    parser.add_argument("--idle-ms", type=float, default=IDLE_S * 1e3, help="the _idle variants' sleep (ms)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    per_call = args.events == "per-call"
    kernel = load_submission(args.submission)[1].custom_kernel
    cuda = torch.cuda.is_available()
    flush = None
    if cuda:
        dev = torch.device("cuda", 0)
        plain = L2Flush(dev, limit=False, lines=False)
        flush = {"l2": L2Flush(dev), "l2limit": L2Flush(dev, lines=False), "l2reset": L2Flush(dev, limit=False)}
        flush = collections.defaultdict(lambda: plain, flush)
    names = args.variants.split(",")
    for name in names:
        if re.sub(r"_gpuwarm\d+$", "_gpuwarm", name.removesuffix("_hidden")) not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}; expected one of {', '.join(VARIANTS)}")
    results = []
    first = "first call us" if per_call else "first call host us"
    rest = "other calls us" if per_call else "other calls host us"
    lines = [f"| shape | variant | per call us (mean) | median | host us per call | {first} | {rest} |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for case in load_shapes(args.shapes).cases:
        peer = None
        if cuda and any(n.endswith("_peer") for n in names):
            peer = subprocess.Popen([sys.executable, "-c", PEER], stdout=subprocess.PIPE, text=True)
            peer.stdout.readline()
        try:
            summaries = run_case(names, kernel, case, args.samples, cuda, flush, per_call, args.idle_ms / 1e3)
        finally:
            if peer is not None:
                peer.kill()
                peer.wait()
        label = case.name or case.text()
        for name, r in summaries.items():
            results.append({"case": label, "variant": name, **r})
            lines.append(f"| {label} | {name} | {r['per_call_ns'] / 1e3:.1f} | {r['median_ns'] / 1e3:.1f} | "
                         f"{r['host_ns'] / 1e3:.1f} | {r['first_ns'] / 1e3:.1f} | {r['rest_ns'] / 1e3:.1f} |")
            print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timing_gap.json").write_text(json.dumps({"submission": args.submission, "cuda": cuda,
                                                          "events": args.events, "idle_ms": args.idle_ms,
                                                          "device": torch.cuda.get_device_name() if cuda else "cpu",
                                                          "results": results}, indent=2))
    (args.out / "timing_gap.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
