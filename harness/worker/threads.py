"""Threads of the worker that must exist before the submission is imported.

The parent watches the worker's threads from /proc (harness.parent.watch) and trusts only those alive before the
import; torch's intra-op (OpenMP) pool starts lazily, so the worker starts it first.
"""
from __future__ import annotations


def prestart_torch_pool() -> int:
    """Start torch's intra-op (OpenMP) thread pool now, by running a small parallel op, so its threads are alive
    before the submission is imported and can be trusted. Returns the number of intra-op threads torch uses."""
    import torch

    x = torch.ones(1 << 20)
    for _ in range(3):
        x = x + 1  # an elementwise op above torch's grain size (32768) runs on every pool thread
    return torch.get_num_threads()
