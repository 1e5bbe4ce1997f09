"""Kind: report a time of zero. Source: issue 41 (kind 1, taken to its end: the reply path replaced as in
x_reply_to_dict.py, every RunReply's ``elapsed_ns`` set to 0.0).

Outputs are honest_torch's. Nothing in the worker or the parent bounds a CPU time from below (the physical floor
needs a GPU's peaks), so the case passes with a mean of 0 ns, and the run's geometric mean then raises ValueError
in the parent (harness.results.stats.geomean). A correct harness must fail the case (its own bracket disagrees, or
the time is impossible) and finish the run normally."""
import sys

from honest_torch import custom_kernel  # noqa: F401

protocol = sys.modules.get("harness.protocol")
if protocol is not None:
    _real = protocol.to_dict

    def _zero(msg):
        d = _real(msg)
        if d.get("msg") == "RunReply":
            d["elapsed_ns"] = 0.0
        return d

    protocol.to_dict = _zero
