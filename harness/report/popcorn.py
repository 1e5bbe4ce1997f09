"""The official ``key: value`` result stream (written to the descriptor named by POPCORN_FD).

Keys and codes from the official evaluator (shared/docs/nvfp4_group_gemm.md). Only the parent writes here; the
worker never has this descriptor.
"""
from __future__ import annotations

import os

from harness.results.record import RunRecord


def lines(record: RunRecord) -> list[str]:
    """The key stream for ``record``: test-* keys in test mode, benchmark-* keys otherwise, then ``check``."""
    prefix = "test" if record.mode == "test" else "benchmark"
    out = [f"{prefix}-count: {len(record.cases)}"]
    for i, c in enumerate(record.cases):
        out.append(f"{prefix}.{i}.spec: {c.case.text()}")
        if c.stats and prefix == "benchmark":
            s = c.stats
            out += [f"{prefix}.{i}.runs: {s.runs}", f"{prefix}.{i}.mean: {s.mean_ns}", f"{prefix}.{i}.std: {s.std_ns}",
                    f"{prefix}.{i}.err: {s.err_ns}", f"{prefix}.{i}.best: {s.best_ns}", f"{prefix}.{i}.worst: {s.worst_ns}"]
        if c.passed:
            out.append(f"{prefix}.{i}.status: pass")
        else:
            out.append(f"{prefix}.{i}.status: fail")
            out.append(f"{prefix}.{i}.error: {c.status.value}: {c.message.splitlines()[0] if c.message else ''}")
    out.append(f"check: {'pass' if all(c.passed for c in record.cases) else 'fail'}")
    return out


def write_stream(record: RunRecord, environ=os.environ) -> bool:
    """Write the stream to POPCORN_FD when set; returns whether it was written."""
    raw = environ.get("POPCORN_FD")
    if not raw:
        return False
    with os.fdopen(int(raw), "w", closefd=False) as f:
        f.write("\n".join(lines(record)) + "\n")
        f.flush()
    return True
