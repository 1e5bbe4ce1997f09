"""How far an honest worker's window falls short of the parent's bracket, sample by sample (harness.parent.bracket).

Runs one variant in-process through harness.parent.runner.run with Bracket.judge wrapped to record, per timed
sample: the worker's window, the parent's bracket, its copy of the outputs and the margin allowed. The bracket never fails a
case here. Prints per case the mean (us per call), the calibrated gap, and the excess (bracket - window) quantiles;
writes every sample to --out as JSON. Run on a GPU: ``python benchmarks/bracket_margin.py --submission wgmma_sm90
--shapes benchmarks --mode leaderboard --out $OUT/margin.json``; ``--problem nvfp4_gemv --submission
nvfp4_gemv/triton --shapes smoke`` for another problem; ``--against VARIANT`` for compare mode (both sides' workers
alive, their samples interleaved), each side recorded.
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
from harness.shapes import DEFAULT_PROBLEM, load_shapes  # noqa: E402


def _quantiles(xs: list[float], name: str) -> dict:
    if not xs:
        return {}
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return {f"{name}_min_us": round(xs[0], 1), f"{name}_med_us": round(statistics.median(xs), 1),
            f"{name}_p80_us": round(q(0.8), 1), f"{name}_max_us": round(xs[-1], 1),
            f"{name}_mean_us": round(statistics.mean(xs), 1)}


def _label(case) -> str:
    return getattr(case, "name", "") or repr(case)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submission", default="wgmma_sm90")
    ap.add_argument("--shapes", default="benchmarks")
    ap.add_argument("--mode", default="leaderboard")
    ap.add_argument("--problem", default=DEFAULT_PROBLEM)
    ap.add_argument("--settings", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--against", default="", help="a second variant: compare mode, both sides recorded")
    args = ap.parse_args()
    seen: list[dict] = []
    real = bracket_mod.Bracket.judge

    def judge(self, key, window_ns, measured):
        allowed = (self.margin.allowed_ns(window_ns, measured.snapshot_ns, measured.copy_ns) if self.margin
                   else float("nan"))
        copy_allowed = self.margin.copy_allowed_ns(measured.snapshot_ns) if self.margin else float("nan")
        seen.append({"side": id(self), "case": _label(key), "window_ns": window_ns,
                     "bracket_ns": measured.bracket_ns, "snapshot_ns": measured.snapshot_ns, "copy_ns": measured.copy_ns,
                     "allowed_ns": allowed, "copy_allowed_ns": copy_allowed,
                     "gap_ns": self.margin.gap_ns if self.margin else None})
        real(self, key, window_ns, measured)
        return False, ""  # record every sample: the case never fails on the bracket here

    bracket_mod.Bracket.judge = judge
    bracket_mod.Bracket.verdict = lambda self, key: (False, "")
    settings = load_settings(Path(args.settings)) if args.settings else load_settings()
    shapes = load_shapes(args.shapes, args.problem)
    if args.against:
        from harness.parent import compare as compare_mod
        result = compare_mod.compare(resolve(args.submission), resolve(args.against), shapes,
                                     RunOptions(compare_mod.MODE, settings=settings))
        records = [result.a, result.b]
    else:
        records = [run(resolve(args.submission), shapes, RunOptions(args.mode, settings=settings))]
    sides = list(dict.fromkeys(s["side"] for s in seen))
    out = {"bracket": records[0].bracket, "cases": []}
    for rec in records:
        for c in rec.cases:
            name = _label(c.case)
            side = records.index(rec) if args.against else None
            mine = [s for s in seen if s["case"] == name and (side is None or sides.index(s["side"]) == side)]
            copy_used = [s["copy_ns"] / s["copy_allowed_ns"] for s in mine
                         if s["copy_allowed_ns"] == s["copy_allowed_ns"]]
            used = [(s["bracket_ns"] - s["window_ns"]) / s["allowed_ns"] for s in mine
                    if s["allowed_ns"] == s["allowed_ns"]]
            row = {"variant": rec.submission.name, "case": name, "status": c.status.value, "message": c.message[:300],
                   "mean_us": c.stats.mean_ns / 1e3 if c.stats else None,
                   "kernel_us": c.kernel_ns / 1e3 if c.kernel_ns else None,
                   "gap_us": mine[0]["gap_ns"] / 1e3 if mine and mine[0]["gap_ns"] else None,
                   **_quantiles([(s["bracket_ns"] - s["window_ns"]) / 1e3 for s in mine], "excess"),
                   **_quantiles([s["snapshot_ns"] / 1e3 for s in mine], "snapshot"),
                   **_quantiles([s["copy_ns"] / 1e3 for s in mine], "copy"),
                   "share_of_allowance_max": max(used) if used else None,
                   "strikes": sum(u > 1 for u in used), "copy_strikes": sum(u > 1 for u in copy_used),
                   "samples": len(mine)}
            out["cases"].append(row)
            print(json.dumps(row), flush=True)
    rec = records[0]
    print("geomean_us", rec.geomean_ns / 1e3 if rec.geomean_ns else None, rec.bracket, flush=True)
    out["samples"] = seen
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
