"""Standalone check and timing bench for submissions/wgmma_sm90 on a Hopper GPU (final numbers: the harness).

    python3 submissions/wgmma_sm90/bench.py --check            # every tests.yml and benchmarks.yml shape, both
                                                               # data modes, against problems.nvfp4_group_gemm.reference
    python3 submissions/wgmma_sm90/bench.py --time --out DIR   # benchmark shapes: kernels alone and official-style
    python3 submissions/wgmma_sm90/bench.py --inspect          # no GPU: nvcc + ptxas report (registers, spills)
    WGMMA_SM90_NVCC_EXTRA=-DWG_TRACE python3 .../bench.py --trace   # per-CTA phase times of one call

Timing, per benchmark shape, over 15 inputs drawn as the official loop draws them (seed + 42 i), through
harness.worker.timing.measure:
- ``alone``: the 15 calls queued behind a GPU spin, so host time stays out of the window (the kernels' time);
- ``official``: L2 cleared, then the 15 calls back to back between one pair of CUDA events (host time in).
Figures: mean us per call over ``--samples`` samples, TFLOP/s, percent of the bf16 roofline (989.4 TFLOP/s).
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

from harness.worker.task_alias import alias_task  # noqa: E402

alias_task("nvfp4_group_gemm")  # the variant's ``task`` imports, as the worker resolves them
import wgmma_sm90_host as host  # noqa: E402
from harness.worker.timing import L2Flush, measure  # noqa: E402
from problems.nvfp4_group_gemm.check import check_outputs  # noqa: E402
from problems.nvfp4_group_gemm.cost import flops  # noqa: E402
from problems.nvfp4_group_gemm.inputs import generate_input  # noqa: E402
from problems.nvfp4_group_gemm.reference import ref_kernel  # noqa: E402
from problems.nvfp4_group_gemm.spec import load_shapes  # noqa: E402

BF16_DENSE_TFLOPS = 989.4
#: ``alone``: GPU clock cycles the calls are queued behind (about 20 ms), longer than the host takes to queue them.
ALONE_SPIN_CYCLES = 40_000_000


def _name(case) -> str:
    return case.name or case.text()


def _split(text: str) -> host.Split:
    """``PARTS[:FULL]`` -> host.Split (argparse type)."""
    parts, _, full = text.partition(":")
    try:
        return host.Split(int(parts), int(full or 0))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PARTS or PARTS:FULL (integers), got {text!r}") from None


def _sub():
    import submission  # noqa: PLC0415  (this folder is first on sys.path)
    return submission


def check(data_modes=("official", "full-range")) -> list[dict]:
    """Run every tests.yml and benchmarks.yml case in each data mode; returns one record per case."""
    sub = _sub()
    rows = []
    for set_name in ("tests", "benchmarks"):
        for case in load_shapes(set_name).cases:
            for mode in data_modes:
                data = generate_input(case.m, case.n, case.k, case.g, seed=case.seed, data=mode, device="cuda")
                got = [c.clone() for c in sub.custom_kernel(data)]
                torch.cuda.synchronize()
                err = check_outputs(got, ref_kernel(data))
                rows.append({"set": set_name, "case": _name(case), "data": mode, "ok": err is None, "error": err})
                print(f"{set_name:10s} {_name(case):28s} {mode:10s} {'PASS' if err is None else 'FAIL ' + err}",
                      flush=True)
    return rows


def _l2_flush() -> L2Flush:
    """The official evaluator's L2 clear: a buffer the size of the GPU's L2, zeroed."""
    return L2Flush(torch.device("cuda", 0), limit=False, lines=False)


def _benchmark_inputs():
    """Each benchmarks.yml case with the 15 inputs the official loop draws (seed + 42 i), after one untimed call
    on the first (build, load, plan)."""
    sub = _sub()
    for case in load_shapes("benchmarks").cases:
        inputs = [generate_input(case.m, case.n, case.k, case.g, seed=case.seed + 42 * i, device="cuda")
                  for i in range(15)]
        sub.custom_kernel(inputs[0])
        yield case, inputs


def time_benchmarks(samples: int) -> list[dict]:
    """Mean us per call, alone and official-style, for each benchmarks.yml case."""
    sub = _sub()
    flush = _l2_flush()
    rows = []
    for case, inputs in _benchmark_inputs():
        plan = sub._PLANS[tuple(case.problem_sizes)]
        row = {"case": _name(case), "split": list(plan.split), "paired": plan.paired, "predecode": plan.predecode,
               "s8": plan.s8,
               "ws": plan.ws, "pdl": plan.pdl, "pre_pdl": plan.pre_pdl}
        for mode in ("alone", "official"):
            alone = mode == "alone"
            runs = measure(sub.custom_kernel, inputs, samples, flush=None if alone else flush,
                           queue_behind_cycles=ALONE_SPIN_CYCLES if alone else 0)
            ts = [r.per_call_ns / 1e3 for r in runs]
            us = statistics.mean(ts)
            tflops = flops(case) / us / 1e6
            row[mode] = {"mean_us": round(us, 2), "median_us": round(statistics.median(ts), 2),
                         "tflops": round(tflops, 1), "pct_bf16": round(100 * tflops / BF16_DENSE_TFLOPS, 1),
                         "host_us": round(statistics.mean(r.host_ns / r.calls / 1e3 for r in runs), 2)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    geo = {mode: round(statistics.geometric_mean([r[mode]["mean_us"] for r in rows]), 2)
           for mode in ("alone", "official")}
    print("geomean us", json.dumps(geo), flush=True)
    return rows


def host_parts(reps: int = 300) -> list[dict]:
    """Host microseconds per call of each piece of custom_kernel's fast path, per benchmarks.yml case (the GPU is
    synchronised every 50 calls so the launch queue never fills)."""
    import time  # noqa: PLC0415
    sub = _sub()
    rows = []
    for case in load_shapes("benchmarks").cases:
        data = generate_input(case.m, case.n, case.k, case.g, seed=case.seed, device="cuda")
        sub.custom_kernel(data)
        abc, _, sf_r, sizes = data
        plan = sub._PLANS[tuple(sizes)]
        ptrs = [t.data_ptr() for (a, b, c), (sa, sb) in zip(abc, sf_r) for t in (a, b, c, sa, sb)]
        parts = {
            "lookup": lambda: sub._PLANS.get(tuple(sizes)),
            "ptrs": lambda: [t.data_ptr() for (a, b, c), (sa, sb) in zip(abc, sf_r) for t in (a, b, c, sa, sb)],
            "layout": lambda: host.layout_key(abc, sf_r),
            "launch": lambda: plan.launch(ptrs),
            "cpp_call": (lambda: plan.fast.call(abc, sf_r)) if plan.fast else (lambda: 0),
            "cpp_run": (lambda: plan.fast.run(abc, sf_r)) if plan.fast else (lambda: 0),
            "call": lambda: sub.custom_kernel(data),
        }
        row = {"case": _name(case)}
        for name, fn in parts.items():
            best = float("inf")
            for _ in range(reps // 50):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(50):
                    fn()
                best = min(best, (time.perf_counter() - t0) / 50 * 1e6)
            row[name] = round(best, 2)
        torch.cuda.synchronize()
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def trace() -> list[dict]:
    """Per benchmark shape, what the CTAs of one call did (a -DWG_TRACE build: set WGMMA_SM90_NVCC_EXTRA): the
    15th of 15 back-to-back calls after an L2 flush, and one call alone after a flush. Per call: CTAs, most CTAs on
    one SM, the kernel's span (first entry to last store), the spread of entry times, and mean us of each CTA's
    prologue (entry to main loop), main loop (and per K step) and epilogue (thread 0's: a paired CTA's first
    pipeline)."""
    import ctypes  # noqa: PLC0415
    if "-DWG_TRACE" not in host.EXTRA_FLAGS:
        raise SystemExit("bench.py --trace needs WGMMA_SM90_NVCC_EXTRA=-DWG_TRACE")
    sub = _sub()
    flush = _l2_flush()
    rows = []
    for case, inputs in _benchmark_inputs():
        plan = sub._PLANS[tuple(case.problem_sizes)]
        steps = [(s + 1) // 2 if plan.paired else s for s in plan.tiles.reshape(-1, 8)[:, 5].tolist()]
        drv = sub._DRIVER
        ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
        drv.check(drv.lib.cuModuleGetGlobal_v2(ctypes.byref(ptr), ctypes.byref(size), drv.module, b"wg_trace"),
                  "cuModuleGetGlobal")
        row = {"case": _name(case), "split": list(plan.split), "paired": plan.paired, "predecode": plan.predecode,
               "s8": plan.s8,
               "ws": plan.ws, "pdl": plan.pdl}
        for mode in ("loop15", "single"):
            torch.cuda.synchronize()
            flush()
            for d in (inputs if mode == "loop15" else inputs[:1]):
                sub.custom_kernel(d)
            torch.cuda.synchronize()
            buf = (ctypes.c_uint64 * (size.value // 8))()
            drv.check(drv.lib.cuMemcpyDtoH_v2(buf, ptr, size), "cuMemcpyDtoH")
            n = plan.n_tiles
            t = [buf[5 * i:5 * i + 5] for i in range(n)]
            end = [r[3] or r[2] for r in t]
            us = lambda xs: round(statistics.mean(xs) / 1000, 2)  # noqa: E731
            row[mode] = {
                "ctas": n, "max_ctas_per_sm": max(collections.Counter(r[4] for r in t).values()),
                "span_us": round((max(end) - min(r[0] for r in t)) / 1000, 2),
                "entry_spread_us": round((max(r[0] for r in t) - min(r[0] for r in t)) / 1000, 2),
                "prologue_us": us([r[1] - r[0] for r in t]), "loop_us": us([r[2] - r[1] for r in t]),
                "step_ns": round(statistics.mean((r[2] - r[1]) / s for r, s in zip(t, steps)), 1),
                # Split-K CTAs that leave the storing to another keep an older launch's store mark.
                "epilogue_us": us([r[3] - r[2] for r in t if r[3] > r[2]]),
            }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--inspect", action="store_true")
    ap.add_argument("--host", action="store_true", help="host us per call of each fast-path piece (best of batches)")
    ap.add_argument("--trace", action="store_true", help="per-CTA phase times (a -DWG_TRACE build)")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--split", type=_split, metavar="PARTS[:FULL]",
                    help="force split-K: the FULL (default 0) most expensive tiles whole, the rest in PARTS parts; "
                         "1 for none (default: choose_split's rule)")
    ap.add_argument("--paired", type=int, choices=(0, 1), help="force paired CTAs on or off (default: the rule)")
    ap.add_argument("--s8", type=int, choices=(0, 1),
                    help="force the int8 path on or off (default: choose_s8's rule)")
    ap.add_argument("--predecode", type=int, choices=(0, 1),
                    help="force the A pre-pass on or off (default: choose_predecode's rule)")
    ap.add_argument("--ws", type=int, choices=(0, 1),
                    help="force the warp-specialised loop on or off (default: choose_ws's rule, off)")
    ap.add_argument("--pdl", type=int, choices=(0, 1),
                    help="force programmatic dependent launch on or off (default: choose_pdl's rule)")
    ap.add_argument("--pre-pdl", type=int, choices=(0, 1),
                    help="force the int8 pre-pass under PDL on or off (default: choose_pre_pdl's rule)")
    ap.add_argument("--classes", help="tile widths to cover M with, e.g. 64 or 64,128 (default: host.BM_CLASSES)")
    ap.add_argument("--profile-case", type=int, help="run benchmarks.yml case N three times (for ncu), nothing else")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = {}
    host.SPLIT_OVERRIDE = args.split
    host.PAIRED_OVERRIDE = None if args.paired is None else bool(args.paired)
    host.PREDECODE_OVERRIDE = None if args.predecode is None else bool(args.predecode)
    host.S8_OVERRIDE = None if args.s8 is None else bool(args.s8)
    host.WS_OVERRIDE = None if args.ws is None else bool(args.ws)
    host.PDL_OVERRIDE = None if args.pdl is None else bool(args.pdl)
    host.PRE_PDL_OVERRIDE = None if args.pre_pdl is None else bool(args.pre_pdl)
    if args.classes:
        host.BM_CLASSES = tuple(sorted(int(c) for c in args.classes.split(",")))
        host.cover_m.cache_clear()
    if args.profile_case is not None:
        case = load_shapes("benchmarks").cases[args.profile_case]
        data = generate_input(case.m, case.n, case.k, case.g, seed=case.seed, device="cuda")
        for _ in range(3):
            _sub().custom_kernel(data)
        torch.cuda.synchronize()
        return
    if args.inspect:
        host.build_cubin(verbose=True)
    if args.check:
        result["check"] = check()
    if args.time:
        result["time"] = time_benchmarks(args.samples)
    if args.host:
        result["host"] = host_parts()
    if args.trace:
        result["trace"] = trace()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "wgmma_sm90_bench.json").write_text(json.dumps(result, indent=1))
    if args.check and not all(r["ok"] for r in result["check"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
