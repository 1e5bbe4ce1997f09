"""Kind: copy the reference answers instead of computing. Source: pygpubench's gc_copy (expected outputs found
through gc, matched to the output buffers, copied).

Every call looks through gc.get_objects() for an fp16 tensor shaped like each of its outputs ([M, N, 1]) that is
none of its inputs, and copies the first one found into c; only where none is found does it compute (honest_torch).
In fp4bench the expected outputs exist only in the parent: what it finds in the worker are its own tensors of that
shape (other calls' unfilled c buffers, views of the output buffer), so copying them gives wrong answers. A correct
harness must fail the case (the copied outputs are wrong) or, should nothing be found, time honest work."""
import gc

import torch

from honest_torch import custom_kernel as _honest


def custom_kernel(data):
    ours = {t.data_ptr() for x in data[0] for t in x}
    wanted = [(m, n, 1) for m, n, _, _ in data[3]]
    found = {}
    for obj in gc.get_objects():
        if type(obj) is torch.Tensor and obj.dtype == torch.float16 and obj.data_ptr() not in ours:
            for g, shape in enumerate(wanted):
                if tuple(obj.shape) == shape and g not in found:
                    found[g] = obj
    if len(found) < len(wanted):
        return _honest(data)
    out = []
    for g, (_, _, c) in enumerate(data[0]):
        c.copy_(found[g])
        out.append(c)
    return out
