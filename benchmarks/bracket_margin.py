"""How far an honest worker's window falls short of the parent's bracket, sample by sample (harness.parent.bracket).

Runs one variant in-process through harness.parent.runner.run with Bracket.judge wrapped to record, per timed
sample: the worker's window, the parent's bracket, its copy of the outputs and the margin allowed. The bracket never fails a
case here. Prints per case the mean (us per call), the calibrated gap, and the excess (bracket - window) quantiles;
writes every sample to --out as JSON. Run on a GPU: ``python benchmarks/bracket_margin.py --submission wgmma_sm90
--shapes benchmarks --mode leaderboard --out $OUT/margin.json``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.parent import bracket as bracket_mod  # noqa: E402
from harness.parent.registry import resolve  # noqa: E402
from harness.parent.runner import RunOptions, run  # noqa: E402
from harness.parent.settings import load_settings  # noqa: E402
from task.spec import load_shapes  # noqa: E402


def _quantiles(xs: list[float], name: str) -> dict:
    if not xs:
        return {}
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return {f"{name}_min_us": round(xs[0], 1), f"{name}_med_us": round(statistics.median(xs), 1),
            f"{name}_p80_us": round(q(0.8), 1), f"{name}_max_us": round(xs[-1], 1),
            f"{name}_mean_us": round(statistics.mean(xs), 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submission", default="wgmma_sm90")
    ap.add_argument("--shapes", default="benchmarks")
    ap.add_argument("--mode", default="leaderboard")
    ap.add_argument("--settings", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    seen: list[dict] = []
    real = bracket_mod.Bracket.judge

    def judge(self, key, window_ns, measured):
        allowed = (self.margin.allowed_ns(window_ns, measured.snapshot_ns, measured.copy_ns) if self.margin
                   else float("nan"))
        seen.append({"case": key.name or str(key.n[0]), "window_ns": window_ns,
                     "bracket_ns": measured.bracket_ns, "snapshot_ns": measured.snapshot_ns, "copy_ns": measured.copy_ns,
                     "allowed_ns": allowed,
                     "gap_ns": self.margin.gap_ns if self.margin else None})
        real(self, key, window_ns, measured)
        return False, ""  # record every sample: the case never fails on the bracket here

    bracket_mod.Bracket.judge = judge
    settings = load_settings(Path(args.settings)) if args.settings else load_settings()
    rec = run(resolve(args.submission), load_shapes(args.shapes), RunOptions(args.mode, settings=settings))
    out = {"bracket": rec.bracket, "cases": []}
    for c in rec.cases:
        name = c.case.name or str(c.case.n[0])
        mine = [s for s in seen if s["case"] == name]
        used = [(s["bracket_ns"] - s["window_ns"]) / s["allowed_ns"] for s in mine if s["allowed_ns"] == s["allowed_ns"]]
        row = {"case": name, "status": c.status.value, "message": c.message[:300],
               "mean_us": c.stats.mean_ns / 1e3 if c.stats else None,
               "kernel_us": c.kernel_ns / 1e3 if c.kernel_ns else None,
               "gap_us": mine[0]["gap_ns"] / 1e3 if mine and mine[0]["gap_ns"] else None,
               **_quantiles([(s["bracket_ns"] - s["window_ns"]) / 1e3 for s in mine], "excess"),
               **_quantiles([s["snapshot_ns"] / 1e3 for s in mine], "snapshot"),
               **_quantiles([s["copy_ns"] / 1e3 for s in mine], "copy"),
               "share_of_allowance_max": max(used) if used else None, "samples": len(mine)}
        out["cases"].append(row)
        print(json.dumps(row), flush=True)
    print("geomean_us", rec.geomean_ns / 1e3 if rec.geomean_ns else None, rec.bracket, flush=True)
    out["samples"] = seen
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
