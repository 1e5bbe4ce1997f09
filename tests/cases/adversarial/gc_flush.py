"""Cheat: finds the harness's objects through the garbage collector on its first call and shrinks the L2
flush buffer / swaps the worker's result sender, so later samples run warm or report what it likes."""
import gc

import torch

from honest_torch import custom_kernel as _honest

_done = False


def custom_kernel(data):
    global _done
    if not _done:
        _done = True
        for obj in gc.get_objects():
            kind = type(obj).__name__
            if kind == "L2Flush":
                obj._buf = torch.empty(1, dtype=torch.uint8, device=obj._buf.device)
            elif kind == "Worker" and hasattr(obj, "send"):
                real_send = obj.send
                obj.send = lambda header, payload=b"": real_send(header, payload)
    return _honest(data)
