"""Cheat, main thread only: plants hooks that let its code run inside the worker's own code, no thread of its own.
A gc callback (runs in whichever thread collects) and, on 3.12+, a sys.monitoring PY_START callback (every Python
function start in any thread, the input-drawing pool included) look for freshly drawn inputs through the garbage
collector and compute their outputs into the c buffers before the timed window opens; the timed calls then only
return c. Planted at import and again in every call. A thread check sees nothing (the work runs on the worker's
threads). Expected: the hooks are removed before the inputs are drawn and when each window closes (read_line /
run_calls scrub, named in cleared()), so the precomputation never happens and the times are honest, or the case
fails for tampering."""
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


def _precompute(*_args):
    if _state["busy"] or time.monotonic() - _state["last"] < 0.001:
        return
    _state["busy"] = True
    try:
        for obj in gc.get_objects():
            if _is_input(obj) and obj[0][0][2].data_ptr() not in _done:
                _honest(obj)
                _done.add(obj[0][0][2].data_ptr())
    finally:
        _state["busy"], _state["last"] = False, time.monotonic()


def _plant():
    if _precompute not in gc.callbacks:
        gc.callbacks.append(_precompute)
    mon = getattr(sys, "monitoring", None)
    if mon is not None and mon.get_tool(4) is None:
        mon.use_tool_id(4, "precompute")
        mon.register_callback(4, mon.events.PY_START, _precompute)
        mon.set_events(4, mon.events.PY_START)


_plant()


def custom_kernel(data):
    _plant()
    c_ptr = data[0][0][2].data_ptr()
    if c_ptr in _done:
        _done.discard(c_ptr)
        return [c for (_, _, c) in data[0]]
    return _honest(data)
