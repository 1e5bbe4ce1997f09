"""Kind: work before the window, by the trusted main thread between a sample's Closed and its RunReply, on the next
sample predicted from its plain scales. CPU.

The trick: that gap is still counted by no rule (the idle rule starts at the reply; the foreign-task watch skips
the main thread; the parent only waits for the reply, up to call_s), and right at Closed the parent writes the next
sample's plain scales into the other host slot (``_prepare_ahead``: "its plain scales go ahead"). Scales are raw
MT19937 bits (z_scale_seed_recovery), so the next sample's seed, and with it every byte of its A, B and scales,
follows from them. The guard's ``cleared`` (looked up on the guard module right after Closed, found through the
frames as y_reply_delay_precompute does) is wrapped: it waits for the other slot's scales to land, recovers that
sample's seed, draws the sample with the harness's own ``draw_official`` and computes its products, then lets the
reply go. The next window is a table lookup. Unlike z_scale_seed_recovery this needs neither the case seed's
arithmetic (it would work with independent per-sample seeds) nor warm-up time; sample 0 (not prepared ahead) is
computed honestly, samples 1.. are looked up.

What a correct harness must do: count the main thread's CPU from Closed to the next request, or bound the time to
the reply (a few ms), and never show the worker raw generator output (see z_scale_seed_recovery)."""
import sys
import time

import torch
import z_scale_seed_recovery as Z
from honest_torch import custom_kernel as _honest

from problems.nvfp4_group_gemm import sample_buffers as SB

_s = {"hooked": False, "first": None, "sizes": None, "seen": None}


def _other_slot_sfb():
    """Group 0's sfb bytes of call 0 in the host slot the next sample will use (20032 of them: 313 words)."""
    first, sizes = _s["first"], _s["sizes"]
    layout = SB.layout_of_sizes([(m, n, k) for m, n, k, _l in sizes], Z.CALLS)
    base = first.storage_offset()  # group 0's sfa of call 0 starts its slot
    other = layout.host_slot_bytes if base == 0 else 0
    store = torch.empty(0, dtype=torch.uint8).set_(first.untyped_storage())
    start = other + layout.groups[0].sfb
    return store[start:start + 313 * 64]


def _hook():
    guard, f = None, sys._getframe(1)
    while f is not None and guard is None:
        w = f.f_locals.get("window")
        if w is not None and hasattr(w, "cleared") and hasattr(w, "run_calls"):
            guard = w
        f = f.f_back
    if guard is None:
        return
    cleared = guard.cleared

    def wrapped():
        req = sys._getframe(1).f_locals.get("req")  # Worker.run's request: is a sample prepared ahead now?
        if _s["seen"] is not None and getattr(req, "ahead", False):
            end = time.monotonic() + 5.0
            while torch.equal(_other_slot_sfb(), _s["seen"]) and time.monotonic() < end:
                time.sleep(0.0005)
            time.sleep(0.005)  # the rest of the scales' copy
            view = _other_slot_sfb()
            seed = Z._recover(view.view(torch.float8_e4m3fn))
            if seed is not None:
                Z._draw_and_solve(seed, _s["sizes"])
        return cleared()

    guard.cleared = wrapped
    _s["hooked"] = True


def custom_kernel(data):
    if not _s["hooked"]:
        _hook()
    sfa = data[1][0][0]
    if _s["first"] is None or sfa.storage_offset() in (0, _first_other()):
        _s["first"], _s["sizes"] = sfa, data[3]  # call 0 of this request
        _s["seen"] = _other_slot_sfb().clone()
    key = sfa.view(torch.uint8).contiguous().numpy().tobytes()
    out = Z._state["cache"].pop(key, None)
    if out is not None:
        Z.hits[0] += 1
        return out
    Z.hits[1] += 1
    return _honest(data)


def _first_other():
    layout = SB.layout_of_sizes([(m, n, k) for m, n, k, _l in _s["sizes"]], Z.CALLS)
    return layout.host_slot_bytes
