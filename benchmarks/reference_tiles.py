"""The fused Triton reference GEMM's tile, swept (issue 15: the exact reference is the largest GPU piece of a
sample's pause). Per benchmark shape, 15 inputs drawn as one sample's (task.inputs.generate_many), and per tile
(BLOCK_M rows of A, BLOCK_N rows of B, warps, stages of task.reference_triton) its ``grouped_gemm`` (the
statistics and GEMM launches) over the 15 inputs' groups, operands already on the device, between one pair of
CUDA events (L2 cleared first): the median of ``--reps``, the tiles taken in turn within each repeat. Every
tile's outputs are compared bit for bit with the first tile's (the current one). Prints one line per (shape,
tile) and writes JSON.

    python benchmarks/reference_tiles.py --tiles 64x128x4x3,64x128x8x3 --out tiles.json

H200, 2026-12-02, the tiles one after another (not yet interleaved), 5 repeats, ms: the current 64x128x4x3
11.14 / 8.85 / 2.66 / 2.10, 64x128x8x3 8.61 / 8.06 / 2.70 / 1.86, 128x128x8x4 8.87 / 8.45 / 2.84 / 1.95, the same
bits everywhere. The current tile ran first on every shape, so a drift may explain part of it: not adopted until
an interleaved run confirms it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness.worker.timing import L2Flush  # noqa: E402
from task import reference_triton as rt  # noqa: E402
from task.inputs import generate_many  # noqa: E402
from task.reference import _key_table, _triton_groups  # noqa: E402
from task.spec import load_shapes  # noqa: E402


def _tile(text: str) -> tuple[int, int, int, int]:
    m, n, warps, stages = (int(x) for x in text.split("x"))
    return m, n, warps, stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--tiles", default="64x128x4x3,128x128x8x3,128x128x4x3,64x256x8x3")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tiles = [_tile(t) for t in args.tiles.split(",")]
    flush = L2Flush(torch.device("cuda", 0), limit=False, lines=False)
    rows = []
    for case in load_shapes(args.shapes).cases:
        inputs = generate_many(case.m, case.n, case.k, case.g, [case.seed + 42 * (j + 1) for j in range(15)])
        dev = torch.device("cuda", 0)
        groups = [g for x in inputs for g in _triton_groups(x, "plain", dev)[1]]
        keys = _key_table(dev)
        first, same, times = None, {}, {tile: [] for tile in tiles}
        for tile in tiles:  # compile every tile and compare its bits first
            rt.BLOCK_M, rt.BLOCK_N, rt.GEMM_WARPS, rt.GEMM_STAGES = tile
            outs, _stats = rt.grouped_gemm(groups, keys)
            flat = torch.cat([o.flatten() for o in outs])
            first = flat if first is None else first
            same[tile] = bool(torch.equal(flat.view(torch.int16), first.view(torch.int16)))
        for _ in range(args.reps):  # interleaved, so a drift of the GPU's clocks falls on every tile alike
            for tile in tiles:
                rt.BLOCK_M, rt.BLOCK_N, rt.GEMM_WARPS, rt.GEMM_STAGES = tile
                torch.cuda.synchronize()
                flush()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                rt.grouped_gemm(groups, keys)
                end.record()
                torch.cuda.synchronize()
                times[tile].append(start.elapsed_time(end))
        for tile in tiles:
            rows.append({"case": case.name, "tile": "x".join(map(str, tile)), "ms": statistics.median(times[tile]),
                         "same_bits": same[tile]})
            print(f"{case.name} tile {rows[-1]['tile']}: {rows[-1]['ms']:.2f} ms, same bits {same[tile]}", flush=True)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
