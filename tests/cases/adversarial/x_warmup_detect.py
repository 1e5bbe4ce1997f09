"""Kind: tell warm-up from timed samples and behave differently in each. Source: pygpubench's warmup (detect the
warm-up by its inputs, slow it down to shrink the number of timed runs) and combined (warm-up detection with a
cheat for the rest).

The first requests of a case (the correctness call, then the first two samples of 15 calls: the warm-up takes at
least one, or two to see a trend) are computed honestly and slowly (20 ms of sleep per call), so that a harness
that sizes its timed phase from the warm-up sees a slow kernel and that the checked calls are right; every later
call returns its c buffers without computing anything. In fp4bench every output of every call is checked, warm-up
and timed alike, and nothing is sized from the warm-up. A correct harness must fail the case at the first wrong
output of a timed sample."""
import time

from honest_torch import custom_kernel as _honest

_calls = [0]


def custom_kernel(data):
    _calls[0] += 1
    if _calls[0] <= 1 + 2 * 15:
        time.sleep(0.02)
        return _honest(data)
    return [c for _, _, c in data[0]]
