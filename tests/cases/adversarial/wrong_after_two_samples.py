"""Right for the correctness call, the warm-up sample and two timed samples of 15 calls, then wrong: the case
fails at its third timed sample, and the two samples measured before must stay in the record."""
from honest_torch import custom_kernel as _honest

_calls = 0


def custom_kernel(data):
    global _calls
    _calls += 1
    out = _honest(data)
    if _calls > 1 + 15 + 2 * 15:
        out[0].zero_()
    return out
