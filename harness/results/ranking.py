"""Statistics for ranking variants: confidence intervals on geometric means, ties, and A-versus-B verdicts.

Pure functions on numbers (``Stats`` records and sample lists, all times in ns); no store, no GPU.

Method: **per-shape mean and standard error, combined in log space by the delta method, with a Student t
quantile at Welch-Satterthwaite degrees of freedom.** For a variant timed on S shapes with per-shape means
``m_s`` and standard errors ``e_s`` (from ``runs_s`` samples)::

    log G = (1/S) * sum_s log m_s                       (G: the geomean the leaderboard ranks by)
    Var(log G) ~= (1/S^2) * sum_s (e_s / m_s)^2          (delta method: d log m = dm / m)
    dof = Var^2 / sum_s [ ((e_s/m_s)^2 / S^2)^2 / (runs_s - 1) ]   (Welch-Satterthwaite)
    CI = G * exp(+-t(dof, (1+level)/2) * sqrt(Var))

The t quantile is ``scipy.stats.t.ppf``. The combination above is ours: scipy has no interval for a sum of S
variance terms with Welch-Satterthwaite dof (``ttest_ind_from_stats`` takes two groups and gives no interval).
The paired interval of ``compare_samples`` is the one ``scipy.stats.ttest_rel`` gives on log times (a test pins
the two equal); it is computed here so that all four intervals share one formula, and because ttest_rel warns
of precision loss when every pair has the same ratio (noise-free timing).

Why this and not a bootstrap over samples:
- it needs only what every stored run has (``Stats.mean_ns``, ``err_ns``, ``runs``), is deterministic, and is
  the same quantity the official stopping rule controls (err / mean < 0.1 %);
- the official rule often stops at 3 samples a shape; a bootstrap over 3 samples has 10 distinct resamples and
  badly understates the spread, while the t quantile at 2 degrees of freedom (4.30, not 1.96) accounts for it;
- relative errors are small (well under 10 %), where linearising the log is accurate; shapes are timed
  independently, so their variances add.

What the interval does NOT cover: run-to-run variation (clocks, temperature, another process on the GPU). It
is the sampling noise of one run. Two runs of the same kernel can differ by more than their intervals suggest;
``compare`` (interleaved timing of A and B) is the way to settle a close call.

Ties: two variants tie when their geomean intervals overlap. A variant's rank is 1 + the number of variants
whose interval lies wholly below (faster than) its own, so overlapping variants share a rank. Overlap of two
95 % intervals is a conservative test (a difference can be real and still overlap); that is the intent: the
leaderboard should not claim an order it cannot support.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from statistics import fmean, variance
from typing import Iterable, Mapping, Sequence, Union

from harness.results.record import RunRecord, Stats
from harness.results.stats import geomean, summarize
from harness import plugs
from harness.hardware import gpu_model
from harness.shapes import shape_set_id

#: Confidence level used everywhere unless a caller asks for another.
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval, in the estimate's own unit (ns for times, a plain
    number for ratios). ``dof``: degrees of freedom of the t quantile used (``inf``: normal; ``0``: not enough
    samples to estimate the noise, and then ``low`` is 0 and ``high`` is ``inf``)."""

    estimate: float
    low: float
    high: float
    level: float = LEVEL
    dof: float = math.inf

    def overlaps(self, other: "Interval") -> bool:
        """True when the two closed intervals share a point."""
        return self.low <= other.high and other.low <= self.high

    @property
    def rel_half_width(self) -> float:
        """Half the interval's width over the estimate (0.01 = +-1 %), taken on the wider side."""
        if self.estimate == 0:
            return math.inf
        return max(self.high - self.estimate, self.estimate - self.low) / self.estimate


class SpeedVerdict(str, Enum):
    """How A's time compares with B's (A / B): FASTER means A takes detectably less time."""

    FASTER = "faster"
    SLOWER = "slower"
    SAME = "no detectable difference"


