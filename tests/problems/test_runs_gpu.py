"""Every problem's Triton variant through ``fp4bench run`` on the GPU (parent, worker on its own device memory,
judge, store): the official tests shapes pass in test mode and a benchmark of the smoke set is timed under the
problem's own loop (calls per sample, most samples) and stored under the problem."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness import plugs
from harness.cli.commands import main
from harness.results.store import ResultStore

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("problem", ["nvfp4_gemm", "nvfp4_gemv", "nvfp4_dual_gemm"])
def test_triton_passes_the_official_tests_through_the_harness(tmp_path, problem):
    db = tmp_path / "r.sqlite"
    result = CliRunner().invoke(main, ["run", "--submission", f"{problem}/triton", "--shapes", "tests",
                                       "--db", str(db)])
    assert result.exit_code == 0, result.output
    with ResultStore(db) as store:
        (run,) = store.runs(problem=problem)
    assert len(run.cases) == 10 and all(c.status.value == "pass" for c in run.cases)


@pytest.mark.parametrize("problem", ["nvfp4_gemm", "nvfp4_gemv", "nvfp4_dual_gemm"])
def test_a_benchmark_runs_the_problems_own_loop(tmp_path, problem):
    db = tmp_path / "r.sqlite"
    result = CliRunner().invoke(main, ["run", "--submission", f"{problem}/triton", "--shapes", "smoke",
                                       "--mode", "benchmark", "--db", str(db)])
    assert result.exit_code == 0, result.output
    loop = plugs.get(problem).timing
    with ResultStore(db) as store:
        (run,) = store.runs(problem=problem)
    for case in run.cases:
        assert case.passed and 3 <= case.stats.runs <= loop.max_samples_benchmark
        # every call of every sample (and the correctness call and warm-up) was checked
        assert case.calls_checked >= 1 + case.stats.runs * loop.calls_per_sample
