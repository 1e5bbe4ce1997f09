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


_INT8_CHECK = """
import sys, torch
sys.path.insert(0, "benchmarks")
from reference_int8 import _int8_groups, decode_int8
from task.inputs import generate_input
from task.reference import _decode, _int8_shift, _int8_table, _read_stats, _scale_stats, ref_kernel_fp64
gen = torch.Generator().manual_seed(0)
for rows, k, choices in ((5, 64, [0x38, 0x40]), (33, 512, [0x30, 0x38, 0x40, 0x00, 0xB8, 0x80, 0xC0]),
                         (7, 256, [0x01, 0x02, 0x04, 0x03, 0x81])):
    packed = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, generator=gen)
    table = torch.tensor(choices, dtype=torch.uint8)
    codes = table[torch.randint(0, len(choices), (rows, k // 16), generator=gen)]
    mu = _int8_shift(_read_stats(_scale_stats(codes.reshape(-1).to(torch.int32), [codes.numel()]))[0])
    want = _decode([(packed.unsqueeze(-1), codes.to(torch.int32))], torch.int8, _int8_table(mu))[0]
    got = decode_int8([(packed, codes, mu, rows + 3)])[0]
    assert torch.equal(got[:rows], want) and not bool(got[rows:].any()), (rows, k, mu)
x = generate_input([40, 12], [128, 64], [256, 256], 2, 5, device="cpu")
groups = [(a[:, :, 0].view(torch.uint8), sa[:, :, 0].view(torch.uint8), b[:, :, 0].view(torch.uint8),
           sb[:, :, 0].view(torch.uint8)) for (a, b, _c), (sa, sb) in zip(x[0], x[1])]
out = _int8_groups(groups, [9, 9, 9, 9])
expected = torch.cat([e.flatten() for e in ref_kernel_fp64(x)])
assert torch.equal(out.view(torch.int16), expected.view(torch.int16))
print("int8 ok")
"""


def test_reference_int8_decode_and_gemm_under_the_interpreter():
    """benchmarks/reference_int8.py's Triton decode on the CPU (TRITON_INTERPRET): the same int8 integers as
    task.reference's int8 table under official, mixed (mu = 8) and subnormal scales, rows past R zero; its GEMM
    path (12 rows of A padded for torch._int_mm) bit for bit the fp64 reference on an official input."""
    import os

    import pytest
    pytest.importorskip("triton")
    proc = subprocess.run([sys.executable, "-c", _INT8_CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and proc.stdout.strip() == "int8 ok", proc.stderr[-3000:]


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


def test_cupti_cost_times_each_way_of_driving_the_profiler(tmp_path):
    out = tmp_path / "cupti.json"
    subprocess.run([sys.executable, "benchmarks/cupti_cost.py", "--reps", "1", "--small", "3", "--first", "raw",
                    "--out", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    doc = json.loads(out.read_text())
    assert doc["cuda"] is False and doc["first_way"] == "raw" and set(doc["ways"]) == {"cpu+cuda", "cuda", "raw"}
    assert all(w["enter_ms"] > 0 and w["calls_ms"] > 0 and w["busy_us_per_call"] is None
               for w in doc["ways"].values())
