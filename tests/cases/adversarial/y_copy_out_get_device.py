"""Kind: work deferred into the worker's copy-out, through a method of the outputs instead of a global of the
copy-out module. Source: issue 41 (kind 4), x_copy_out_*'s kind by another door.

The trick: harness.worker.copy_back checks each returned tensor with ``o.get_device() == where`` before it copies
it (its functions were captured before the import, but this is a method looked up on the tensor's class at the
call). This file replaces ``torch.Tensor.get_device``: every call returns its c buffers unfilled and queues its
input; the first get_device of a copy-out computes every queued GEMM (honest_torch) and then answers as the real
one does. The window holds almost nothing; the work runs after the end mark, before the copy.

What a correct harness must do: keep the work inside what it times (fp4bench: the parent's bracket holds the
copy-out, so the window falls short of it and the case fails on its strikes), or call nothing the submission can
replace between the end mark and the copy."""
import torch
from honest_torch import custom_kernel as _honest

_pending = []
_real = torch.Tensor.get_device


def _get_device(self):
    while _pending:
        _honest(_pending.pop(0))
    return _real(self)


torch.Tensor.get_device = _get_device


def custom_kernel(data):
    if data[0][0][0].shape[0] == 0:
        return _honest(data)
    _pending.append(data)
    return [c for _a, _b, c in data[0]]
