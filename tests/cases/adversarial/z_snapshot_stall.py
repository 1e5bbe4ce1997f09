"""Kind: work before the window by the worker's own (trusted) main thread, hidden from the idle rule by making the
parent's own /proc read slow. CPU; the same order holds on CUDA.

The trick: the parent publishes a timed sample's inputs (canaries planted) and only then reads the worker's tree
from /proc (``watch.snapshot``, two files per task) for its idle verdict, and only after that fixes the canaries,
takes tg and sends the request (harness/parent/session.py ``run``; case_runner ``_ready`` publishes first). The
main thread is the tree's first task, so its CPU is read at the very start of that snapshot: whatever it does
during the rest of the snapshot is counted in no verdict. On the correctness call this file starts THREADS
threads that block on a lock forever (no CPU once blocked: the foreign-task watch sees nothing); each snapshot then
reads 3800 more tasks, some 150 ms of the parent's time on this host, three times per sample: a first pass over every
task's ``children``, then ``schedstat`` and ``stat`` task by task, the main thread first. The worker times its own
first pass over the same files and starts computing 1.3 times that long after the publication it sees. After every reply
the worker's ``release`` (wrapped on the guard module, found through the frames as y_reply_delay_precompute finds
``cleared``) polls the device buffer cheaply (under the idle allowance) until the next sample is published, then
computes every call's product from it (canaries and all) while the parent is still reading /proc, and returns to
read the request. In the window each call repairs the canary bytes the parent fixed (rank-1 updates, as
y_reply_delay_precompute does, in numpy). Works with a secret seed; every sample including the first.

What a correct harness must do: take the idle verdict's snapshot before publishing (or publish only after it, with
nothing between the snapshot and tg), read the trusted tasks last (or twice, around the snapshot), and bound the
time a snapshot may take (or count the tasks: thousands of idle threads are a finding of their own)."""
import os
import sys
import threading
import time

import numpy as np
import torch
import y_reply_delay_precompute as Y
from problems.nvfp4_group_gemm.formats import blocked_index
from honest_torch import custom_kernel as _honest

THREADS = 3800
_s = {"hooked": False, "pre": {}}
hits = [0, 0]
_LUT = np.array(Y._E2M1, dtype=np.float32)
_E4M3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()


_PAIR = np.stack([_LUT[np.arange(256) & 15], _LUT[np.arange(256) >> 4]], -1)  # byte -> (low, high) value


def _deq(u8, sf):
    v = _PAIR[u8].reshape(u8.shape[0], -1, 16)
    return (v * sf[:, :, None]).reshape(u8.shape[0], -1)


_INDEX: dict = {}


def _scales(reordered, rows, k):
    """The valid scales of a blocked view as float32 [rows, K/16] (its storage is contiguous: one gather)."""
    if (rows, k) not in _INDEX:
        _INDEX[rows, k] = blocked_index(rows, k // 16).numpy()
    u8 = reordered.view(torch.uint8)
    flat = torch.as_strided(u8, (u8.numel(),), (1,), u8.storage_offset()).numpy()
    return _E4M3[flat[_INDEX[rows, k]]]


def _precompute():
    """Every call's product from the device buffer as it is now (canaries in place), in numpy."""
    pre = {}
    for abc, _sf, sfr, sizes in Y._state["inputs"]:
        groups = []
        for (a, b, _c), (ra, rb), (m, n, k, _l) in zip(abc, sfr, sizes):
            ua, ub = Y._u8(a).numpy().copy(), Y._u8(b).numpy().copy()
            sa, sb = _scales(ra, m, k), _scales(rb, n, k)
            da, db = _deq(ua, sa), _deq(ub, sb)
            prod = (torch.from_numpy(da) @ torch.from_numpy(db).T).numpy()
            groups.append((ua, ub, sa, sb, da, db, prod))
        pre[abc[0][0].data_ptr()] = groups
    _s["pre"] = pre


def _delta(now, was, sf):
    idx = np.flatnonzero(now != was)
    if idx.size > 64:
        return None
    row, kb = np.divmod(idx, now.shape[1])
    new, old = now.reshape(-1)[idx], was.reshape(-1)[idx]
    s = sf[row, (2 * kb) // 16]
    return row, kb, (_LUT[new & 15] - _LUT[old & 15]) * s, (_LUT[new >> 4] - _LUT[old >> 4]) * s


def _repair(data, groups):
    """The product with the canary bytes the parent fixed since ``_precompute`` (rank-1 updates)."""
    outs = []
    for (a, b, _c), (ua, ub, sa, sb, da, db, prod) in zip(data[0], groups):
        ca, cb = _delta(Y._u8(a).numpy(), ua, sa), _delta(Y._u8(b).numpy(), ub, sb)
        if ca is None or cb is None:
            return None
        row, kb, d0, d1 = ca
        upd = d0[:, None] * db[:, 2 * kb].T + d1[:, None] * db[:, 2 * kb + 1].T
        for i, r in enumerate(row.tolist()):
            prod[r] += upd[i]
            da[r, 2 * kb[i]] += d0[i]
            da[r, 2 * kb[i] + 1] += d1[i]
        col, kb, d0, d1 = cb
        upd = d0[:, None] * da[:, 2 * kb].T + d1[:, None] * da[:, 2 * kb + 1].T
        for i, c in enumerate(col.tolist()):
            prod[:, c] += upd[i]
        outs.append(torch.from_numpy(prod).half().unsqueeze(-1))
    return outs


def _spawn():
    threading.stack_size(64 << 10)
    lock = threading.Lock()
    lock.acquire()
    for _ in range(THREADS):
        threading.Thread(target=lock.acquire, daemon=True).start()
    _s["lock"] = lock
    t = time.monotonic()
    for tid in os.listdir("/proc/self/task"):  # what the parent's first pass (watch.tree) reads per task
        with open(f"/proc/self/task/{tid}/children", "rb") as f:
            f.read()
    _s["tree_s"] = time.monotonic() - t


def _hook():
    guard, f = None, sys._getframe(1)
    while f is not None and guard is None:
        w = f.f_locals.get("window")
        if w is not None and hasattr(w, "release") and hasattr(w, "run_calls"):
            guard = w
        f = f.f_back
    if guard is None:
        return
    release = guard.release

    def wrapped():
        release()
        ins = Y._state["inputs"]
        if len(ins) == 15 and "probe" in Y._state:
            probe = Y._u8(ins[-1][0][-1][1]).reshape(-1)[-256:]
            t = time.monotonic()
            if Y._landed(probe, Y._state["probe"], limit_s=3.0):
                # the parent reads the main thread's CPU first in its second pass, after the tree walk
                time.sleep(max(0.0, 1.3 * _s["tree_s"] - 0.003))
                t1 = time.monotonic()
                _precompute()
                _s["last_precompute_s"] = (t1 - t, time.monotonic() - t1)

    guard.release = wrapped
    _s["hooked"] = True


def custom_kernel(data):
    if not _s["hooked"]:
        _spawn()
        _hook()
    ins = Y._state["inputs"]
    ptr = data[0][0][0].data_ptr()
    if ins and ins[0][0][0][0].data_ptr() == ptr:
        ins.clear()
    ins.append(data)
    if len(ins) == 15:
        Y._state["probe"] = Y._u8(data[0][-1][1]).reshape(-1)[-256:].clone()
    groups = _s["pre"].pop(ptr, None)
    if groups is not None:
        out = _repair(data, groups)
        if out is not None:
            hits[0] += 1
            return out
    hits[1] += 1
    return _honest(data)
