"""Standalone tuning bench for submissions/triton_grouped (not the harness: the lead takes final numbers with it).

    python3 submissions/triton_grouped/bench.py                    # default config, the 4 benchmark shapes
    python3 submissions/triton_grouped/bench.py --configs a,b,c    # presets from CONFIGS below
    python3 submissions/triton_grouped/bench.py --inspect --configs all   # no GPU: compile for sm_90, print
                                                                          # registers, spills, smem, occupancy

Timing: per shape, ``--inputs`` freshly generated inputs (seed + 42 i, the official draw); one sample is
harness.worker.timing.measure's official loop (L2 cleared with a buffer the size of the L2, then every input
back to back between one pair of CUDA events, divided by the count). Reports mean and median us per call and
TFLOP/s, against the bf16 roofline (989.4 TFLOP/s dense). Each config is checked against
problems.nvfp4_group_gemm.reference.ref_kernel on the first input (problems.nvfp4_group_gemm.check's tolerance) before
it is timed.
"""
import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from harness.worker.timing import L2Flush, measure
from harness.worker.task_alias import alias_task
from problems.nvfp4_group_gemm.check import compare

alias_task("nvfp4_group_gemm")  # submission.py's ``from task import``, as the worker resolves it
_spec = importlib.util.spec_from_file_location("triton_grouped_submission", HERE / "submission.py")
sub = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sub
_spec.loader.exec_module(sub)
TC, Config = sub.TileClass, sub.Config

_D = sub.DEFAULT_CONFIG
_W16 = Config((TC(64, 256), TC(128, 256), TC(128, 256)), bk=128, num_warps=16, maxnreg=128)
_W4_N64 = Config((TC(64, 64), TC(128, 64), TC(128, 64)), bk=64, num_warps=4, maxnreg=128)

