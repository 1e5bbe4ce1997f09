"""fp4bench against the official loop, interleaved shape by shape: how far fp4bench's means and its kernel-time
column are from the official evaluator's way of timing (issue "Fast samples").

For each round and each shape: ``benchmarks/official_style.py --kernel-time`` on that shape alone (its own
process: the same 15 inputs every sample, no checks; then one torch.profiler pass), then ``python -m harness run
--mode benchmark`` on that shape alone (its own process). Writes the raw JSON of every run into ``--out-dir``
and ``fidelity.md``: per shape the two means (us), fp4bench / official, fp4bench's kernel us next to the
separate profiler run's, their ratio, and fp4bench's overhead per sample (ms).

    python benchmarks/fidelity.py --submission wgmma_sm90 --shapes benchmarks --rounds 2 --out-dir DIR
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from problems.nvfp4_group_gemm.spec import load_shapes  # noqa: E402


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", required=True)
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--settings", type=Path, default=None)
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    settings = ["--settings", str(args.settings)] if args.settings else []
    rows: dict[str, dict[str, list[float]]] = {}
    for r in range(args.rounds):
        for i, case in enumerate(load_shapes(args.shapes).cases):
            name, spec = case.name or f"case{i}", case.text()
            off, ours = args.out_dir / f"official-{r}-{i}.json", args.out_dir / f"fp4bench-{r}-{i}.json"
            _run([sys.executable, "benchmarks/official_style.py", "--submission", args.submission, "--shapes", spec,
                  "--kernel-time", "--out", str(off)] + settings)
            _run([sys.executable, "-m", "harness", "run", "--submission", args.submission, "--shapes", spec,
                  "--mode", "benchmark", "--no-store", "--json", str(ours)] + settings)
            o = json.loads(off.read_text())["results"][0]
            f = json.loads(ours.read_text())["cases"][0]
            row = rows.setdefault(name, {k: [] for k in ("off", "ours", "k_off", "k_ours", "over")})
            row["off"].append(o["mean_ns"])
            row["ours"].append(f["stats"]["mean_ns"] if f["stats"] else float("nan"))
            row["k_off"].append(o["kernel_ns"] or float("nan"))
            row["k_ours"].append(f.get("kernel_ns") or float("nan"))
            row["over"].append(f.get("overhead_ms_per_sample") or float("nan"))
    mean = statistics.fmean
    lines = ["| shape | official us | fp4bench us | fp4bench / official | fp4bench kernel us | profiler kernel us "
             "| kernel ratio | overhead ms/sample |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, v in rows.items():
        lines.append(f"| {name} | {mean(v['off']) / 1e3:.2f} | {mean(v['ours']) / 1e3:.2f} | "
                     f"{mean(v['ours']) / mean(v['off']):.3f} | {mean(v['k_ours']) / 1e3:.2f} | "
                     f"{mean(v['k_off']) / 1e3:.2f} | {mean(v['k_ours']) / mean(v['k_off']):.3f} | "
                     f"{mean(v['over']):.1f} |")
    text = "\n".join(lines) + f"\n\n{args.submission}, {args.rounds} round(s), means over rounds.\n"
    (args.out_dir / "fidelity.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
