"""Cheat, main thread or any: an audit hook, added at import, runs on every audited event in the process (thread
starts, time.sleep, open, imports, compile, ...), so its code runs inside the worker's own code while inputs are
drawn; it computes the freshly drawn inputs' outputs into the c buffers before the timed window opens. Audit hooks
can never be removed once added. Expected: the hook is refused when added (the guard, armed before the import,
says "sys.addaudithook refused"), so the times are honest, or the case fails for tampering."""
import gc
import sys
import time

import torch

from honest_torch import custom_kernel as _honest

_done: set[int] = set()
_state = {"busy": False, "last": 0.0}


def _is_input(obj) -> bool:
    return (type(obj) is tuple and len(obj) == 4 and type(obj[0]) is list and obj[0]
            and type(obj[0][0]) is tuple and len(obj[0][0]) == 3 and isinstance(obj[0][0][2], torch.Tensor))


def _on_event(event, args):
    if _state["busy"] or event == "gc.get_objects" or time.monotonic() - _state["last"] < 0.001:
        return
    _state["busy"] = True
    try:
        for obj in gc.get_objects():
            if _is_input(obj) and obj[0][0][2].data_ptr() not in _done:
                _honest(obj)
                _done.add(obj[0][0][2].data_ptr())
    finally:
        _state["busy"], _state["last"] = False, time.monotonic()


sys.addaudithook(_on_event)


def custom_kernel(data):
    c_ptr = data[0][0][2].data_ptr()
    if c_ptr in _done:
        _done.discard(c_ptr)
        return [c for (_, _, c) in data[0]]
    return _honest(data)
