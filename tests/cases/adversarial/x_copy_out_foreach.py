"""Kind: defer the work to a function the harness itself calls right after the end mark. Source: issue 41 (kind 4).

The worker copies what the calls returned to the output buffer with ``_foreach_copy``, a global of its copy-out
module (harness.worker.copy_back) captured from torch._foreach_copy_ before the import (so replacing torch's
attribute would not reach it). This submission replaces that global of the worker's module: every call returns
its c buffers unfilled and queues its input; the replacement computes every queued GEMM (honest_torch) and then
copies. The work runs in the worker's own main thread, after the window's end mark and before the copy, so the
outputs the parent judges are correct while the window held almost nothing. A correct harness must not run
functions the submission can replace between the window and the copy-out (or must see that it did) and fail the
case, or time the real work."""
import sys

from honest_torch import custom_kernel as _honest

_pending = []
_worker = sys.modules.get("harness.worker.copy_back") or sys.modules["__main__"]  # where the copy-out lives


def _compute_then_copy(dst, src, _real=getattr(_worker, "_foreach_copy", None)):
    while _pending:
        _honest(_pending.pop(0))
    return _real(dst, src)


if hasattr(_worker, "_foreach_copy"):
    _worker._foreach_copy = _compute_then_copy


def custom_kernel(data):
    _pending.append(data)
    return [c for _, _, c in data[0]]
