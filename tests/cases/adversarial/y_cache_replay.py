"""Kind: replay of earlier results keyed by content, across runs, through the sandbox's persistent writable cache.
Source: the brief's "replay keyed by content hashes" and "escaping the sandbox (writing to the checkout/store/home)".

The trick: the sandbox lets a worker write its own variant's cache root ($FP4BENCH_CACHE, kept between runs so an
export's builds survive; harness/parent/sandbox.py). Each fresh sample is new within a run, but a second run with
the same secret seed (POPCORN_SEED kept for a leaderboard's reruns, or no secret at all) draws the same inputs.
This file computes honestly and records every output under keys made of group 0's A bytes (three 48-byte windows:
one may hold a canary) and the last group's scales; at exit (atexit, the worker's normal end) it writes the table
to $FP4BENCH_CACHE. The next run loads it at import and answers every call it recognises with a dict lookup and a
copy: right values, no work.

What a correct harness must do: give a run inputs no earlier run drew (a fresh secret per run, or a per-run nonce
mixed into the seeds), or give the worker no storage that outlives the run (a cache read-only while timing, or
cleared of anything but build outputs)."""
import atexit
import os
from pathlib import Path

import torch
from honest_torch import custom_kernel as _honest

_FILE = Path(os.environ.get("FP4BENCH_CACHE") or os.environ.get("HOME") or ".") / "replay_table.pt"
_table: dict = {}
try:
    _table.update(torch.load(_FILE))
except Exception:  # noqa: BLE001 - the first run: nothing stored yet
    pass
_new = []


def _keys(x):
    flat = x[0][0][0].view(torch.uint8).reshape(-1)
    n = flat.numel()
    sfa, sfb = x[1][-1]
    tail = bytes(sfa.view(torch.uint8).reshape(-1)[:64].tolist() + sfb.view(torch.uint8).reshape(-1)[:64].tolist())
    return [bytes(flat[o:o + 48].tolist()) + tail for o in (0, n // 2 - 24, n - 48)]


@atexit.register
def _save():
    if _new:
        try:
            torch.save(_table, _FILE)
        except Exception:  # noqa: BLE001 - nowhere to keep it: no replay next time
            pass


def custom_kernel(data):
    keys = _keys(data)
    for key in keys:
        outs = _table.get(key)
        if outs is not None:
            for (_a, _b, c), o in zip(data[0], outs):
                c.copy_(o)
            return [c for _a, _b, c in data[0]]
    out = _honest(data)
    kept = [c.clone() for c in out]
    for key in keys:
        _table[key] = kept
    _new.append(1)
    return out
