"""Cheat: a call starts a short-lived thread that waits for the next inputs to be drawn, precomputes one and
exits, hoping no thread is alive when the next timed window opens. It is alive when that call returns."""
import gc
import threading
import time

import torch

from honest_torch import custom_kernel as _honest

_done: set[int] = set()


def _is_input(obj) -> bool:
    return (isinstance(obj, tuple) and len(obj) == 4 and isinstance(obj[0], list) and obj[0]
            and isinstance(obj[0][0], tuple) and len(obj[0][0]) == 3 and isinstance(obj[0][0][2], torch.Tensor))


def _once() -> None:
    end = time.monotonic() + 5
    while time.monotonic() < end:
        for obj in gc.get_objects():
            if _is_input(obj) and obj[0][0][2].data_ptr() not in _done:
                _honest(obj)
                _done.add(obj[0][0][2].data_ptr())
                return
        time.sleep(0.001)


def custom_kernel(data):
    c_ptr = data[0][0][2].data_ptr()
    out = [c for (_, _, c) in data[0]] if c_ptr in _done else _honest(data)
    _done.discard(c_ptr)
    threading.Thread(target=_once, daemon=True, name="one-shot").start()
    return out
