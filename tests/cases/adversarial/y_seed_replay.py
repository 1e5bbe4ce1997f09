"""Kind: replay of results computed outside the window, keyed by guessed seeds (work before the window). Source: the
brief's "seed guessing"; harness/parent/seeds.py documents the whole derivation.

The trick: without a secret seed (no POPCORN_SEED, no --seed: the default of `fp4bench run` and of the trust tests)
every input of a case follows from the shape spec's public seed s: the correctness call draws generate_input(s) bit
for bit, warm-up sample i draws draw_official from s + 42 * (1 + 15 i) + 21, timed sample i from s + 42 * (1 + 15
i). So at the correctness call (untimed; the first-call limit is 900 s) this file recovers s by trying small seeds
against the call's own A bytes, then redraws every warm-up and timed sample the parent will send (draw_official
through the problem's own sample_buffers, both with and without c's normals since the parent draws c once per slot:
two warm-ups and six timed samples there, one more of each in every gap between a window's Closed and its RunReply,
where the trusted main thread is not watched), computes their outputs with the honest kernel, and keeps them keyed
by three 48-byte windows of group 0's A and the last group's scales. Inside the window each call is a dict lookup
and a copy into c: the canaries do not matter, since the outputs come from the true inputs. A call it cannot match
is computed honestly.

What a correct harness must do: inputs the worker cannot predict (seeds it cannot derive: a secret combined in, or
drawn from the OS), so this gains nothing; or see the precomputation. With POPCORN_SEED set this gains nothing (the
seed search fails and every call is honest)."""
import sys

import torch
from honest_torch import custom_kernel as _honest

from problems.nvfp4_group_gemm import sample_buffers as SB
from problems.nvfp4_group_gemm.inputs import generate_input
from problems.nvfp4_group_gemm.spec import Case

CALLS = 15
FIRST = 6                  # timed samples drawn at the correctness call; each later gap draws one more of each kind
_table: dict = {}          # (sizes, key bytes) -> list of fp16 [M, N, 1] outputs
_seen: set = set()
_todo: list = []           # (sizes, views, base) still to draw, in the order the parent will need them
_state = {"hooked": False}
hits = [0, 0]


def _keys(x):
    """Three 48-byte windows of group 0's A (one may hold a canary), each with the last group's plain scales
    (no canaries there; they tell the draws with and without c's normals apart)."""
    flat = x[0][0][0].view(torch.uint8).reshape(-1)
    n = flat.numel()
    sfa, sfb = x[1][-1]
    tail = bytes(sfa.view(torch.uint8).reshape(-1)[:64].tolist() + sfb.view(torch.uint8).reshape(-1)[:64].tolist())
    return [bytes(flat[o:o + 48].tolist()) + tail for o in (0, n // 2 - 24, n - 48)]


def _find_seed(data, m, n, k, g):
    want = data[0][0][0].view(torch.uint8).reshape(-1)[:256]
    for s in range(0, 2000):
        x = generate_input(m, n, k, g, s, "official", torch.device("cpu"))
        if torch.equal(x[0][0][0].view(torch.uint8).reshape(-1)[:256], want):
            return s
    return None


def _draw(sizes, views, base):
    """Sample ``base`` (its generator seed) drawn as the parent draws it, with and without c's normals, and every
    call's outputs kept under its keys."""
    for fill_c in (True, False):
        gen = torch.Generator().manual_seed(base)
        plain = SB.draw_official(views, gen, fill_c=fill_c)
        SB.copy_plain(views, plain)
        for x in views.inputs():
            outs = [c.clone() for c in _honest(x)]
            for key in _keys(x):
                _table[(sizes, key)] = outs


def _plan(sizes, s, m, n, k, g):
    """Warm-up i draws from s + 42 (1 + 15 i) + 21, timed sample i from s + 42 (1 + 15 i) (harness/parent/seeds.py):
    the first two warm-ups and FIRST timed samples now, the rest queued one of each per gap."""
    layout = SB.Layout.of(Case(m, n, k, g, 0), CALLS)
    views = SB.Views(layout, torch.zeros(layout.device_bytes, dtype=torch.uint8),
                     torch.zeros(layout.host_bytes, dtype=torch.uint8))
    warm = [s + 42 * (1 + i * CALLS) + 21 for i in range(10)]
    timed = [s + 42 * (1 + i * CALLS) for i in range(200)]
    for base in warm[:2] + timed[:FIRST]:
        _draw(sizes, views, base)
    later = [b for pair in zip(warm[2:] + [None] * 200, timed[FIRST:]) for b in pair if b is not None]
    _todo[:] = [(sizes, views, b) for b in later]


def _hook():
    """Between a window's Closed and its RunReply (no bracket, the main thread trusted) draw the next queued
    samples: the guard module's ``cleared`` is called there by Worker.run."""
    f, guard = sys._getframe(1), None
    while f is not None and guard is None:
        w = f.f_locals.get("window")
        if w is not None and hasattr(w, "cleared") and hasattr(w, "run_calls"):
            guard = w
        f = f.f_back
    if guard is None:
        return
    cleared = guard.cleared

    def drawing():
        for _ in range(2):
            if _todo:
                _draw(*_todo.pop(0))
        return cleared()

    guard.cleared = drawing
    _state["hooked"] = True


def custom_kernel(data):
    abc, _sfab, _, sizes_l = data
    sizes = tuple(tuple(t) for t in sizes_l)
    if sizes not in _seen:  # the correctness call: untimed
        _seen.add(sizes)
        m, n, k = (tuple(t[i] for t in sizes) for i in range(3))
        s = _find_seed(data, m, n, k, len(sizes))
        if s is not None:
            _plan(sizes, s, m, n, k, len(sizes))
            if not _state["hooked"]:
                _hook()
        return _honest(data)
    for key in _keys(data):
        outs = _table.get((sizes, key))
        if outs is not None:
            hits[0] += 1
            for (_a, _b, c), o in zip(abc, outs):
                c.copy_(o)
            return [c for _a, _b, c in abc]
    hits[1] += 1
    return _honest(data)
