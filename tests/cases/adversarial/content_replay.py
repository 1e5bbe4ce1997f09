"""Cheat: caches outputs by a fingerprint of the input contents and replays them when the contents repeat.
Counts its cache hits in the file named by REPLAY_LOG (a harness with fresh inputs gives it none)."""
import hashlib
import os

import torch

from honest_torch import custom_kernel as _honest

_cache = {}
_hits = 0


def _key(data):
    h = hashlib.sha1()
    for a, b, _ in data[0]:
        h.update(a.view(torch.uint8).cpu().numpy().tobytes()[:4096])
        h.update(b.view(torch.uint8).cpu().numpy().tobytes()[:4096])
    return h.hexdigest()


def custom_kernel(data):
    global _hits
    key = _key(data)
    if key in _cache:
        _hits += 1
        outs = []
        for (_, _, c), saved in zip(data[0], _cache[key]):
            c.copy_(saved)
            outs.append(c)
    else:
        outs = _honest(data)
        _cache[key] = [o.clone() for o in outs]
    log = os.environ.get("REPLAY_LOG")
    if log:
        with open(log, "w") as f:
            f.write(f"{_hits} {len(_cache)}\n")
    return outs
