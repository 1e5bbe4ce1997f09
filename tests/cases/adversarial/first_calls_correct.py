"""Cheat: correct for its first three calls (what a harness that checks only early calls sees), then
returns the untouched output buffers."""
from honest_torch import custom_kernel as _honest

_calls = 0


def custom_kernel(data):
    global _calls
    _calls += 1
    if _calls <= 3:
        return _honest(data)
    return [c for (_, _, c) in data[0]]
