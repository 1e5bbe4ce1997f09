"""Kind (GPU): silence the harness's own detector of late work, then leave work late. Source: pygpubench's
error_counter (zero the checker's error counter instead of passing the check); issue 41 (kind 4: the copy-out).

Each call queues its GEMM (honest_torch) on a torch pool stream of its own and never joins it, so the window's end
event, on the current stream, waits for nothing. Two things would catch that: the StreamWatch (an event behind
every torch pool stream with queued work) and the outputs changing after the end event. On its first call this
submission empties the StreamWatch's list of streams in place (the watch object is the same, so the identity check
passes) and replaces the worker's ``_foreach_copy`` global with one that first makes the current stream wait for
its stream, so both copies of the outputs hold the finished values. Outputs are correct. On the CPU it computes
honestly. A correct harness must fail the case (work after the end event) or time the real work."""
import sys

import torch

from honest_torch import custom_kernel as _honest

_side = []
_worker = sys.modules.get("harness.worker.copy_back") or sys.modules["__main__"]  # where the copy-out lives


def _join_then_copy(dst, src, _real=getattr(_worker, "_foreach_copy", None)):
    if _side:
        torch.cuda.current_stream().wait_stream(_side[0])
    return _real(dst, src)


def custom_kernel(data):
    if not torch.cuda.is_available():
        return _honest(data)
    if not _side:
        f = sys._getframe(1)
        while f is not None and not (f.f_code.co_name == "run" and "req" in f.f_locals):
            f = f.f_back
        watch = getattr(f.f_locals["self"], "watch", None) if f is not None else None
        if watch is not None:
            del watch.streams[:]
        _worker._foreach_copy = _join_then_copy
        _side.append(torch.cuda.Stream())
    _side[0].wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side[0]):
        return _honest(data)