@dataclass(frozen=True)
class Comparison:
    """A over B: ``ratio`` = A time / B time (below 1: A is faster), with its confidence interval.

    ``a_ns`` / ``b_ns``: the two times the ratio is made of (means, or geomeans for a whole shape set).
    ``method`` names the estimator in words."""

    ratio: float
    low: float
    high: float
    level: float
    dof: float
    verdict: SpeedVerdict
    a_ns: float
    b_ns: float
    method: str

    @property
    def speedup(self) -> float:
        """B time / A time: how many times faster A is (below 1: slower)."""
        return 1.0 / self.ratio


@dataclass(frozen=True)
class Ranked:
    """One entry of a ranking: ``rank`` is 1 + the number of entries detectably faster; ``tied_with`` names the
    entries whose intervals overlap this one's."""

    name: str
    rank: int
    interval: Interval
    tied_with: tuple[str, ...] = ()

    @property
    def tied(self) -> bool:
        return bool(self.tied_with)


# --------------------------------------------------------------------------------------------- t quantile
def t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t with ``dof`` degrees of freedom (e.g. p=0.975, dof=2 -> 4.3027), from
    ``scipy.stats.t.ppf``.

    ``dof`` may be fractional (Welch) or ``inf`` (normal). Raises ValueError unless 0 < p < 1 and dof > 0
    (scipy would answer nan)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie strictly between 0 and 1, got {p}")
    if not dof > 0:
        raise ValueError(f"degrees of freedom must be positive, got {dof}")
    # Imported here, not at the top: scipy.stats takes ~0.6 s to import, which every CLI command would pay
    # through harness.report, while only the interval computations need it.
    from scipy.stats import t as student_t
    return float(student_t.ppf(p, dof))


# ------------------------------------------------------------------------------------ intervals, log space
def _check_stats(stats: Stats, what: str) -> None:
    if not stats.mean_ns > 0:
        raise ValueError(f"{what}: mean must be positive, got {stats.mean_ns} ns")
    if stats.runs < 1:
        raise ValueError(f"{what}: needs at least one sample, got runs={stats.runs}")
    if stats.err_ns < 0:
        raise ValueError(f"{what}: standard error must be non-negative, got {stats.err_ns} ns")


