"""Where a timed sample's time goes outside the window: cProfile of the parent and of the worker (through
FP4BENCH_WORKER_PROFILE) over one benchmark-mode run of one case. Prints the top functions of both.

    python benchmarks/overhead_profile.py --submission wgmma_sm90 --shapes benchmarks --case 0 --runs 20
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.parent.registry import resolve  # noqa: E402
from harness.parent.runner import RunOptions, run  # noqa: E402
from harness.parent.sandbox import Sandbox  # noqa: E402
from harness.parent.settings import load_settings  # noqa: E402
from task.spec import ShapeSet, load_shapes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", required=True)
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--case", type=int, default=0)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="cumulative", help="pstats sort keys, comma-separated: one listing each")
    args = parser.parse_args()
    shapes = load_shapes(args.shapes)
    one = ShapeSet(shapes.name, (shapes.cases[args.case],))
    settings = replace(load_settings(), max_runs=args.runs, min_runs=args.runs)
    out = Path(tempfile.mkdtemp())
    os.environ["FP4BENCH_WORKER_PROFILE"] = str(out / "worker.prof")
    prof = cProfile.Profile()
    # unconfined: a sandboxed worker could not write its profile here
    rec = prof.runcall(run, resolve(args.submission), one, RunOptions("benchmark", settings=settings,
                                                                        sandbox=Sandbox("off")))
    prof.dump_stats(out / "parent.prof")
    c = rec.cases[0]
    print(f"{c.case.name}: {c.status.value}, {len(c.samples_ns)} samples, overhead {c.overhead_ms_per_sample} ms/sample")
    for key in args.sort.split(","):
        for name in ("parent", "worker"):
            print(f"\n===== {name} ({key})")
            pstats.Stats(str(out / f"{name}.prof")).sort_stats(key).print_stats(args.top)


if __name__ == "__main__":
    main()
