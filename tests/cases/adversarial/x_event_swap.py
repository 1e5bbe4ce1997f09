"""Kind (GPU): swap the guard's CUDA event handles. Source: pygpubench's event_array (overwrite the harness's array
of start/end events so that elapsed time reads ~0) and issue 41 (kind 5: native writes to the timing guard).

The guard keeps the window's CUDA events in its static data, right after the context they belong to. On its first
call this submission finds that context's handle (cuCtxGetCurrent) among the guard's writable words and writes over
the next one, the start event, the handle of an event of its own; every call then records that event again as it
begins. The window's start thus moves to the start of the last call: the time reads about 1/15 of the real one.
Outputs are honest_torch's. On the CPU nothing changes (x_guard_start_scan.py is the CPU form). A correct harness
must fail the case (its own bracket disagrees) or report the real time."""
import ctypes

import torch

import guardmem
from honest_torch import custom_kernel as _honest

_event = []


def _start_event_slot() -> int:
    ctx = ctypes.c_void_p()
    ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(ctx))
    for start, end in guardmem.writable_regions():
        words = (ctypes.c_uint64 * ((end - start) // 8)).from_address(start)
        for i in range(len(words) - 2):
            if words[i] == ctx.value and words[i + 1] and words[i + 2]:
                return start + 8 * (i + 1)
    raise RuntimeError("the guard's events were not found")


def custom_kernel(data):
    if torch.cuda.is_available():
        if not _event:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()  # the driver event exists from the first record
            ctypes.c_void_p.from_address(_start_event_slot()).value = ev.cuda_event
            _event.append(ev)
        _event[0].record()
    return _honest(data)
