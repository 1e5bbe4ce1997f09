"""Kind: work before the window, done by a trusted thread between a sample's Closed and its RunReply; the canaries
repaired inside the window. Works with a secret seed too.

The trick: the worker's main thread is trusted by the parent's /proc watch (alive before the import), and the time
between the worker's ``Closed`` (the bracket ends there) and its ``RunReply`` is in no bracket: the parent only
waits for the reply (up to call_s). Right at ``Closed`` the parent prepares the next timed sample ahead, into the
same device buffer the calls read (harness/parent/case_runner.py ``_prepare_ahead``). This file wraps the guard
module's ``cleared`` (looked up on the module by Worker.run right after it sends Closed): it waits there until the
next sample's inputs have landed, then computes every call's product in fp32 (canaries and all), keeping a copy of
the A and B bytes it used. Inside the next window each call diffs its A and B against that copy: the parent's fix
of the canaries is the only difference (16 bytes per call, group and operand), and each changed byte is one exact
rank-1 update of one row (A) or column (B) of the product, O(N) or O(M) work. Scales carry no canaries; a call
whose scales or bytes changed more than that is computed honestly.

What a correct harness must do: count the worker's CPU between Closed and the next request (the main thread is
trusted for its own replies only), or bound the time to the reply, or prepare the next sample's inputs only once
the reply is in (and fix the canaries inside the bracket): then the repaired calls are wrong or the work is seen.
Sample 0 after the warm-up is not prepared ahead (nothing to precompute there): the gain shows from sample 1 on.
On a GPU (device tensors throughout; the plain scales come from the host) the same should hold, and the precompute
is GPU work queued before the worker's ``ready`` flag, so it lands before the parent's tg as well: expected to pass
with the repaired samples several times faster than sample 0 on compute-bound shapes (untested here)."""
import sys
import time

import torch
from honest_torch import custom_kernel as _honest

from problems.nvfp4_group_gemm.formats import unblock

_E2M1 = [0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6]
_LUTS: dict = {}


def _lut(device):
    if device not in _LUTS:
        _LUTS[device] = torch.tensor(_E2M1, device=device)
    return _LUTS[device]
_state = {"inputs": [], "pre": {}, "hooked": False}
hits = [0, 0]


def _u8(t):
    return t[:, :, 0].view(torch.uint8)


def _deq(u8, sf):  # u8 [R, K/2], sf float [R, K/16] -> fp32 [R, K]
    lut = _lut(u8.device)
    v = torch.stack([lut[(u8 & 15).long()], lut[(u8 >> 4).long()]], -1).flatten(1)
    return v * sf.repeat_interleave(16, 1)


