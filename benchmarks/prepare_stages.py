"""Where the parent's prepare() of one sample goes, stage by stage (each stage synchronised, so the sum is a bit
above prepare's own wall): draw, plain scales aside, the reference, its copies, the copy into the worker's buffer.
Writes one line per stage (mean ms over --reps samples after two warm-ups).

    python benchmarks/prepare_stages.py --shapes benchmarks --case 0 [--device cuda]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.parent.samples import Sample, SharedSet  # noqa: E402
from task.arena import Layout, Views, draw_official, reference_inputs  # noqa: E402
from task.reference import ReferencePlan, ref_kernel, ref_kernel_many  # noqa: E402
from task.spec import load_shapes  # noqa: E402


def _plan(keep: dict, inputs) -> ReferencePlan:
    """The plan built on the first rep's reference inputs (views of the same buffers every rep), kept."""
    if "plan" not in keep:
        keep["plan"] = ReferencePlan(inputs)
    return keep["plan"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="benchmarks")
    p.add_argument("--case", type=int, default=0)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    case = load_shapes(args.shapes).cases[args.case]
    shared = SharedSet(dev)
    shared.grow(Layout.of(case, 15))
    sample = Sample(case, 15, "official", dev, shared)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    totals: dict[str, float] = {}
    keep: dict = {}  # the plain scales drawn into the same tensors every rep, and the plan built once over them
    for rep in range(args.reps + 2):
        sync()
        t0 = time.perf_counter()
        sample.prepare([rep] * 15, False)
        sync()
        marks = [("prepare (whole)", t0)]
        private = Views(sample.layout, sample._private, shared.buffers["host"].tensor, sample._expected)
        gen = torch.Generator(device=dev).manual_seed(rep)
        stages = [("draw_official", lambda: draw_official(private, gen))]
        state = {}
        t = time.perf_counter()
        times = {"prepare (whole)": (t - t0) * 1e3}
        state["plain"] = keep["plain"] = draw_official(private, gen, keep.get("plain"))
        sync()
        times[stages[0][0]] = (time.perf_counter() - t) * 1e3
        for name, step in (("copy_plain aside", lambda: sample._copy_plain_aside(private, state["plain"])),
                           ("reference_inputs", lambda: state.update(ref=reference_inputs(private, state["plain"]))),
                           ("ref_kernel_many (15)", lambda: state.update(out=ref_kernel_many(state["ref"]))),
                           ("ReferencePlan.run (15)", lambda: _plan(keep, state["ref"]).run()),
                           ("ref_kernel x1", lambda: ref_kernel(state["ref"][0])),
                           ("copy outputs", lambda: torch._foreach_copy_(
                               [private.out[g][j] for j, o in enumerate(state["out"]) for g in range(len(o))],
                               [x for o in state["out"] for x in o])),
                           ("copy to worker buffer", lambda: shared.buffers["device"].tensor[
                               :sample.layout.device_bytes].copy_(sample._private))):
            sync()
            t = time.perf_counter()
            step()
            sync()
            times[name] = (time.perf_counter() - t) * 1e3
        if rep >= 2:
            for k, v in times.items():
                totals[k] = totals.get(k, 0.0) + v / args.reps
        del marks
    print(f"{case.name} on {dev}: mean ms per sample over {args.reps}")
    for k, v in totals.items():
        print(f"  {k:24s} {v:8.2f}")


if __name__ == "__main__":
    main()
