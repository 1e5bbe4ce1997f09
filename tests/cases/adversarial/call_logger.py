"""Honest, and logs per call to $CALL_LOG: a mark of its input (group 0's B, first 8 bytes as an int) and how
many input_t objects the garbage collector can reach at that moment (what a cheat could find and precompute)."""
import gc
import os

import torch

from honest_torch import custom_kernel as _honest


def _looks_like_input(obj) -> bool:
    return (type(obj) is tuple and len(obj) == 4 and type(obj[0]) is list and obj[0]
            and type(obj[0][0]) is tuple and len(obj[0][0]) == 3 and isinstance(obj[0][0][1], torch.Tensor))


def custom_kernel(data):
    mark = int(data[0][0][1].view(-1)[:8].view(torch.int64)[0])
    reachable = sum(1 for o in gc.get_objects() if _looks_like_input(o))
    with open(os.environ["CALL_LOG"], "a") as log:
        log.write(f"{mark} {reachable}\n")
    return _honest(data)
