"""Cheat, main thread only: an interval timer delivers SIGALRM every 2 ms, and its Python handler (which always runs
in the main thread, wherever that is: drawing inputs, waiting for the drawing pool) looks for freshly drawn inputs
through the garbage collector and computes their outputs into the c buffers before the timed window opens. Armed at
import and again in every call. No thread of its own, nothing replaced. Expected: the handler is reset and the timer
disarmed before the inputs are drawn and when each window closes (named in cleared(): "interval timer
ITIMER_REAL", "signal handler for SIGALRM"), so the times are honest, or the case fails for tampering."""
import gc
import signal

import torch

from honest_torch import custom_kernel as _honest

_done: set[int] = set()
_busy = [False]


def _is_input(obj) -> bool:
    return (type(obj) is tuple and len(obj) == 4 and type(obj[0]) is list and obj[0]
            and type(obj[0][0]) is tuple and len(obj[0][0]) == 3 and isinstance(obj[0][0][2], torch.Tensor))


def _on_alarm(signum, frame):
    if _busy[0]:
        return
    _busy[0] = True
    try:
        for obj in gc.get_objects():
            if _is_input(obj) and obj[0][0][2].data_ptr() not in _done:
                _honest(obj)
                _done.add(obj[0][0][2].data_ptr())
    finally:
        _busy[0] = False


def _arm():
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)


_arm()


def custom_kernel(data):
    _arm()
    c_ptr = data[0][0][2].data_ptr()
    if c_ptr in _done:
        _done.discard(c_ptr)
        return [c for (_, _, c) in data[0]]
    return _honest(data)