def _log_interval(log_est: float, terms: Sequence[tuple[float, int]], level: float) -> tuple[float, float, float]:
    """(low, high, dof) around exp(log_est) from variance terms (v, dof_of_term) of the log estimate.

    A term with dof 0 (one sample: noise unknown) makes the interval unbounded."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must lie strictly between 0 and 1, got {level}")
    est = math.exp(log_est)
    if any(d < 1 for _, d in terms):
        return 0.0, math.inf, 0.0
    var = sum(v for v, _ in terms)
    if var == 0.0:
        return est, est, math.inf
    denom = sum(v * v / d for v, d in terms)
    dof = var * var / denom if denom > 0 else math.inf
    half = t_quantile(0.5 + level / 2.0, dof) * math.sqrt(var)
    return math.exp(log_est - half), math.exp(log_est + half), dof


def mean_ci(stats: Stats, level: float = LEVEL) -> Interval:
    """Confidence interval (ns) on one shape's mean time: mean +- t(runs-1) * err, computed in log space like
    the geomean so the two are consistent (and the lower end stays positive).

    Raises ValueError for a non-positive mean, a negative error or runs < 1. With runs == 1 the interval is
    (0, inf): one sample says nothing about the noise."""
    _check_stats(stats, "mean_ci")
    low, high, dof = _log_interval(math.log(stats.mean_ns),
                                   [((stats.err_ns / stats.mean_ns) ** 2, stats.runs - 1)], level)
    return Interval(stats.mean_ns, low, high, level, dof)


def geomean_ci(stats: Sequence[Stats], level: float = LEVEL) -> Interval:
    """Confidence interval (ns) on the geometric mean over shapes of the per-shape mean times (the ranking
    metric), by the log-space delta method with Welch-Satterthwaite degrees of freedom (module docstring).

    Raises ValueError when ``stats`` is empty or any entry has a non-positive mean, negative error or no runs.
    A shape with a single sample makes the interval (0, inf)."""
    if not stats:
        raise ValueError("geomean_ci needs at least one shape, got none")
    for i, s in enumerate(stats):
        _check_stats(s, f"geomean_ci shape {i}")
    n = len(stats)
    log_g = sum(math.log(s.mean_ns) for s in stats) / n
    terms = [((s.err_ns / s.mean_ns) ** 2 / n ** 2, s.runs - 1) for s in stats]
    low, high, dof = _log_interval(log_g, terms, level)
    return Interval(math.exp(log_g), low, high, level, dof)


def intervals_overlap(a: Interval, b: Interval) -> bool:
    """True when the two intervals share a point: the leaderboard calls that a tie."""
    return a.overlaps(b)


def rank_with_ties(intervals: Mapping[str, Interval]) -> list[Ranked]:
    """Rank entries by their (geomean) time intervals, lower is better.

    rank = 1 + the number of entries whose interval lies wholly below this one's; entries that overlap share
    a rank or sit one apart with ``tied_with`` naming each other. Sorted by (rank, estimate, name), so an
    imprecise entry that cannot be told apart from the best is listed among the best."""
    names = list(intervals)
    out = []
    for name in names:
        iv = intervals[name]
        faster = sum(1 for other in names if other != name and intervals[other].high < iv.low)
        tied = tuple(sorted(o for o in names if o != name and intervals[o].overlaps(iv)))
        out.append(Ranked(name, 1 + faster, iv, tied))
    out.sort(key=lambda r: (r.rank, r.interval.estimate, r.name))
    return out


# ----------------------------------------------------------------------------------------------- compare
#: A ratio within this relative distance of 1 is floating-point rounding, not a difference (matters only for
#: noise-free data, where the interval has zero width).
RATIO_ROUNDING = 1e-9


def _verdict(low: float, high: float) -> SpeedVerdict:
    if high < 1.0 - RATIO_ROUNDING:
        return SpeedVerdict.FASTER
    if low > 1.0 + RATIO_ROUNDING:
        return SpeedVerdict.SLOWER
    return SpeedVerdict.SAME


def compare_stats(a: Stats, b: Stats, level: float = LEVEL) -> Comparison:
    """A over B on one shape from two summaries: ratio of means a.mean_ns / b.mean_ns, its CI from the two
    relative standard errors added in log space, t quantile at Welch-Satterthwaite dof.

    Raises ValueError for a non-positive mean, negative error or runs < 1."""
    _check_stats(a, "compare A")
    _check_stats(b, "compare B")
    log_r = math.log(a.mean_ns) - math.log(b.mean_ns)
    terms = [((a.err_ns / a.mean_ns) ** 2, a.runs - 1), ((b.err_ns / b.mean_ns) ** 2, b.runs - 1)]
    low, high, dof = _log_interval(log_r, terms, level)
    return Comparison(math.exp(log_r), low, high, level, dof, _verdict(low, high), a.mean_ns, b.mean_ns,
                      "ratio of means, Welch t in log space")


def compare_samples(a_samples_ns: Sequence[float], b_samples_ns: Sequence[float], level: float = LEVEL,
                    paired: bool = False) -> Comparison:
    """A over B on one shape from raw per-call sample times (ns).

    Unpaired (default): the ratio of the two sample means, as ``compare_stats`` on ``summarize`` of each.
    ``paired=True`` (samples timed interleaved, a_i next to b_i, equal counts): the geometric mean of the
    per-pair ratios a_i / b_i with a t interval on the mean log ratio (n-1 dof); drift that affects both
    members of a pair cancels, so this is the sharper test for interleaved timing. The two estimate slightly
    different things (ratio of arithmetic means vs geometric mean of ratios); for noise of a few percent they
    agree to well within the interval.

    Raises ValueError on empty input, non-positive samples, or (paired) unequal lengths or fewer than 2 pairs.
    """
    if not a_samples_ns or not b_samples_ns:
        raise ValueError(f"compare_samples needs samples on both sides, got {len(a_samples_ns)} and "
                         f"{len(b_samples_ns)}")
    if any(x <= 0 for x in a_samples_ns) or any(x <= 0 for x in b_samples_ns):
        raise ValueError("compare_samples needs positive sample times (ns)")
    if not paired:
        return compare_stats(summarize(a_samples_ns), summarize(b_samples_ns), level)
    if len(a_samples_ns) != len(b_samples_ns):
        raise ValueError(f"paired comparison needs equal sample counts, got {len(a_samples_ns)} and "
                         f"{len(b_samples_ns)}")
    n = len(a_samples_ns)
    if n < 2:
        raise ValueError(f"paired comparison needs at least 2 pairs, got {n}")
    d = [math.log(x) - math.log(y) for x, y in zip(a_samples_ns, b_samples_ns)]
    mean_d = fmean(d)
    var_d = variance(d, mean_d)
    low, high, dof = _log_interval(mean_d, [(var_d / n, n - 1)], level)
    return Comparison(math.exp(mean_d), low, high, level, dof, _verdict(low, high),
                      fmean(a_samples_ns), fmean(b_samples_ns), "paired log ratio, t with n-1 dof")


def compare_geomeans(a: Sequence[Stats], b: Sequence[Stats], level: float = LEVEL) -> Comparison:
    """A over B on a whole shape set: ratio of the two geomeans of per-shape means (shape i of ``a`` matches
    shape i of ``b``), CI by the delta method over all 2S independent means, Welch-Satterthwaite dof.

    Raises ValueError when the lists are empty or of different lengths, or an entry is invalid."""
    if not a or len(a) != len(b):
        raise ValueError(f"compare_geomeans needs the same non-zero number of shapes, got {len(a)} and {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        _check_stats(x, f"compare A shape {i}")
        _check_stats(y, f"compare B shape {i}")
    n = len(a)
    log_r = sum(math.log(x.mean_ns) - math.log(y.mean_ns) for x, y in zip(a, b)) / n
    terms = [((s.err_ns / s.mean_ns) ** 2 / n ** 2, s.runs - 1) for s in (*a, *b)]
    low, high, dof = _log_interval(log_r, terms, level)
    return Comparison(math.exp(log_r), low, high, level, dof, _verdict(low, high),
                      geomean([x.mean_ns for x in a]), geomean([y.mean_ns for y in b]),
                      "ratio of geomeans, delta method in log space")


# ------------------------------------------------------------------------------------------- run selection
def comparable_key(run: RunRecord) -> tuple:
    """What makes two runs' geomeans comparable: the problem, the GPU model, the shape set's identity (its cases,
    not its label), the data mode and the mode."""
    set_id = run.shape_set_id or shape_set_id(plugs.get(run.problem).case_text(c.case) for c in run.cases)
    return run.problem, gpu_model(run.environment.device), set_id, run.data, run.mode


def best_runs(runs: Iterable[RunRecord]) -> list[RunRecord]:
    """Each variant's best run per ``comparable_key``: the lowest ``geomean_ns`` (the latest of equal ones), so
    a run slowed by a cold machine does not replace a better one. Runs without a geomean (failed, cut short,
    untimed) are left out. Returned oldest first, by ``started_at``."""
    best: dict[tuple, RunRecord] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        if run.geomean_ns is None:
            continue
        key = (run.submission.name, *comparable_key(run))
        if key not in best or run.geomean_ns <= best[key].geomean_ns:
            best[key] = run
    return sorted(best.values(), key=lambda r: r.started_at)


def plural(count: int, noun: str) -> str:
    """``1 shape``, ``2 shapes``: ``count`` and ``noun``, with an ``s`` unless the count is one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class NoRatio:
    """A shape of an A-versus-B comparison that has no ratio (one side failed or was skipped, or too few sample
    pairs). ``a_status`` / ``b_status``: each side's Status value (``pass``, ``fail``, ...); ``a_ns`` / ``b_ns``:
    that side's mean per-call time (ns) over the samples it has, None when it has none; ``note``: why there is
    no ratio, e.g. ``B fail: output 0: ...``."""

    a_status: str
    b_status: str
    note: str
    a_ns: float | None = None
    b_ns: float | None = None


CompareRow = tuple[Union[object, str], Union[Comparison, NoRatio]]  # (a case of the problem, or a label; ...)
