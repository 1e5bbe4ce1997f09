"""How fast is the exact reference? (issue 15, "Fast samples")

Per shape: 15 inputs drawn with problems.nvfp4_group_gemm.inputs.generate_many (the official calls of one sample: seed +
42 * (1 + j)), then, interleaved per repeat (one repeat of every path, then the next), each path over all 15 inputs
between one pair of CUDA events, L2 cleared first (a monotonic clock on a CPU):

    triton   ref_kernel(decode="triton"): the Triton decode with the folded scale statistics, then the GEMMs
    torch    ref_kernel(decode="torch"): the torch table decode (int32 index per byte, gathers, amax)
    fp64     ref_kernel_fp64: the ground truth

The window holds the host too: ref_kernel syncs once per input to read its bounds, so the GPU idles while the host
queues the next input. ``--profile`` adds, per path, one more pass under torch.profiler: the sum of the device time
of every kernel and copy (the "GPU time" the issue's 20 ms and <= 6 ms figures count) and the top operators.
Every output of the fast paths is checked bit for bit against ref_kernel_fp64 (``exact`` per path).
``--sweep`` also times the Triton decode alone (problems.nvfp4_group_gemm.reference_triton.decode_operands on every
operand of the first shape's 15 inputs) for a few tiles.

    python benchmarks/reference_speed.py --out reference_speed.json                  # benchmarks, all paths
    python benchmarks/reference_speed.py --shapes tests --paths triton,fp64 --profile --sweep --out r.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from problems.nvfp4_group_gemm import input_t  # noqa: E402
from problems.nvfp4_group_gemm.inputs import generate_many  # noqa: E402
from problems.nvfp4_group_gemm.reference import ref_kernel, ref_kernel_fp64  # noqa: E402
from problems.nvfp4_group_gemm.reference_bound import _key_table  # noqa: E402
from problems.nvfp4_group_gemm.reference_paths import _triton_decoder  # noqa: E402
from problems.nvfp4_group_gemm.reference_scales import _scale_bytes_on  # noqa: E402
from problems.nvfp4_group_gemm.spec import Case, load_shapes  # noqa: E402

#: Calls per sample in the official timing loop, and its seed step between them.
CALLS, SEED_STEP = 15, 42
PATHS: dict[str, Callable[[input_t], list[torch.Tensor]]] = {
    "triton": lambda x: ref_kernel(x, decode="triton"),
    "torch": lambda x: ref_kernel(x, decode="torch"),
    "fp64": ref_kernel_fp64,
}
#: (rows per program, packed bytes per step, warps) tried by --sweep.
SWEEP_TILES = [(16, 128, 4), (8, 128, 4), (32, 128, 4), (16, 256, 4), (32, 256, 8), (16, 64, 2), (64, 128, 8)]


class Clock:
    """A window over queued GPU work (CUDA events, L2 cleared before it) or a monotonic clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            size = torch.cuda.get_device_properties(device).L2_cache_size
            self.flush = torch.empty(size, dtype=torch.uint8, device=device)

    def time_ms(self, fn: Callable[[], object]) -> tuple[float, float]:
        """(window ms, host wall ms) of one ``fn()``."""
        if not self.cuda:
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1e3
            return ms, ms
        torch.cuda.synchronize()
        self.flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end), (time.perf_counter() - t0) * 1e3


def device_profile(fn: Callable[[], object], top: int = 8) -> dict:
    """Sum of device time over every kernel, copy and set of one ``fn()`` (torch.profiler), in ms, and the
    ``top`` operators by their own device time."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    total_us = sum(e.self_device_time_total for e in events)
    return {"device_ms": total_us / 1e3,
            "top_ops": [{"name": e.key, "calls": e.count, "device_ms": e.self_device_time_total / 1e3}
                        for e in events[:top]]}


def _same_bits(got: list[torch.Tensor], expected: list[torch.Tensor]) -> bool:
    return len(got) == len(expected) and all(
        g.shape == e.shape and torch.equal(g.view(torch.int16), e.view(torch.int16)) for g, e in zip(got, expected))


def measure_case(case: Case, paths: list[str], repeats: int, data: str, device: torch.device, clock: Clock,
                 profile: bool) -> list[dict]:
    """One row per path for ``case``: window and wall ms of each repeat over CALLS inputs, their means, whether
    every output equals ref_kernel_fp64's bits, and with ``profile`` the device-time breakdown."""
    seeds = [case.seed + SEED_STEP * (1 + j) for j in range(CALLS)]
    inputs = generate_many(case.m, case.n, case.k, case.g, seeds, data, device)
    expected = [ref_kernel_fp64(x) for x in inputs]
    rows = {}
    for name in paths:  # warm-up (Triton compile, cuBLAS handles) and the bit check
        outputs = [PATHS[name](x) for x in inputs]
        rows[name] = {"shape": case.name or case.text(), "spec": case.text(), "path": name, "calls": CALLS,
                      "exact": all(_same_bits(o, e) for o, e in zip(outputs, expected)),
                      "window_ms": [], "wall_ms": []}
    del outputs
    for _ in range(repeats):
        for name in paths:
            window, wall = clock.time_ms(lambda: [PATHS[name](x) for x in inputs])
            rows[name]["window_ms"].append(window)
            rows[name]["wall_ms"].append(wall)
    for row in rows.values():
        row["mean_window_ms"] = statistics.fmean(row["window_ms"])
        row["mean_wall_ms"] = statistics.fmean(row["wall_ms"])
        if profile and clock.cuda:
            row.update(device_profile(lambda: [PATHS[row["path"]](x) for x in inputs]))
    return list(rows.values())


