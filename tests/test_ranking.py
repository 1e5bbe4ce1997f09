"""Ranking statistics on synthetic data with known answers (no GPU, no store)."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.record import Stats
from harness.ranking import (Interval, Verdict, compare_geomeans, compare_samples, compare_stats, geomean_ci,
                             mean_ci, rank_with_ties, t_cdf, t_quantile)
from harness.stats import summarize


def stats(mean: float, err: float, runs: int) -> Stats:
    std = err * math.sqrt(runs)
    return Stats(runs, mean, std, err, mean - std, mean + std)


# Student t quantiles from standard tables (scipy.stats.t.ppf), 9 significant digits.
@pytest.mark.parametrize("p, dof, expected", [
    (0.975, 1, 12.7062047),
    (0.975, 2, 4.30265273),
    (0.975, 10, 2.22813885),
    (0.975, 30, 2.04227246),
    (0.995, 5, 4.03214298),
    (0.95, 4, 2.13184679),
    (0.975, math.inf, 1.95996398),
])
def test_t_quantile_matches_tables(p, dof, expected):
    assert t_quantile(p, dof) == pytest.approx(expected, rel=1e-7)
    assert t_quantile(1 - p, dof) == pytest.approx(-expected, rel=1e-7)
    assert t_cdf(expected, dof) == pytest.approx(p, abs=1e-9)


def test_t_quantile_fractional_dof_lies_between_neighbours():
    assert t_quantile(0.975, 3) < t_quantile(0.975, 2.5) < t_quantile(0.975, 2)


def test_t_quantile_rejects_bad_arguments():
    with pytest.raises(ValueError, match="strictly between"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="positive"):
        t_quantile(0.9, 0)


def test_geomean_ci_single_shape_is_the_t_interval_in_log_space():
    iv = geomean_ci([stats(100.0, 1.0, 3)])
    half = 4.30265273 * 0.01
    assert iv.estimate == pytest.approx(100.0)
    assert iv.low == pytest.approx(100.0 * math.exp(-half), rel=1e-7)
    assert iv.high == pytest.approx(100.0 * math.exp(half), rel=1e-7)
    assert iv.dof == pytest.approx(2.0)
    m = mean_ci(stats(100.0, 1.0, 3))
    assert (m.low, m.estimate, m.high, m.dof) == pytest.approx((iv.low, iv.estimate, iv.high, iv.dof))


def test_geomean_ci_two_shapes_known_dof_and_width():
    # Equal relative error r on both shapes, 11 runs each: Var(log G) = r^2/2, Welch dof = 2 * 10 = 20.
    iv = geomean_ci([stats(100.0, 1.0, 11), stats(400.0, 4.0, 11)])
    assert iv.estimate == pytest.approx(200.0)
    assert iv.dof == pytest.approx(20.0)
    half = 2.08596345 * 0.01 / math.sqrt(2)
    assert iv.low == pytest.approx(200.0 * math.exp(-half), rel=1e-7)
    assert iv.high == pytest.approx(200.0 * math.exp(half), rel=1e-7)


def test_geomean_ci_noise_free_is_a_point_and_one_sample_is_unbounded():
    point = geomean_ci([stats(10.0, 0.0, 5), stats(1000.0, 0.0, 5)])
    assert (point.low, point.estimate, point.high) == pytest.approx((100.0, 100.0, 100.0))
    unbounded = geomean_ci([stats(10.0, 0.0, 1), stats(1000.0, 1.0, 5)])
    assert unbounded.low == 0.0 and math.isinf(unbounded.high) and unbounded.dof == 0.0


def test_geomean_ci_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one shape"):
        geomean_ci([])
    with pytest.raises(ValueError, match="mean must be positive"):
        geomean_ci([stats(0.0, 0.0, 3)])


def test_geomean_ci_covers_the_true_geomean_about_95_percent_of_the_time():
    rng = random.Random(20261129)
    true_means = [18_000.0, 10_000.0, 2_400.0, 1_500.0]
    true_g = math.exp(sum(map(math.log, true_means)) / 4)
    trials, hits = 2000, 0
    for _ in range(trials):
        per_shape = [summarize([rng.gauss(m, 0.02 * m) for _ in range(4)]) for m in true_means]
        iv = geomean_ci(per_shape)
        hits += iv.low <= true_g <= iv.high
    assert 0.93 <= hits / trials <= 0.97


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 1e7), st.floats(0.0, 0.05), st.integers(2, 100)), min_size=1,
                max_size=6),
       st.floats(0.01, 1000.0))
def test_geomean_ci_contains_estimate_and_scales_with_units(shapes, scale):
    base = [stats(m, m * r, n) for m, r, n in shapes]
    iv = geomean_ci(base)
    assert iv.low <= iv.estimate * (1 + 1e-12) and iv.estimate <= iv.high * (1 + 1e-12)
    scaled = geomean_ci([stats(m * scale, m * r * scale, n) for m, r, n in shapes])
    assert scaled.estimate == pytest.approx(iv.estimate * scale, rel=1e-9)
    assert scaled.low == pytest.approx(iv.low * scale, rel=1e-9)


def test_rank_with_ties_shares_ranks_only_where_intervals_overlap():
    ranked = rank_with_ties({
        "c": Interval(3.0, 2.5, 4.0),
        "a": Interval(1.5, 1.0, 2.0),
        "b": Interval(2.4, 1.8, 3.0),
        "d": Interval(10.0, 9.0, 11.0),
    })
    assert [(r.name, r.rank, r.tied_with) for r in ranked] == [
        ("a", 1, ("b",)),
        ("b", 1, ("a", "c")),
        ("c", 2, ("b",)),        # a is detectably faster than c (2.0 < 2.5); b is not
        ("d", 4, ()),
    ]
    assert not ranked[-1].tied


def test_rank_with_ties_lists_an_imprecise_entry_with_the_best():
    ranked = rank_with_ties({"fast": Interval(1.0, 0.99, 1.01), "mid": Interval(2.0, 1.9, 2.1),
                             "vague": Interval(2.1, 0.5, 10.0)})
    assert [(r.name, r.rank) for r in ranked] == [("fast", 1), ("vague", 1), ("mid", 2)]


def test_compare_samples_unpaired_ratio_and_interval_known_analytically():
    a, b = [9.0, 10.0, 11.0], [19.0, 20.0, 21.0]
    c = compare_samples(a, b)
    assert c.ratio == pytest.approx(0.5)
    assert (c.a_ns, c.b_ns) == (10.0, 20.0)
    # std 1 each, err 1/sqrt(3); relative errors 0.0577 and 0.0289; Welch dof from the two.
    va, vb = (1 / math.sqrt(3) / 10) ** 2, (1 / math.sqrt(3) / 20) ** 2
    dof = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    half = t_quantile(0.975, dof) * math.sqrt(va + vb)
    assert c.dof == pytest.approx(dof)
    assert c.low == pytest.approx(0.5 * math.exp(-half))
    assert c.high == pytest.approx(0.5 * math.exp(half))
    assert c.verdict is Verdict.FASTER and c.speedup == pytest.approx(2.0)
    assert compare_samples(b, a).verdict is Verdict.SLOWER


def test_compare_samples_paired_exact_ratio_has_zero_width():
    b = [100.0, 130.0, 90.0, 250.0]          # drift: very noisy on its own
    a = [1.1 * x for x in b]                 # but always exactly 10 % slower
    paired = compare_samples(a, b, paired=True)
    assert (paired.low, paired.ratio, paired.high) == pytest.approx((1.1, 1.1, 1.1))
    assert paired.verdict is Verdict.SLOWER
    assert compare_samples(a, b).verdict is Verdict.SAME   # unpaired cannot see it through the drift


def test_compare_same_distribution_is_no_detectable_difference():
    rng = random.Random(7)
    a = [rng.gauss(1000.0, 10.0) for _ in range(30)]
    b = [rng.gauss(1000.0, 10.0) for _ in range(30)]
    c = compare_samples(a, b)
    assert c.verdict is Verdict.SAME and c.low < 1.0 < c.high
    assert c.verdict.value == "no detectable difference"


def test_compare_samples_rejects_bad_input():
    with pytest.raises(ValueError, match="both sides"):
        compare_samples([], [1.0])
    with pytest.raises(ValueError, match="positive"):
        compare_samples([1.0, -1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="equal sample counts"):
        compare_samples([1.0, 2.0], [1.0, 2.0, 3.0], paired=True)


def test_compare_geomeans_ratio_of_geomeans():
    a = [stats(100.0, 0.0, 5), stats(400.0, 0.0, 5)]       # geomean 200
    b = [stats(50.0, 0.0, 5), stats(800.0, 0.0, 5)]        # geomean 200
    same = compare_geomeans(a, b)
    assert same.ratio == pytest.approx(1.0) and same.verdict is Verdict.SAME
    faster = compare_geomeans([stats(50.0, 0.5, 5), stats(200.0, 2.0, 5)], a)
    assert faster.ratio == pytest.approx(0.5) and faster.verdict is Verdict.FASTER
    with pytest.raises(ValueError, match="same non-zero number"):
        compare_geomeans(a, b[:1])


def test_compare_stats_matches_compare_samples():
    a, b = [5.0, 6.0, 7.0, 6.5], [6.0, 6.1, 6.2, 6.3]
    assert compare_stats(summarize(a), summarize(b)) == compare_samples(a, b)
