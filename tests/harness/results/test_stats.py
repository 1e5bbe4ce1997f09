"""Statistics (harness.results.stats): the official summary, the geomean, the stopping rule."""
import math

import pytest

from harness.results.stats import StoppingRule, geomean, summarize


def test_summarize_official_formulas():
    st = summarize([1.0, 2.0, 3.0, 4.0])
    assert st.runs == 4 and st.mean_ns == 2.5 and st.best_ns == 1.0 and st.worst_ns == 4.0
    assert st.std_ns == pytest.approx(math.sqrt(5 / 3))
    assert st.err_ns == pytest.approx(math.sqrt(5 / 3) / 2)
    with pytest.raises(ValueError):
        summarize([])


def test_geomean():
    assert geomean([1, 100]) == pytest.approx(10)
    with pytest.raises(ValueError):
        geomean([1, 0])


def test_stopping_rule():
    rule = StoppingRule(min_runs=3, min_time_ns=100e6, max_rel_err=0.001, budget_ns=10e9, max_wall_ns=120e9,
                        max_runs=100)
    assert not rule.is_finished([1e6, 1e6], 0)                      # fewer than 3 samples
    assert not rule.is_finished([1e6, 1.1e6, 0.9e6], 1e6)           # under 100 ms measured, noisy
    assert rule.is_finished([50e6, 50e6, 50e6], 0)                  # >= 100 ms and no noise
    assert rule.is_finished([4e9, 4e9 * 1.5, 4e9 * 0.6], 0)         # over the 10 s budget
    noisy = [1e6 * (1 + 0.5 * (i % 2)) for i in range(100)]
    assert rule.is_finished(noisy, 0) and not rule.is_finished(noisy[:99], 0)  # 100 samples at most
    assert rule.is_finished([1e6, 2e6, 3e6], 121e9)                 # 120 s of wall time