def sweep_decode(case: Case, repeats: int, data: str, device: torch.device, clock: Clock) -> list[dict]:
    """The Triton decode alone over every operand of CALLS inputs of ``case``, one launch per input, per tile of
    SWEEP_TILES: mean window ms and the bytes moved (packed and scales read, bf16 written) per ms."""
    decoder = _triton_decoder()
    seeds = [case.seed + SEED_STEP * (1 + j) for j in range(CALLS)]
    inputs = generate_many(case.m, case.n, case.k, case.g, seeds, data, device)
    operands = []
    for x in inputs:
        codes = _scale_bytes_on(x, "plain", device)
        packed = [p[:, :, 0].view(torch.uint8) for a, b, _ in x[0] for p in (a, b)]
        operands.append(list(zip(packed, codes)))
    moved = sum(p.numel() * 5 + c.numel() for ops in operands for p, c in ops)
    keys = _key_table(device)
    rows = []
    for rows_per_program, step, warps in SWEEP_TILES:
        def run():
            return [decoder.decode_operands(ops, keys, rows_per_program, step, warps) for ops in operands]
        run()
        times = [clock.time_ms(run)[0] for _ in range(repeats)]
        mean = statistics.fmean(times)
        rows.append({"shape": case.name or case.text(), "block_rows": rows_per_program, "block_bytes": step,
                     "num_warps": warps, "window_ms": times, "mean_window_ms": mean,
                     "gb_per_s": moved / mean / 1e6})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="benchmarks", help="shape set name, YAML/text file or one inline case")
    p.add_argument("--paths", default=None, help="comma-separated of triton,torch,fp64 (default: all that run here)")
    p.add_argument("--data", default="official", choices=["official", "full-range"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="device time per path from torch.profiler (CUDA)")
    p.add_argument("--sweep", action="store_true", help="time the Triton decode alone for SWEEP_TILES (CUDA)")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    runnable = [n for n in PATHS if n != "triton" or (device.type == "cuda" and _triton_decoder() is not None)]
    paths = args.paths.split(",") if args.paths else runnable
    bad = [n for n in paths if n not in runnable]
    if bad:
        p.error(f"--paths: expected some of {','.join(runnable)} here, got {','.join(bad)}")
    if args.repeats < 1:
        p.error(f"--repeats: expected at least 1, got {args.repeats}")
    if args.sweep and "triton" not in runnable:
        p.error("--sweep needs CUDA and triton")
    cases = load_shapes(args.shapes).cases
    clock = Clock(device)
    results = [row for case in cases
               for row in measure_case(case, paths, args.repeats, args.data, device, clock, args.profile)]
    doc = {"device": torch.cuda.get_device_name(device) if clock.cuda else platform.processor() or "cpu",
           "cuda": clock.cuda, "torch": torch.__version__, "triton": _triton_version(), "data": args.data,
           "repeats": args.repeats, "results": results}
    if args.sweep:
        doc["sweep"] = sweep_decode(cases[0], args.repeats, args.data, device, clock)
    args.out.write_text(json.dumps(doc, indent=1))
    for row in results:
        extra = f"  device {row['device_ms']:.2f} ms" if "device_ms" in row else ""
        print(f"{row['shape']:>16} {row['path']:>6}: window {row['mean_window_ms']:9.2f} ms  wall "
              f"{row['mean_wall_ms']:9.2f} ms{extra}  exact {row['exact']}")
    for row in doc.get("sweep", []):
        print(f"decode {row['block_rows']:>3} x {row['block_bytes']:>3} B, {row['num_warps']} warps: "
              f"{row['mean_window_ms']:.3f} ms, {row['gb_per_s']:.0f} GB/s")
    return 0 if all(r["exact"] for r in results) else 1


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


if __name__ == "__main__":
    sys.exit(main())
