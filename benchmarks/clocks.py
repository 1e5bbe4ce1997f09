"""Wall clocks on functions, for the scripts here that time the harness's own phases in-process (run_phases.py,
sample_timeline.py): the harness itself is unchanged, its functions are wrapped."""
from __future__ import annotations

import time


def clocked(name: str, fn, clocks: dict[str, list[float]], scale: float = 1.0):
    """``fn`` wrapped so that each call appends its wall time (seconds x ``scale``) to ``clocks[name]``, also
    when it raises."""
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clocks.setdefault(name, []).append((time.perf_counter() - t0) * scale)
    return wrapper