def _scales(reordered, rows, k):  # the blocked scales in the device buffer (no canaries) as float [rows, K/16]
    return unblock(reordered.view(torch.uint8), rows, k // 16).view(torch.float8_e4m3fn).float()


def _precompute():
    """The next sample's products from the device buffer as it is now (canaries in place)."""
    pre = {}
    for data in _state["inputs"]:
        abc, _sf, sfr, sizes = data
        groups = []
        for (a, b, _c), (ra, rb), (m, n, k, _l) in zip(abc, sfr, sizes):
            ua, ub = _u8(a).clone(), _u8(b).clone()
            sa, sb = _scales(ra, m, k), _scales(rb, n, k)
            da, db = _deq(ua, sa), _deq(ub, sb)
            groups.append([ua, ub, sa, sb, da, db, da @ db.T])
        pre[abc[0][0].data_ptr()] = groups
    _state["pre"] = pre


def _fingerprint():
    """A few bytes of every call's A and B at both ends (the parent's copy runs in parallel chunks)."""
    parts = []
    for abc, *_ in _state["inputs"]:
        for a, b, _c in abc:
            for t in (_u8(a).reshape(-1), _u8(b).reshape(-1)):
                parts += [t[:64], t[-64:]]
    return torch.cat(parts).clone()


def _landed(probe, before, limit_s=10.0):
    """Wait until ``probe`` (the last call's last B bytes) differs from ``before`` (the parent's prepare-ahead has
    begun), then until every call's bytes hold still (its copy and canaries are done)."""
    end = time.monotonic() + limit_s
    while torch.equal(probe, before):
        if time.monotonic() > end:
            return False
        time.sleep(0.0005)
    last = _fingerprint()
    while time.monotonic() < end:
        time.sleep(0.003)
        now = _fingerprint()
        if torch.equal(now, last):
            return True
        last = now
    return False


def _hook():
    guard = None
    f = sys._getframe(1)
    while f is not None and guard is None:
        w = f.f_locals.get("window")
        if w is not None and hasattr(w, "cleared") and hasattr(w, "run_calls"):
            guard = w
        f = f.f_back
    if guard is None:
        return
    cleared = guard.cleared

    def wrapped():
        ins = _state["inputs"]
        if len(ins) == 15:
            probe = _u8(ins[-1][0][-1][1]).reshape(-1)[-256:]
            if _landed(probe, _state["probe"]):
                _precompute()
        return cleared()

    guard.cleared = wrapped
    _state["hooked"] = True


def _repair(data, groups):
    abc, sfab, _r, _s = data
    outs = []
    for (a, b, c), (sfa, sfb), (ua, ub, sa, sb, da, db, prod) in zip(abc, sfab, groups):
        lut = _lut(a.device)
        same_a = torch.equal(sfa[:, :, 0].to(sa.device).float(), sa)
        if not (same_a and torch.equal(sfb[:, :, 0].to(sb.device).float(), sb)):
            return None
        na, nb = _u8(a), _u8(b)
        ia, ib = (na != ua).nonzero(), (nb != ub).nonzero()
        if len(ia) > 64 or len(ib) > 64:
            return None
        # used once (popped), so updated in place
        if len(ia):
            r, kb = ia[:, 0], ia[:, 1]
            new, old = na[r, kb], ua[r, kb]
            s = sa[r, (2 * kb) // 16]
            d0 = (lut[(new & 15).long()] - lut[(old & 15).long()]) * s
            d1 = (lut[(new >> 4).long()] - lut[(old >> 4).long()]) * s
            prod.index_add_(0, r, d0[:, None] * db[:, 2 * kb].T + d1[:, None] * db[:, 2 * kb + 1].T)
            da.index_put_((r, 2 * kb), d0, accumulate=True)
            da.index_put_((r, 2 * kb + 1), d1, accumulate=True)
        if len(ib):
            col, kb = ib[:, 0], ib[:, 1]
            new, old = nb[col, kb], ub[col, kb]
            s = sb[col, (2 * kb) // 16]
            d0 = (lut[(new & 15).long()] - lut[(old & 15).long()]) * s
            d1 = (lut[(new >> 4).long()] - lut[(old >> 4).long()]) * s
            prod.index_add_(1, col, da[:, 2 * kb] * d0[None, :] + da[:, 2 * kb + 1] * d1[None, :])
        outs.append((c, prod))
    for c, prod in outs:
        c[:, :, 0] = prod.half()
    return [c for c, _p in outs]


def custom_kernel(data):
    if not _state["hooked"]:
        _hook()
    ins = _state["inputs"]
    ptr = data[0][0][0].data_ptr()
    if ins and ins[0][0][0][0].data_ptr() == ptr:
        ins.clear()
    ins.append(data)
    if len(ins) == 15:  # the sample's inputs as they are now: the next sample's differ
        _state["probe"] = _u8(data[0][-1][1]).reshape(-1)[-256:].clone()
    groups = _state["pre"].pop(ptr, None)
    if groups is not None:
        out = _repair(data, groups)
        if out is not None:
            hits[0] += 1
            return out
    hits[1] += 1
    return _honest(data)
