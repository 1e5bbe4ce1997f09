"""What the sandbox costs a variant's times: ``fp4bench run`` under ``--sandbox auto`` and ``--sandbox off``,
alternated for --rounds rounds (auto, off, off, auto, ...: neither always runs first on a warm machine), each with
--json. Writes a markdown table to stdout and --out: per shape the median over rounds of each mode's mean (us), the
ratio auto/off, and the spread (smallest and largest per-round mean) of each, so a difference can be told from
run-to-run noise.

    python benchmarks/sandbox_cost.py --submission torch_reference --shapes benchmarks --rounds 3 --out cost.md
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(sub: str, shapes: str, mode: str, sandbox: str, settings: Path | None, out: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "harness", "run", "--submission", sub, "--shapes", shapes, "--mode", mode,
           "--sandbox", sandbox, "--no-store", "--json", str(out)] + (["--settings", str(settings)] if settings else [])
    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)  # a failing case still leaves its JSON
    return json.loads(out.read_text())["cases"]


def table(sub: str, names: list[str], means: dict[str, list[list[float | None]]], held: str) -> str:
    """Markdown: per shape, each mode's median of per-round means (us) with [min, max], and auto/off."""
    lines = [f"### {sub}: --sandbox auto ({held}) against off, {len(means['off'])} rounds", "",
             "| shape | auto us [min, max] | off us [min, max] | auto / off |", "| --- | --- | --- | ---: |"]
    for i, name in enumerate(names):
        cells, medians = [], []
        for mode in ("auto", "off"):
            xs = [r[i] for r in means[mode] if r[i] is not None]
            medians.append(statistics.median(xs) if xs else None)
            cells.append(f"{medians[-1]:.2f} [{min(xs):.2f}, {max(xs):.2f}]" if xs else "failed")
        ratio = f"{medians[0] / medians[1]:.3f}" if None not in medians else "n/a"
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", required=True, help="comma-separated")
    parser.add_argument("--shapes", default="benchmarks")
    parser.add_argument("--mode", default="leaderboard", choices=["benchmark", "leaderboard"])
    parser.add_argument("--settings", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        for sub in args.submission.split(","):
            means: dict[str, list[list[float | None]]] = {"auto": [], "off": []}
            names, held = [], ""
            for r in range(args.rounds):
                for sandbox in (("auto", "off") if r % 2 == 0 else ("off", "auto")):
                    out = Path(tmp) / f"{sub}-{sandbox}-{r}.json"
                    cases = _run(sub, args.shapes, args.mode, sandbox, args.settings, out)
                    names = [c["case"]["name"] or f"shape {i + 1}" for i, c in enumerate(cases)]
                    means[sandbox].append([c["stats"]["mean_ns"] / 1e3 if c["stats"] else None for c in cases])
                    if sandbox == "auto":
                        held = json.loads(out.read_text()).get("sandbox", "")
            report.append(table(sub, names, means, held))
            print(report[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(report))


if __name__ == "__main__":
    main()