#: Named presets; "default" is what custom_kernel uses for shapes no rule picks otherwise.
CONFIGS = {
    "default": sub.DEFAULT_CONFIG,
    # round 1 (bf16 decode, natural K order, joined nibbles): 8 warps, one CTA per SM; geomean 126 us
    "r1_w8_join": Config((TC(64, 128), TC(128, 128), TC(256, 128)), bk=128, join=True, perm=False, decode="bf16"),
    # round 2: K permutation (16-byte shared loads of B), low/high nibbles as two dots (no join shuffles)
    "r2_w8_bf16": Config((TC(64, 128), TC(128, 128), TC(256, 128)), bk=128, num_warps=8, decode="bf16"),
    "r2_w4_128_bf16": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=64, num_warps=4, decode="bf16"),
    # round 3: fp16 decode with one multiply per pair (f16s)
    "w8_bk128": Config((TC(64, 128), TC(128, 128), TC(256, 128)), bk=128, num_warps=8),
    "w4_128": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=64, num_warps=4),
    "w4_128_s4": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=64, num_warps=4, num_stages=4),
    "w4_128_join": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=64, num_warps=4, join=True),
    "w4_256x64": Config((TC(64, 128), TC(128, 128), TC(256, 64)), bk=64, num_warps=4),
    "w8_128_r128": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=64, num_warps=8, maxnreg=128),
    "w8_128_bk128_r128": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=128, num_warps=8, maxnreg=128),
    "w4_small": Config((TC(64, 128), TC(128, 64), TC(128, 64)), bk=64, num_warps=4),
    "w4_64": Config((TC(64, 128), TC(64, 128), TC(64, 128)), bk=128, num_warps=4),
    "w4_128_sk2": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=64, num_warps=4, split_k=2),
    "w8_128_r128_sk2": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=64, num_warps=8, maxnreg=128,
                              split_k=2),
    "w4_small_sk2": Config((TC(64, 128), TC(128, 64), TC(128, 64)), bk=64, num_warps=4, split_k=2),
    "w8_128_bk128_r128_sk2": Config((TC(64, 128), TC(128, 128), TC(128, 128)), bk=128, num_warps=8, maxnreg=128,
                                    split_k=2),
    # round 4: the Gluon kernel (wgmma of step k overlaps the decode of step k + 1); BN = 16 x warps
    "gluon": sub.GLUON_CONFIG,
    "gluon_ws": replace(sub.GLUON_CONFIG, kernel="gluon_ws"),
    "gluon_ws_sk2": replace(sub.GLUON_CONFIG, kernel="gluon_ws", split_k=2),
    "gluon_sk2": replace(sub.GLUON_CONFIG, split_k=2),
    "gluon_256": Config((TC(64, 128), TC(128, 128), TC(256, 128)), bk=128, num_warps=8, kernel="gluon"),
    "gluon_256_sk2": Config((TC(64, 128), TC(128, 128), TC(256, 128)), bk=128, num_warps=8, kernel="gluon",
                            split_k=2),
    # round 5: one CTA of 16 warps per SM with 256-row tiles of N (each A tile decoded once per 256 rows of N,
    # not 128), against two CTAs of 8 warps; and a 32-column class for remainders of M <= 32
    "w16_256": _W16,
    "w16_256_sk2": replace(_W16, split_k=2),
    "w16_256_bk64": replace(_W16, bk=64),
    "w16_256_s2": replace(_W16, num_stages=2),
    "w16_256_s4": replace(_W16, num_stages=4),
    "w16_256_c32": replace(_W16, classes=(TC(32, 256), TC(64, 256), TC(128, 256))),
    "w16_256_c32_sk2": replace(_W16, classes=(TC(32, 256), TC(64, 256), TC(128, 256)), split_k=2),
    "w8_c32": replace(_D, classes=(TC(32, 128), TC(64, 128), TC(128, 128))),
    "w8_c32_sk2": replace(_D, classes=(TC(32, 128), TC(64, 128), TC(128, 128)), split_k=2),
    # the default tiles with the 128-column class last (classes 64, 64, 128), with and without split-K
    "c64x2": replace(_D, classes=sub.SPLIT_CLASSES),
    "c64x2_sk2": replace(_D, classes=sub.SPLIT_CLASSES, split_k=2),
    "default_sk2": replace(_D, split_k=2),
    # low and high nibbles joined into one dot per K step: one wgmma wait per step instead of two, at the price
    # of 64 more byte permutes per warp and step (3.6 SASS: 453 instructions per step against 395)
    "join_r128": replace(_D, join=True),
    "auto_again": None,
    # four-warp CTAs of 64 rows of N, capped at 128 registers: up to four CTAs per SM whose phases (decode,
    # wgmma) overlap, at the price of decoding A once per 64 rows of N
    "w4_n64_r128": _W4_N64,
    "w4_n64_bk128_r128": replace(_W4_N64, bk=128),
    "w4_n64_r128_sk2": replace(_W4_N64, split_k=2),
    # K step 256 (half the barriers per FLOP), and pipeline depth, for the default tiles
    "w8_bk256_r128": replace(_D, bk=256),
    "w8_r128_s4": replace(_D, num_stages=4),
    "w8_r128_s2": replace(_D, num_stages=2),
    # the Gluon kernel with a K step of 64 capped at 128 registers: two CTAs per SM, each overlapping its own
    # wgmma with its next decode
    "gluon_bk64_r128": replace(sub.GLUON_CONFIG, bk=64, maxnreg=128),
    "gluon_bk64_r128_sk2": replace(sub.GLUON_CONFIG, bk=64, maxnreg=128, split_k=2),
    "gluon_c32_bk64_r128_sk2": replace(sub.GLUON_CONFIG, classes=(TC(32, 128), TC(64, 128), TC(128, 128)), bk=64,
                                       maxnreg=128, split_k=2),
    "auto": None,  # custom_kernel's per-shape choice (choose_config)
}

