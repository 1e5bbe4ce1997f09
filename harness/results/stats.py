"""Statistics from raw samples, and the official stopping criterion, kept apart from the timing loop.

Facts from docs/problem.md ("The official evaluator", timing).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from harness.results.record import Stats


def summarize(samples_ns: Sequence[float]) -> Stats:
    """Official summary: mean, sample std (n-1), err = std / sqrt(n), best, worst; all ns.

    Raises ValueError on an empty sequence. With one sample std and err are 0.
    """
    n = len(samples_ns)
    if n == 0:
        raise ValueError("expected at least one sample, got none")
    mean = sum(samples_ns) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in samples_ns) / (n - 1)) if n > 1 else 0.0
    return Stats(n, mean, std, std / math.sqrt(n), min(samples_ns), max(samples_ns))


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values. Raises ValueError if empty or any value <= 0."""
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"geomean needs positive values, got {list(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass(frozen=True)
class StoppingRule:
    """When to stop sampling one shape: at least ``min_runs`` samples and ``min_time_ns`` of measured time, then
    stop at relative standard error < ``max_rel_err``, or mean * runs > ``budget_ns``, or ``max_wall_ns`` of wall
    time; never more than ``max_runs`` samples. No defaults here: the numbers (the official ones) live in
    harness.parent.settings.Settings, which builds the rule per mode (``Settings.stopping_rule``)."""

    min_runs: int
    min_time_ns: float
    max_rel_err: float
    budget_ns: float
    max_wall_ns: float
    max_runs: int

    def is_finished(self, samples_ns: Sequence[float], wall_ns: float) -> bool:
        """True when sampling should stop, given the per-call sample times so far and the wall time spent."""
        n = len(samples_ns)
        if n >= self.max_runs:
            return True
        if n < self.min_runs or sum(samples_ns) < self.min_time_ns and wall_ns < self.max_wall_ns:
            return False
        s = summarize(samples_ns)
        return (s.err_ns / s.mean_ns < self.max_rel_err or s.mean_ns * s.runs > self.budget_ns
                or wall_ns > self.max_wall_ns)
