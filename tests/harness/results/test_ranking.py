"""Ranking statistics on synthetic data with known answers (no GPU, no store)."""
from __future__ import annotations

import math
import random
from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.results.ranking import (
    Interval,
    SpeedVerdict,
    compare_geomeans,
    compare_samples,
    compare_stats,
    geomean_ci,
    mean_ci,
    rank_with_ties,
    t_quantile,
)
from harness.results.record import Stats
from harness.results.stats import summarize


def stats(mean: float, err: float, runs: int) -> Stats:
    std = err * math.sqrt(runs)
    return Stats(runs, mean, std, err, mean - std, mean + std)


def two_sided_t_probability(t: float, dof: int) -> float:
    """P(|T| <= t) for Student's t with integer dof, by the finite series of Abramowitz & Stegun 26.7.3 / 26.7.4
    (theta = atan(t / sqrt(dof))): scipy-free, so it checks the quantiles independently."""
    theta = math.atan(t / math.sqrt(dof))
    s, c = math.sin(theta), math.cos(theta)
    if dof % 2 == 0:                      # sin(theta) * (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ... up to c^(dof-2))
        term, total = 1.0, 1.0
        for k in range(1, dof // 2):
            term *= (2 * k - 1) / (2 * k) * c * c
            total += term
        return s * total
    if dof == 1:
        return 2 * theta / math.pi
    term, total = c, c                    # c + 2/3 c^3 + 2*4/(3*5) c^5 + ... up to c^(dof-2)
    for k in range(1, (dof - 1) // 2):
        term *= (2 * k) / (2 * k + 1) * c * c
        total += term
    return 2 / math.pi * (theta + s * total)


# Student t quantiles, 9 significant digits; the printed tables (Fisher & Yates) agree to their 3 decimals.
@pytest.mark.parametrize("p, dof, expected", [
    (0.975, 1, 12.7062047),
    (0.975, 2, 4.30265273),
    (0.975, 5, 2.57058184),
    (0.975, 10, 2.22813885),
    (0.975, 30, 2.04227246),
    (0.995, 5, 4.03214298),
    (0.95, 4, 2.13184679),
])
def test_t_quantile_matches_tables_and_the_closed_form_distribution(p, dof, expected):
    assert t_quantile(p, dof) == pytest.approx(expected, rel=1e-7)
    assert t_quantile(1 - p, dof) == pytest.approx(-expected, rel=1e-7)
    assert two_sided_t_probability(t_quantile(p, dof), dof) == pytest.approx(2 * p - 1, abs=1e-12)


def test_t_quantile_closed_forms_for_one_and_two_dof():
    # dof 1 is Cauchy: t = tan(pi (p - 1/2)); dof 2: t = (2p - 1) / sqrt(2 p (1 - p)).
    for p in (0.9, 0.975, 0.995):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-12)
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)


def test_t_quantile_infinite_dof_is_the_normal_quantile():
    assert t_quantile(0.975, math.inf) == pytest.approx(1.95996398454, rel=1e-10)
    assert t_quantile(0.975, math.inf) == pytest.approx(NormalDist().inv_cdf(0.975), rel=1e-12)


def test_t_quantile_fractional_dof_lies_between_neighbours():
    assert t_quantile(0.975, 3) < t_quantile(0.975, 2.5) < t_quantile(0.975, 2)


def test_t_quantile_rejects_bad_arguments():
    with pytest.raises(ValueError, match="strictly between"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="positive"):
        t_quantile(0.9, 0)
    with pytest.raises(ValueError, match="strictly between 0 and 1, got nan"):
        t_quantile(math.nan, 3)
    with pytest.raises(ValueError, match="positive, got nan"):
        t_quantile(0.9, math.nan)


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
    assert c.verdict is SpeedVerdict.FASTER and c.speedup == pytest.approx(2.0)
    assert compare_samples(b, a).verdict is SpeedVerdict.SLOWER


def test_compare_samples_paired_exact_ratio_has_zero_width():
    b = [100.0, 130.0, 90.0, 250.0]          # drift: very noisy on its own
    a = [1.1 * x for x in b]                 # but always exactly 10 % slower
    paired = compare_samples(a, b, paired=True)
    assert (paired.low, paired.ratio, paired.high) == pytest.approx((1.1, 1.1, 1.1))
    assert paired.verdict is SpeedVerdict.SLOWER
    assert compare_samples(a, b).verdict is SpeedVerdict.SAME   # unpaired cannot see it through the drift


@pytest.mark.parametrize("log_ratios, verdict", [
    ((-0.25, -0.20, -0.15), SpeedVerdict.FASTER),   # mean -0.2, sd 0.05
    ((0.10, 0.20, 0.30), SpeedVerdict.SAME),        # mean 0.2, sd 0.1: the interval reaches below 1
])
def test_compare_samples_paired_interval_by_hand(log_ratios, verdict):
    b = [100.0, 250.0, 60.0]                   # drift between pairs; only the per-pair ratios matter
    a = [y * math.exp(d) for y, d in zip(b, log_ratios)]
    n = 3
    mean = sum(log_ratios) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in log_ratios) / (n - 1))
    t_975_2dof = 0.95 / math.sqrt(2 * 0.975 * 0.025)          # closed form for 2 dof: 4.3027
    half = t_975_2dof * sd / math.sqrt(n)
    c = compare_samples(a, b, paired=True)
    assert c.dof == pytest.approx(2)
    assert c.ratio == pytest.approx(math.exp(mean), rel=1e-12)
    assert c.low == pytest.approx(math.exp(mean - half), rel=1e-12)
    assert c.high == pytest.approx(math.exp(mean + half), rel=1e-12)
    assert c.verdict is verdict
    assert (c.a_ns, c.b_ns) == (pytest.approx(sum(a) / n), pytest.approx(sum(b) / n))


def test_compare_samples_paired_interval_is_scipy_ttest_rel_on_log_times():
    from scipy.stats import ttest_rel
    rng = random.Random(3)
    b = [rng.uniform(900.0, 1100.0) for _ in range(12)]
    a = [x * rng.gauss(0.97, 0.02) for x in b]
    c = compare_samples(a, b, paired=True, level=0.9)
    res = ttest_rel([math.log(x) for x in a], [math.log(y) for y in b])
    ci = res.confidence_interval(confidence_level=0.9)
    assert res.df == 11 and c.dof == pytest.approx(11)
    assert (c.low, c.high) == pytest.approx((math.exp(ci.low), math.exp(ci.high)), rel=1e-12)


def test_compare_same_distribution_is_no_detectable_difference():
    rng = random.Random(7)
    a = [rng.gauss(1000.0, 10.0) for _ in range(30)]
    b = [rng.gauss(1000.0, 10.0) for _ in range(30)]
    c = compare_samples(a, b)
    assert c.verdict is SpeedVerdict.SAME and c.low < 1.0 < c.high
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
    assert same.ratio == pytest.approx(1.0) and same.verdict is SpeedVerdict.SAME
    faster = compare_geomeans([stats(50.0, 0.5, 5), stats(200.0, 2.0, 5)], a)
    assert faster.ratio == pytest.approx(0.5) and faster.verdict is SpeedVerdict.FASTER
    with pytest.raises(ValueError, match="same non-zero number"):
        compare_geomeans(a, b[:1])


def test_compare_stats_matches_compare_samples():
    a, b = [5.0, 6.0, 7.0, 6.5], [6.0, 6.1, 6.2, 6.3]
    assert compare_stats(summarize(a), summarize(b)) == compare_samples(a, b)
