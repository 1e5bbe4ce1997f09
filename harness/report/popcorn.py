"""The official ``key: value`` result stream (written to the descriptor named by POPCORN_FD).

Keys and codes from the official evaluator (docs/problem.md). Only the parent writes here; the
worker never has this descriptor.
"""
from __future__ import annotations

import fcntl
import os

from harness import plugs
from harness.results.record import RunRecord, Status


def lines(record: RunRecord) -> list[str]:
    """The key stream for ``record``: test-* keys in test mode, benchmark-* keys otherwise, then ``check``."""
    prefix = "test" if record.mode == "test" else "benchmark"
    out = [f"{prefix}-count: {len(record.cases)}"]
    plug = plugs.get(record.problem)
    for i, c in enumerate(record.cases):
        out.append(f"{prefix}.{i}.spec: {plug.case_text(c.case)}")
        if c.stats and prefix == "benchmark":
            s = c.stats
            out += [f"{prefix}.{i}.runs: {s.runs}", f"{prefix}.{i}.mean: {s.mean_ns}", f"{prefix}.{i}.std: {s.std_ns}",
                    f"{prefix}.{i}.err: {s.err_ns}", f"{prefix}.{i}.best: {s.best_ns}", f"{prefix}.{i}.worst: {s.worst_ns}"]
        if c.passed:
            out.append(f"{prefix}.{i}.status: pass")
        else:
            out.append(f"{prefix}.{i}.status: fail")
            out.append(f"{prefix}.{i}.error: {error_text(c)}")
    out.append(f"check: {'pass' if all(c.passed for c in record.cases) else 'fail'}")
    return out


def error_text(case) -> str:
    """The first line of a failed case's message; a timeout's or a crash's prefixed with that word, which the
    message may not say (a failure's or an error's message names its own kind: "mismatch ...", "raised: ...")."""
    head = case.message.splitlines()[0] if case.message else ""
    if case.status in (Status.FAIL, Status.ERROR):
        return head or case.status.value
    return f"{case.status.value}: {head}" if head else case.status.value


class PopcornError(ValueError):
    """POPCORN_FD does not name an open, writable descriptor (the message says what it holds)."""


def stream_fd(environ=os.environ) -> int | None:
    """The descriptor POPCORN_FD names (None when unset or empty), checked so that a run learns before measuring
    that its stream could not be written. Raises PopcornError unless it is a non-negative integer naming an
    open descriptor opened for writing."""
    raw = environ.get("POPCORN_FD")
    if not raw:
        return None
    try:
        fd = int(raw.strip(), 10)
    except ValueError:
        raise PopcornError(f"POPCORN_FD: expected a file descriptor number, got {raw!r}") from None
    if fd < 0:
        raise PopcornError(f"POPCORN_FD: expected a file descriptor number, got {fd}")
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        raise PopcornError(f"POPCORN_FD: expected an open descriptor, got {fd}, which is closed") from None
    if flags & os.O_ACCMODE == os.O_RDONLY:
        raise PopcornError(f"POPCORN_FD: expected a descriptor open for writing, got {fd}, open read-only")
    return fd


def write_stream(record: RunRecord, environ=os.environ) -> bool:
    """Write the stream to POPCORN_FD when set; returns whether it was written. Raises PopcornError as
    ``stream_fd``, OSError when the write itself fails."""
    fd = stream_fd(environ)
    if fd is None:
        return False
    with os.fdopen(fd, "w", closefd=False) as f:
        f.write("\n".join(lines(record)) + "\n")
        f.flush()
    return True
