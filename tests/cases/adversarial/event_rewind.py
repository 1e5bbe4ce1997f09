"""Cheat (CUDA): frame_rewind.py for events. From inside each call it walks up the Python call stack and, through
the garbage collector, finds every torch.cuda.Event and records it again on the current stream, so a start event
held by the harness in Python now marks the start of this call: the window covers only the last call. Nothing is
replaced, so comparing the harness's objects by identity sees nothing. Expected: the reported time is the real one
(the window's events are created and recorded in C, out of reach), or the case fails."""
import gc
import sys

import torch

from honest_torch import custom_kernel as _honest


def _rerecord_events():
    found = {id(o): o for o in gc.get_objects() if isinstance(o, torch.cuda.Event)}
    frame = sys._getframe(2)
    while frame is not None:
        found.update({id(v): v for v in frame.f_locals.values() if isinstance(v, torch.cuda.Event)})
        frame = frame.f_back
    for event in found.values():
        event.record()


def custom_kernel(data):
    if torch.cuda.is_available():
        _rerecord_events()
    return _honest(data)
