"""Kind: find the guard's stored start mark by scanning memory and move it forward. Source: issue 41 (kind 5);
pygpubench's test_canary_direct (scan your own memory for a known value and overwrite it) and event_array.

The guard keeps the CPU window's start mark as a struct timespec in its static data, where no Python object points.
After each call this submission scans the guard's writable data (its rw mappings in /proc/self/maps, no symbols
needed) for the newest CLOCK_MONOTONIC timestamp of the last minute, which is the current window's start, and
rewrites it to 7/8 of the way from the true start to now: the end mark then reads about 1/8 of the real window.
Outputs are honest_torch's. On a GPU the marks are CUDA events, no timestamp is found and nothing changes (the GPU
form of the kind is x_event_swap.py). A correct harness must fail the case (its own bracket disagrees) or report
the real time."""
import ctypes
import time

import guardmem
from honest_torch import custom_kernel as _honest

_seen = {"written": None, "start": None}


def _newest_mark(now: int):
    """(address, ns) of the newest timespec in the guard's data within the last minute, or None."""
    best = None
    for start, end in guardmem.writable_regions():
        words = (ctypes.c_int64 * ((end - start) // 8)).from_address(start)
        for i in range(len(words) - 1):
            sec, nsec = words[i], words[i + 1]
            t = sec * 10**9 + nsec
            if 0 <= nsec < 10**9 and now - 60 * 10**9 < t <= now and (best is None or t > best[1]):
                best = (start + 8 * i, t)
    return best


def custom_kernel(data):
    out = _honest(data)
    now = time.monotonic_ns()
    mark = _newest_mark(now)
    if mark is not None:
        addr, t = mark
        if t != _seen["written"]:  # a window we have not moved yet: t is its true start
            _seen["start"] = t
        fake = _seen["start"] + (now - _seen["start"]) * 7 // 8
        ctypes.c_int64.from_address(addr).value, ctypes.c_int64.from_address(addr + 8).value = divmod(fake, 10**9)
        _seen["written"] = fake
    return out
