"""Seeds (secret combination, fresh per call) and statistics (official summary, stopping rule)."""
import math

import pytest

from harness.parent.seeds import case_seed, combine, sample_seeds, secret_from_env
from harness.results.stats import StoppingRule, geomean, summarize


def test_cantor_combination():
    assert combine(1111, 0) == 1111 + 1111 * 1112 // 2
    assert combine(0, 0) == 0 and combine(1, 2) == 1 + 3 * 4 // 2 and combine(2, 1) == 8
    assert case_seed(1111, None) == 1111 and case_seed(1111, 5) == combine(1111, 5)


def test_secret_from_env():
    assert secret_from_env({}) is None
    assert secret_from_env({"POPCORN_SEED": "42"}) == 42
    with pytest.raises(ValueError, match="POPCORN_SEED must be a non-negative integer, got 'abc'"):
        secret_from_env({"POPCORN_SEED": "abc"})


def test_every_input_seed_is_fresh():
    s = 1111
    timed = [x for i in range(100) for x in sample_seeds(s, i, 15)]
    warm = [x for i in range(3) for x in sample_seeds(s, i, 15, warmup=True)]
    assert sample_seeds(s, 0, 3) == [s + 42, s + 84, s + 126]  # the official sequence
    assert len(set(timed)) == len(timed) and not set(timed) & set(warm) and s not in timed + warm


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
