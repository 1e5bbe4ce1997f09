"""Kind: poison the reference answers so that any output passes. Source: pygpubench's gc_nan (expected outputs
found through gc and filled with NaN, which its checker took as a wildcard) and combined (the same with warm-up
detection).

Every call fills with NaN each fp16 tensor it can reach through gc.get_objects() that is shaped like an output
([M, N, 1] of some group) and is not one of its own inputs, then returns its c buffers filled with NaN too,
computing nothing. In fp4bench the expected outputs live only in the parent, so what it reaches are the worker's
views of the output buffer (overwritten by the copy-out). A correct harness must fail the case: NaN is no
wildcard, and the reference is out of the submission's reach."""
import gc

import torch


def custom_kernel(data):
    shapes = {(m, n, 1) for m, n, _, _ in data[3]}
    ours = {c.data_ptr() for _, _, c in data[0]}
    for obj in gc.get_objects():
        if (type(obj) is torch.Tensor and obj.dtype == torch.float16 and tuple(obj.shape) in shapes
                and obj.data_ptr() not in ours):
            obj.fill_(float("nan"))
    out = []
    for _, _, c in data[0]:
        c.fill_(float("nan"))
        out.append(c)
    return out
