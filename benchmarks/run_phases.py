"""Where a whole `fp4bench run` goes, phase by phase: the CLI itself, in this process, with its phases wrapped in
clocks (the harness is unchanged; the worker is started, confined and timed exactly as in `fp4bench run`).
Seconds of wall time per phase, from the interpreter's start:

    import      torch and the harness imported (the CLI module)
    prepare     shapes, settings and submissions read and checked (run_setup.prepare; on CUDA it sizes the
                inputs against the GPU's memory)
    store       the results store opened
    sandbox     the worker's confinement planned and checked
    meanwhile   the parent's work while the worker starts (runner.while_workers_start: the reference's
                compiles, a timed run's scipy.stats import)
    worker      what is left of waiting for the worker to start and import the submission (Session.load; the
                worker is started just before the buffers are reserved)
    reserve     the sample buffers allocated (Session.reserve)
    check       each shape's correctness call (the submission's first call compiles here)
    warmup      warm-up samples
    samples     timed samples (windows and pauses)
    kernels     the CUPTI kernel-time pass (CUDA)
    release     the worker stopped and the buffers freed
    report      tables printed, --json and the store written (run_compare._show)
    other       the rest of the wall (argument parsing, the POPCORN stream, process exit not included)

    python benchmarks/run_phases.py --out phases.json -- --submission wgmma_sm90 --shapes benchmarks --mode leaderboard

Everything after ``--`` goes to `fp4bench run` unchanged.
"""
from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from clocks import clocked  # noqa: E402
from harness.cli import commands, outputs, run_compare, run_setup  # noqa: E402
from harness.parent import case_runner, runner, session  # noqa: E402

IMPORTED = time.perf_counter()
PHASES = ("import", "prepare", "store", "sandbox", "meanwhile", "worker", "reserve", "check", "warmup", "samples",
          "kernels", "release", "report")
CLOCKS: dict[str, list[float]] = defaultdict(list)


def _clocked(name: str, fn):
    return clocked(name, fn, CLOCKS)


def _wrap() -> None:
    """Clocks on the phases (module attributes looked up at call time, so wrapping them here is enough)."""
    run_setup.prepare = _clocked("prepare", run_setup.prepare)
    outputs.open_store = _clocked("store", outputs.open_store)
    run_setup.sandbox_request = _clocked("sandbox", run_setup.sandbox_request)
    run_compare._show = _clocked("report", run_compare._show)
    runner.run = _clocked("run", runner.run)
    runner.while_workers_start = _clocked("meanwhile", runner.while_workers_start)
    session.Session.load = _clocked("worker", session.Session.load)
    session.Session.reserve = _clocked("reserve", session.Session.reserve)
    session.Session.release = _clocked("release", session.Session.release)
    for name, method in (("check", "correctness"), ("warmup", "warmup"), ("samples", "sample"),
                         ("kernels", "kernel_time")):
        setattr(case_runner.CaseRunner, method, _clocked(name, getattr(case_runner.CaseRunner, method)))


def phases(wall_s: float) -> dict:
    """{phase: {"s": total seconds, "n": times entered}} for PHASES, "other" (the wall not in any phase), "wall"
    and "run" (runner.run: the span the --json's wall_s covers, made of worker .. release). Session.load is
    entered before every request but returns at once while a worker is up, so its time is the worker's start."""
    out = {"import": {"s": IMPORTED - STARTED, "n": 1}}
    for name in PHASES[1:]:
        times = CLOCKS.get(name, [])
        out[name] = {"s": sum(times), "n": len(times)}
    inside = sum(v["s"] for k, v in out.items())
    out["other"] = {"s": wall_s - inside, "n": 1}
    out["wall"] = {"s": wall_s, "n": 1}
    out["run"] = {"s": sum(CLOCKS.get("run", [])), "n": len(CLOCKS.get("run", []))}
    return out


def main() -> None:
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    ours = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="also write the phases as JSON here")
    args = p.parse_args(ours)
    _wrap()
    code = 0
    try:
        commands.main(["run", *rest])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    table = phases(time.perf_counter() - STARTED)
    print(f"fp4bench run {' '.join(rest)}: exit {code}", file=sys.stderr)
    for name, v in table.items():
        print(f"  {name:<8} {v['s']:8.2f} s  ({v['n']}x)", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps({"argv": rest, "exit": code, "phases": table}, indent=1))
    sys.exit(code)


if __name__ == "__main__":
    main()
