"""The measurement scripts in benchmarks/ run on the CPU and write what they promise (their figures are taken
on the H200; here only that they run, pair the right shapes and record every variant)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = "m: [64]; n: [128]; k: [256]; g: 1; seed: 5"


def _settings(tmp_path: Path) -> Path:
    path = tmp_path / "quick.yml"
    path.write_text("timing:\n  max_runs: 3\n  min_time_ms: 1\n")
    return path


def test_before_after_pairs_official_style_and_fp4bench(tmp_path):
    out = tmp_path / "ba"
    subprocess.run([sys.executable, "benchmarks/before_after.py", "--submission", "torch_reference", "--shapes",
                    SHAPE, "--settings", str(_settings(tmp_path)), "--out-dir", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    official = json.loads((out / "official-torch_reference.json").read_text())["results"]
    fp4 = json.loads((out / "fp4bench-torch_reference.json").read_text())["cases"]
    assert [r["runs"] for r in official] == [3] and official[0]["mean_ns"] > 0 and official[0]["wall_s"] > 0
    assert [c["status"] for c in fp4] == ["pass"] and fp4[0]["stats"]["runs"] == 3
    table = (out / "before_after.md").read_text()
    assert "| m: [64]; n: [128]; k: [256]; g: 1; seed: 5 |" in table and "| total wall |" in table


def test_timing_gap_times_every_variant(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import timing_gap

    subprocess.run([sys.executable, "benchmarks/timing_gap.py", "--submission", "torch_reference", "--shapes",
                    SHAPE, "--samples", "2", "--variants", "official,fresh_idle_warm", "--out", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    doc = json.loads((tmp_path / "timing_gap.json").read_text())
    assert doc["cuda"] is False and [r["variant"] for r in doc["results"]] == ["official", "fresh_idle_warm"]
    assert all(r["samples"] == 2 and r["per_call_ns"] > 0 and r["host_ns"] > 0 for r in doc["results"])
    assert set(timing_gap.VARIANTS) >= {"official", "fresh_idle", "fresh_idle_warm"}
