"""Kind: a forged time on the reply path, through the divisor instead of the time. Source: issue 41's kind 1 (a
function on the reply path replaced), aimed at a field no bracket covers.

The trick: the worker's RunReply carries ``elapsed_ns`` (the window, all calls) and ``calls`` (how many calls it
ran). The parent's bracket judges ``elapsed_ns`` against its own clock, and the outputs of every call are judged
from its own copy; but the per-call time it records is ``elapsed_ns / reply.calls``. This file computes honestly and
replaces ``harness.protocol.to_dict`` (looked up on the module by Worker.run at each reply) with a wrapper that
multiplies a timed RunReply's ``calls`` by 100: the window and its bracket agree, every output is right, and the
recorded time is a hundredth of the real one.

What a correct harness must do: take the number of calls from its own request (the layout it drew), never from
the reply, or refuse a reply whose ``calls`` differs from it."""
import sys

from honest_torch import custom_kernel as _honest

FACTOR = 100
_done = []


def _patch():
    P = sys.modules["harness.protocol"]
    to_dict = P.to_dict

    def forged(msg):
        d = to_dict(msg)
        if d.get("msg") == "RunReply" and d.get("elapsed_ns"):
            d["calls"] = d["calls"] * FACTOR
        return d

    P.to_dict = forged
    _done.append(True)


def custom_kernel(data):
    if not _done:
        _patch()
    return _honest(data)
