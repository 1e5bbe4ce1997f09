"""Kind: replace a function on the worker's reply path. Source: issue 41 (kind 1).

At import it reaches the protocol module through sys.modules and swaps ``harness.protocol.to_dict``, which the
worker calls (as ``P.to_dict``) to turn every reply into the header of a signed frame, for a wrapper that divides
a RunReply's ``elapsed_ns`` by 8. The outputs are honest_torch's; only the reported time is false. The frame is
signed by the harness's own code, so the channel's HMAC is no help. A correct harness must not take the window's
time from the worker's word alone (e.g. it checks it against its own bracket of the window) and fails the case,
or the time it reports is the real one."""
import sys

from honest_torch import custom_kernel  # noqa: F401

protocol = sys.modules.get("harness.protocol")
if protocol is not None:
    _real = protocol.to_dict

    def _faster(msg):
        d = _real(msg)
        if d.get("msg") == "RunReply":
            d["elapsed_ns"] = d["elapsed_ns"] / 8
        return d

    protocol.to_dict = _faster
