"""benchmarks/reference_speed.py on the CPU: the paths that run here, their bit check against the fp64 reference and
the JSON it promises (its figures are taken on the H200)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import reference_speed  # noqa: E402

SHAPE = "m: [64, 32]; n: [128, 256]; k: [256, 512]; g: 2; seed: 5"


def test_writes_every_path_that_runs_here_with_its_bit_check(tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert reference_speed.main(["--shapes", SHAPE, "--repeats", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["cuda"] is False and doc["repeats"] == 2 and doc["data"] == "official"
    assert [r["path"] for r in doc["results"]] == ["torch", "fp64"]  # no Triton decode without CUDA
    for row in doc["results"]:
        assert row["spec"] == SHAPE and row["calls"] == 15 and row["exact"] is True
        assert len(row["window_ms"]) == 2 and row["mean_window_ms"] == sum(row["window_ms"]) / 2 > 0
        assert "device_ms" not in row  # the profiler pass is CUDA only
    assert "torch: window" in capsys.readouterr().out


def test_full_range_data_is_exact_through_the_fallback(tmp_path):
    out = tmp_path / "speed.json"
    assert reference_speed.main(["--shapes", SHAPE, "--data", "full-range", "--paths", "torch", "--repeats", "1",
                                 "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["path"] == "torch" and row["exact"] is True


def test_paths_that_cannot_run_here_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        reference_speed.main(["--paths", "triton,fp64", "--out", str(tmp_path / "x.json")])
    assert exit_info.value.code == 2
    assert "error: --paths: expected some of torch,fp64 here, got triton" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
