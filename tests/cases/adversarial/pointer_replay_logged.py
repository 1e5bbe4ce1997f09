"""The shared pointer_cache.py cheat, counting its cache hits in the file named by REPLAY_LOG: a hit must never
pass (fresh contents behind a recycled pointer), a miss is honest work."""
import os

from honest_torch import custom_kernel as _honest

_cache = {}
_hits = 0


def custom_kernel(data):
    global _hits
    key = tuple(a.data_ptr() for (a, _, _) in data[0])
    if key in _cache:
        _hits += 1
        outs = []
        for (_, _, c), saved in zip(data[0], _cache[key]):
            c.copy_(saved)
            outs.append(c)
    else:
        outs = _honest(data)
        _cache[key] = [c.clone() for c in outs]
    with open(os.environ["REPLAY_LOG"], "w") as f:
        f.write(f"{_hits}\n")
    return outs
