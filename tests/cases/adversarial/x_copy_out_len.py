"""Kind: defer the work to a builtin the harness calls after the end mark. Source: issue 41 (kind 4).

builtins.len is replaced by a wrapper that, while calls are queued, first computes their GEMMs (honest_torch) and
then answers. Every call returns its c buffers unfilled and queues its input; the worker's copy-out checks each
returned list with len() right after the window's end mark, so the queued work runs there, in the worker's main
thread, before anything is copied: correct outputs, an almost empty window. Nothing of fp4bench is touched, only a
builtin the whole interpreter shares. A correct harness must not run code the submission can reach between the
window and the copy-out (or must detect it) and fail the case, or time the real work."""
import builtins

from honest_torch import custom_kernel as _honest

_pending = []
_busy = []
_real_len = builtins.len


def _len(obj):
    if _pending and not _busy:
        _busy.append(True)
        try:
            while _pending:
                _honest(_pending.pop(0))
        finally:
            _busy.clear()
    return _real_len(obj)


builtins.len = _len


def custom_kernel(data):
    _pending.append(data)
    return [c for _, _, c in data[0]]
