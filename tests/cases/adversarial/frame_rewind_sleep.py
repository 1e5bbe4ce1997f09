"""Cheat, checkable: frame_rewind.py with a known cost. Each call sleeps 3 ms, then walks up the call stack and
rewrites every local variable of every frame that holds a number close to the monotonic or perf counters' "now"
(any name, not only t0), as a timing loop kept in Python would hold its start mark. With the window's marks held in
C nothing changes and every call still takes at least 3 ms."""
import ctypes
import sys
import time

from honest_torch import custom_kernel as _honest


def _rewind() -> None:
    clocks = (time.perf_counter_ns(), time.monotonic_ns(), time.perf_counter(), time.monotonic())
    f = sys._getframe(2)
    while f is not None:
        changed = False
        for name, value in list(f.f_locals.items()):
            if type(value) in (int, float):
                for now in clocks:
                    if abs(value - now) < 0.5 * abs(now) * 1e-3 + (5e9 if type(now) is int else 5.0):
                        f.f_locals[name] = type(value)(now)
                        changed = True
        if changed and sys.version_info < (3, 13):
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(f), ctypes.c_int(0))
        f = f.f_back


def custom_kernel(data):
    out = _honest(data)
    time.sleep(0.003)
    _rewind()
    return out
