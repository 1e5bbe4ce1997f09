"""The measurement scripts in benchmarks/ run on the CPU and write what they promise (their figures are taken
on the H200; here only that they run, pair the right shapes and record every variant)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def test_run_phases_accounts_for_the_whole_wall(tmp_path):
    out = tmp_path / "phases.json"
    subprocess.run([sys.executable, "benchmarks/run_phases.py", "--out", str(out), "--", "--submission",
                    "torch_reference", "--shapes", SHAPE, "--mode", "leaderboard", "--no-store", "--settings",
                    str(_settings(tmp_path))], cwd=ROOT, check=True, capture_output=True, timeout=300)
    doc = json.loads(out.read_text())
    ph = doc["phases"]
    assert doc["exit"] == 0 and doc["argv"][:2] == ["--submission", "torch_reference"]
    assert ph["meanwhile"]["n"] == 1 and ph["samples"]["n"] == 3 and ph["check"]["n"] == 1
    assert ph["kernels"]["n"] == 1 and ph["run"]["n"] == 1
    parts = sum(v["s"] for k, v in ph.items() if k not in ("wall", "run"))
    assert abs(parts - ph["wall"]["s"]) < 1e-6 and ph["import"]["s"] > 0 and ph["worker"]["s"] > 0
    assert ph["run"]["s"] >= ph["samples"]["s"] + ph["worker"]["s"]


def test_gpu_round_refuses_an_unknown_step_before_running_any(tmp_path):
    proc = subprocess.run(["bash", "benchmarks/h200_round.sh", "tests", "spin"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"OUT": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert proc.stderr == ("h200_round.sh: unknown step 'spin' (expected tests, gpu1-gpu4, margin, timing, lb, "
                           "fidelity, cost or ablb)\n")
    assert list(tmp_path.iterdir()) == []  # the tests step did not run


def _official_style():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import official_style
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return official_style


def test_official_style_draws_inputs_as_each_problems_loop_does():
    """nvfp4_group_gemm: 15 inputs, seed + 42, 84, ...; gemv: its case seed alone, and in the leaderboard a new
    input before every sample, seed + 13, 26, 39 (reference-kernels eval.py), one call each."""
    from harness import plugs

    official_style = _official_style()

    class ThreeSamples:
        @staticmethod
        def is_finished(samples_ns, wall_ns):
            return len(samples_ns) >= 3

    class Drawn:
        def __init__(self, plug):
            self.plug, self.timing = plug, plug.timing

        def generate(self, case, seed):
            return seed

    group, gemv = (Drawn(plugs.get(p)) for p in ("nvfp4_group_gemm", "nvfp4_gemv"))
    case = type("C", (), {"seed": 1000})()
    assert official_style._official_inputs(group, case) == [1000 + 42 * j for j in range(1, 16)]
    assert official_style._official_inputs(gemv, case) == [1000]
    seen = []
    samples, last = official_style._fresh_samples(seen.append, gemv, case, ThreeSamples(), None)
    assert seen == [1013, 1026, 1039] and last == [1039] and len(samples) == 3
