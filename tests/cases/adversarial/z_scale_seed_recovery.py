"""Kind: inputs predicted (the secret recovered) from what the worker is shown. CPU; GPU analogue in the notes.

The trick: warm-up and timed samples are drawn by ``draw_official`` from one torch CPU generator per sample
(MT19937, seeded with ``seeds[0]`` mod 2**32). Its scales are drawn 64 at a time from raw int64 words
(``_random_bits``), and the plain scales reach the worker unmasked and without canaries (the host buffer): every
scale byte is one raw generator bit. 625 consecutive 32-bit outputs (20032 scale bytes, 313 words: group 0's sfb
on the test shape holds all 128 rows, 30720 bytes) are untempered, the MT19937 stream is stepped backwards (exact linear algebra, no
search) to the seeding, and the seeding gives the sample's 32-bit seed. Sample seeds are the case seed + 42 * (...),
so one seed gives every later sample's: on the first warm-up call (its window is timed but never kept, so the work
there costs nothing) this file draws every timed sample itself with the harness's own ``draw_official`` (both
ways the parent may draw ``c``), computes the products, and keys them by each call's plain scales. Each timed call
then returns its product from that table. Outputs are bit-exact, the window is honest (a dict lookup), nothing
runs outside a window, the canaries never matter (the predicted inputs are the true ones).

What a correct harness must do: never let the worker see raw generator output of a sample's generator (draw the
scales through a keyed hash or a cryptographic generator, or from a generator separate from A and B), seed each
sample from the OS's randomness (or a keyed hash of the secret and the sample index, not secret + 42 * i), and
bound warm-up work (warm-up windows are untimed compute). On CUDA the generator is Philox, not invertible from its
output, but its 64-bit seed is combine(public spec seed, a secret below 2**32): 2**32 candidates, a few seconds of
Philox on an H200 from the correctness call's A bytes (GPU-only; not written here)."""
import time

import numpy as np
import torch
from honest_torch import custom_kernel as _honest

from problems.nvfp4_group_gemm import sample_buffers as SB

_M32 = 0xFFFFFFFF
_MATRIX_A, _UP, _LOW = 0x9908B0DF, 0x80000000, 0x7FFFFFFF
#: Timed samples drawn ahead on the first warm-up call (configs/run.yml max_runs is 100; the tests' FAST runs 4).
AHEAD = 8
CALLS = 15
_state = {"cache": {}, "recovered": None, "attempts": 0}
hits = [0, 0]


def _untemper(y):
    y = y & _M32
    y ^= y >> 18
    y ^= (y << 15) & 0xEFC60000
    r = y.copy()
    for _ in range(5):
        r = y ^ ((r << 7) & 0x9D2C5680)
    y = r & _M32
    r = y.copy()
    for _ in range(3):
        r = y ^ (r >> 11)
    return r & _M32


def _back(s, steps):
    """``s`` (untempered, consecutive MT19937 stream values, at least 625) with ``steps`` earlier values in front:
    S[k+624] = S[k+397] ^ twist(S[k], S[k+1]) solved for S[k], 396 at a time."""
    out = np.empty(steps + len(s), dtype=np.uint64)
    out[steps:] = s
    k = steps
    while k > 0:
        blk = min(396, k)
        lo = k - blk
        t = out[lo + 624:k + 624] ^ out[lo + 397:k + 397]
        odd = t >> np.uint64(31)
        t = np.where(odd == 1, t ^ np.uint64(_MATRIX_A), t)
        t2 = out[lo + 623:k + 623] ^ out[lo + 396:k + 396]
        odd2 = t2 >> np.uint64(31)
        t2 = np.where(odd2 == 1, t2 ^ np.uint64(_MATRIX_A), t2)
        out[lo:k] = ((t << np.uint64(1)) & np.uint64(_UP)) | (((t2 << np.uint64(1)) | odd2) & np.uint64(_LOW))
        k = lo
    return out


def _seed_of(s):
    """The 32-bit seed whose init_genrand state lies in ``s``, or None."""
    x = s[:-1]
    d = (s[1:] - np.uint64(1812433253) * (x ^ (x >> 30))) & _M32
    hit = np.nonzero((d[1:] == d[:-1] + 1) & (d[:-1] < 624) & (d[:-1] >= 1))[0]
    if len(hit) < 8:
        return None
    j = int(hit[0])
    one = j + 1 - (int(d[j]) - 1)
    v = ((int(s[one]) - 1) * pow(1812433253, -1, 1 << 32)) & _M32
    return v ^ (v >> 30)


def _recover(sfb):
    """The sample's generator seed (mod 2**32) from the raw scale bits starting at ``sfb`` (a host-buffer view)."""
    start = sfb.storage_offset()
    store = torch.empty(0, dtype=torch.uint8).set_(sfb.untyped_storage())
    raw = store[start:start + 313 * 64].numpy()
    if len(raw) < 313 * 64 or not np.isin(raw, (SB.E4M3FN_ONE, SB.E4M3FN_TWO)).all():
        return None
    bits = (raw == SB.E4M3FN_TWO).astype(np.uint8)
    words = np.packbits(bits.reshape(-1, 8), axis=1, bitorder="little").reshape(-1).view(np.int64)
    u = words.view(np.uint64) + np.uint64(1 << 63)
    outs = np.stack([u >> np.uint64(32), u & np.uint64(_M32)], 1).reshape(-1)
    s = _back(_untemper(outs[:626]), 2_000_000)  # the test shape's A, B and c are well under 2M outputs
    for end in range(len(s), 0, -100_000):
        seed = _seed_of(s[max(0, end - 100_700):end])
        if seed is not None:
            return seed
    return None


def _precompute(case_seed, sizes):
    for i in range(AHEAD):
        _draw_and_solve((case_seed + 42 * (1 + i * CALLS)) & _M32, sizes)


def _draw_and_solve(seed, sizes):
    """Draw the sample the parent draws from ``seed`` (both ways it may draw c) and keep every call's product,
    keyed by the call's plain scales."""
    layout = SB.layout_of_sizes([(m, n, k) for m, n, k, _l in sizes], CALLS)
    for fill_c in (True, False):
        dev = torch.zeros(layout.device_bytes, dtype=torch.uint8)
        host = torch.zeros(layout.host_bytes, dtype=torch.uint8)
        views = SB.Views(layout, dev, host)
        plain = SB.draw_official(views, torch.Generator().manual_seed(seed), None, fill_c=fill_c)
        SB.copy_plain(views, plain)
        for data in views.inputs():
            key = data[1][0][0].view(torch.uint8).contiguous().numpy().tobytes()
            _state["cache"][key] = [o.clone() for o in _honest(data)]


def custom_kernel(data):
    key = data[1][0][0].view(torch.uint8).contiguous().numpy().tobytes()
    out = _state["cache"].get(key)
    if out is not None:
        hits[0] += 1
        return out
    hits[1] += 1
    result = _honest(data)
    if _state["recovered"] is None and _state["attempts"] < 6:
        _state["attempts"] += 1
        seed = _recover(data[1][0][1])
        if seed is not None:  # the first warm-up sample: seeds[0] = case seed + 42 + 21
            _state["recovered"] = seed
            t = time.monotonic()
            _precompute((seed - 63) & _M32, data[3])
            _state["precompute_s"] = time.monotonic() - t
    return result
