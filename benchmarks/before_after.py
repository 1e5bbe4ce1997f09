"""Honest timings with and without fp4bench's checks, side by side (issue 3).

For each submission: ``benchmarks/official_style.py`` (the official evaluator's loop: same 15 inputs every
sample, no rechecks, no stream watch, no fingerprints) and ``python -m harness run --mode benchmark`` (fresh
inputs every sample, every output checked, all integrity checks), both with the same settings file, one
after the other. Writes one JSON per run and a markdown table: per shape the two means (us), their ratio,
and the wall time each took (the extra wall time is what the checks cost).

    python benchmarks/before_after.py --submission torch_reference,triton_grouped --out-dir DIR \
        --settings configs/device-budget.yml
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _official(sub: str, shapes: str, settings: Path | None, out: Path) -> dict:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "official_style.py"), "--submission", sub, "--shapes", shapes,
           "--out", str(out)] + (["--settings", str(settings)] if settings else [])
    subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads(out.read_text())["results"]


def _fp4bench(sub: str, shapes: str, settings: Path | None, out: Path, db: Path) -> dict:
    cmd = [sys.executable, "-m", "harness", "run", "--submission", sub, "--shapes", shapes, "--mode", "benchmark",
           "--json", str(out), "--db", str(db)] + (["--settings", str(settings)] if settings else [])
    subprocess.run(cmd, cwd=ROOT, check=False)  # a failing case still leaves its JSON
    cases = json.loads(out.read_text())["cases"]
    return [{"mean_ns": c["stats"]["mean_ns"] if c["stats"] else None, "runs": c["stats"]["runs"] if c["stats"] else 0,
             "wall_s": c["wall_s"], "status": c["status"]} for c in cases]


def table(sub: str, before: list[dict], after: list[dict]) -> str:
    """Markdown rows: shape, official-style mean us (runs), fp4bench mean us (runs), ratio, wall s each.
    ``before`` and ``after`` list the same shape set's cases in order."""
    lines = [f"### {sub}", "", "| shape | official-style us (runs) | fp4bench us (runs) | fp4bench / official | "
             "wall s official | wall s fp4bench |", "| --- | --- | --- | --- | --- | --- |"]
    for b, a in zip(before, after):
        name = b["case"]
        ratio = f"{a['mean_ns'] / b['mean_ns']:.3f}" if a.get("mean_ns") else a.get("status", "missing")
        lines.append(f"| {name} | {b['mean_ns'] / 1e3:.1f} ({b['runs']}) | "
                     f"{a['mean_ns'] / 1e3 if a.get('mean_ns') else float('nan'):.1f} ({a.get('runs', 0)}) | "
                     f"{ratio} | {b['wall_s']:.1f} | {a.get('wall_s', float('nan')):.1f} |")
    lines.append(f"| total wall | | | | {sum(b['wall_s'] for b in before):.1f} | "
                 f"{sum(a['wall_s'] for a in after):.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", required=True, help="comma-separated")
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--settings", type=Path, default=None)
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report = []
    for sub in args.submission.split(","):
        before = _official(sub, args.shapes, args.settings, args.out_dir / f"official-{sub}.json")
        after = _fp4bench(sub, args.shapes, args.settings, args.out_dir / f"fp4bench-{sub}.json",
                          args.out_dir / "fp4bench.sqlite")
        report.append(table(sub, before, after))
        print(report[-1], flush=True)
    (args.out_dir / "before_after.md").write_text("\n".join(report))


if __name__ == "__main__":
    main()