#: bf16 dense roofline per benchmark shape (us), at 989 TFLOP/s (docs/hardware.md).
ROOFLINE_US = {"g8_n4096_k7168": 60.8, "g8_n7168_k2048": 30.4, "g2_n3072_k4096": 13.0, "g2_n4096_k1536": 6.5}


def compile_sm90(cfg):
    """Compile the kernel ``cfg`` selects (tl or Gluon, ``cfg.kernel``) for sm_90 on this machine, no GPU needed,
    with group addresses as i64 arguments as the host passes them; returns Triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c0, c1, c2 = cfg.classes
    sig = {"tab_ptr": "*i64", "tile_ptr": "*i32", "ws_ptr": "*fp32", "cnt_ptr": "*i32", "acc_scale": "fp32"}
    sig.update({f"{kind}{g}": "i64" for kind in ("A", "B", "C", "SA", "SB") for g in range(sub.ARG_GROUPS)})
    cst = dict(USE_TAB=False, BM0=c0.bm, BN0=c0.bn, BM1=c1.bm, BN1=c1.bn, BM2=c2.bm, BN2=c2.bn, BK=cfg.bk,
               DECODE=cfg.decode, JOIN=cfg.join, PERM=cfg.perm, WS_STRIDE=max(c.bm * c.bn for c in cfg.classes),
               SPLIT=cfg.split_k > 1)
    options = dict(num_warps=cfg.num_warps)
    if cfg.kernel == "tl":
        fn, source = sub._group_gemm_kernel, ASTSource
        options["num_stages"] = cfg.num_stages
        if cfg.maxnreg:
            options["maxnreg"] = cfg.maxnreg
    else:
        from triton.experimental.gluon._runtime import GluonASTSource

        fn, source = sub._gluon_group_gemm_kernel, GluonASTSource
        cst["WS"] = cfg.kernel == "gluon_ws"
    sig.update({k: "constexpr" for k in cst})
    return triton.compile(source(fn, sig, cst), target=GPUTarget("cuda", 90, 32), options=options)


def inspect(names):
    """Compile each config for sm_90 on this machine (no GPU needed) and print its resources."""
    import triton

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    for name in names:
        cfg = CONFIGS[name] or sub.DEFAULT_CONFIG
        cc = compile_sm90(cfg)
        path = Path("/tmp") / f"tg_{name}.cubin"
        path.write_bytes(cc.asm["cubin"])
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(path)], capture_output=True,
                               text=True).stdout
        regs, stack = map(int, re.search(r"REG:(\d+) STACK:(\d+)", usage).groups())
        threads = 32 * cc.metadata.num_warps
        occ = min(65536 // (((regs + 7) // 8 * 8) * threads), 233472 // (cc.metadata.shared + 1024))
        waits = re.findall(r"pendings = (\d+)", cc.asm["ttgir"])
        print(f"{triton.__version__} {name:16s} regs {regs:3d} stack {stack:4d} smem {cc.metadata.shared:6d} "
              f"CTAs/SM {occ} wgmma waits {waits}", flush=True)


def load_cases(shape_set="benchmarks"):
    import yaml

    doc = yaml.safe_load((ROOT / "configs" / "shapes" / f"{shape_set}.yml").read_text())
    return doc["cases"]


def check(out, ref) -> int:
    """Elements of all groups outside the official tolerance (problems.nvfp4_group_gemm.check.compare)."""
    return sum(compare(o, r).mismatches for o, r in zip(out, ref))


def use_config(cfg, inputs):
    """Make custom_kernel (its fast host path included) run ``cfg`` for these inputs' sizes; None: its own choice."""
    sizes = tuple(tuple(s) for s in inputs[0][3])
    num_sms = torch.cuda.get_device_properties(inputs[0][0][0][0].device).multi_processor_count
    sub._FAST.clear()
    sub._CONFIG_BY_SIZES[(sizes, num_sms)] = cfg or sub.choose_config(sizes, num_sms)


