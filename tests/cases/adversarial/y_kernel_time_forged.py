"""Kind: a forged figure on the reply path: the kernel time (``kernel us``, ``host share``) of a run record. GPU-only
(the kernel-time pass runs only on CUDA; on a CPU this file is honest_torch and passes with its honest time).

The trick: after the timed samples the parent asks for one ``kernels`` pass; the worker runs the calls under
torch.profiler and returns ``kernel_ns`` in its RunReply, which the parent stores in the record and the reports
show (harness/parent/case_runner.py ``kernel_time`` returns ``reply.kernel_ns`` as it came). This file computes
honestly and replaces ``harness.worker.timing.busy_us`` (looked up on the module by Worker._profile) with a function
that returns a thousandth of the real union: the record says the kernels take 0.1 % of their real time, and the host
share reads as ~100 %. Expected on the H200: PASS, with ``kernel_ns`` about 1000x below the event time per call.

What a correct harness must do: measure the kernel time in the parent (CUPTI there, or its own events around the
pass), or mark the figure as the worker's claim and bound it (kernel time above the physical floor, and not far
below the bracketed event time)."""
import sys

from honest_torch import custom_kernel as _honest

_done = []


def _patch():
    timing = sys.modules["harness.worker.timing"]
    real = timing.busy_us
    timing.busy_us = lambda intervals: real(intervals) / 1000.0
    _done.append(True)


def custom_kernel(data):
    if not _done:
        _patch()
    return _honest(data)
