"""Kind: PARTIAL deferral to the harness's copy-out (x_copy_out_foreach.py, for part of the work only). Source:
issue 41 (kind 4).

Each call computes its first group inside the window and defers the rest (here the second, larger group: about 70 %
of the FLOPs of the two-group test case) to the worker's ``_foreach_copy`` global, replaced so that it computes the
queued groups right after the end mark and then copies. The time shrinks by a factor of 2-3, not 100, so a defence
that only looks for impossible times, or that compares the window with a generous margin, lets it through.
Outputs are correct. A correct harness must fail the case (the work after the end mark is seen, or its own
bracket disagrees) or time all of the work."""
import sys

from honest_torch import custom_kernel as _honest

_pending = []
_worker = sys.modules.get("harness.worker.copy_back") or sys.modules["__main__"]  # where the copy-out lives


def _groups(data, which):
    return tuple([part[g] for g in which] for part in data)


def _compute_then_copy(dst, src, _real=getattr(_worker, "_foreach_copy", None)):
    while _pending:
        _honest(_pending.pop(0))
    return _real(dst, src)


if hasattr(_worker, "_foreach_copy"):
    _worker._foreach_copy = _compute_then_copy


def custom_kernel(data):
    _honest(_groups(data, [0]))
    _pending.append(_groups(data, range(1, len(data[0]))))
    return [c for _, _, c in data[0]]