def run_config(cfg, d):
    return sub.custom_kernel(d)


#: ``--gpu-only``: GPU clock cycles the calls are queued behind (about 20 ms), so the window holds the kernels alone.
GPU_ONLY_SPIN_CYCLES = 40_000_000


def time_config(cfg, inputs, flush, samples, gpu_only=False):
    """us per call, one figure per sample. ``gpu_only``: the calls are queued behind a GPU spin, so the window
    holds the kernels alone, not the host time that launches them."""
    fn = lambda d: run_config(cfg, d)  # noqa: E731
    for d in inputs:  # warm-up: compile, plans, tables
        fn(d)
    runs = measure(fn, inputs, samples, flush=flush, queue_behind_cycles=GPU_ONLY_SPIN_CYCLES if gpu_only else 0)
    return [s.per_call_ns / 1e3 for s in runs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="default")
    ap.add_argument("--inspect", action="store_true")
    ap.add_argument("--inputs", type=int, default=15)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--shapes", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--out", default="")
    ap.add_argument("--gpu-only", action="store_true", help="time the kernels alone (calls queued behind a sleep)")
    ap.add_argument("--shape-set", default="benchmarks", help="a file of configs/shapes (tests: check only)")
    args = ap.parse_args()
    names = list(CONFIGS) if args.configs == "all" else args.configs.split(",")
    if args.inspect:
        inspect(names)
        return
    from problems.nvfp4_group_gemm.inputs import generate_input
    from problems.nvfp4_group_gemm.reference import ref_kernel

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    flush = L2Flush(dev, limit=False, lines=False)
    print(f"{props.name}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size} B; torch {torch.__version__}, "
          f"triton {sub.triton.__version__}", flush=True)
    results = {}
    cases = [c for c in load_cases(args.shape_set) if not args.shapes or c["name"] in args.shapes.split(",")]
    for case in cases:
        m, n, k, g, seed = case["m"], case["n"], case["k"], case["g"], case["seed"]
        case.setdefault("name", f"m{'_'.join(map(str, m))}_n{n[0]}_k{k[0]}")
        inputs = [generate_input(m, n, k, g, seed + 42 * i) for i in range(args.inputs)]
        ref = ref_kernel(inputs[0])
        flops = sum(2 * a * b * c for a, b, c in zip(m, n, k))
        for name in names:
            cfg = CONFIGS[name]
            for _, _, c in inputs[0][0]:
                c.fill_(float("nan"))
            try:
                use_config(cfg, inputs)
                bad = check(run_config(cfg, inputs[0]), ref)
                times = time_config(cfg, inputs, flush, args.samples, args.gpu_only)
            except Exception as exc:  # a config that fails to compile or run is reported, not fatal
                print(f"{case['name']:16s} {name:16s} FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            mean, med = statistics.fmean(times), statistics.median(times)
            rec = dict(shape=case["name"], config=name, mismatches=bad, mean_us=mean, median_us=med,
                       min_us=min(times), tflops=flops / mean / 1e6, roofline_us=ROOFLINE_US.get(case["name"]))
            results.setdefault(name, []).append(rec)
            print(f"{case['name']:16s} {name:16s} bad {bad:6d} mean {mean:8.1f} us  median {med:8.1f}  min "
                  f"{min(times):8.1f}  {rec['tflops']:6.1f} TFLOP/s  roofline {rec['roofline_us']} us", flush=True)
        del inputs, ref
        torch.cuda.empty_cache()
    print("\nsummary (geomean of mean us over shapes measured)")
    for name, recs in results.items():
        gm = math.exp(statistics.fmean(math.log(r["mean_us"]) for r in recs))
        per = "  ".join(f"{r['mean_us']:7.1f}" for r in recs)
        print(f"{name:16s} {per}   geomean {gm:7.1f} us  mismatches {sum(r['mismatches'] for r in recs)}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
