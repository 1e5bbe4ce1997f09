"""Kind: a forged time, negative, that the bracket's tolerance lets through once the real window is tiny. CPU.

The trick: z_scale_seed_recovery makes the real window a table lookup (about 0.1 ms for 15 calls). The reply path
is then rewritten as in x_reply_zero_time (``protocol.to_dict``): every timed RunReply claims a window of -1 ms.
The bracket accepts a claim w when bracket - w <= gap + 3 ms + 20 % of w (harness/parent/bracket.py
``Margin.allowed_ns``), and nothing bounds w from below: with a bracket of gap + 0.1 ms, -1 ms passes
(1.1 ms <= 3 ms - 0.2 ms), and ``charged_ns`` keeps the claim because it agreed. The sample's per-call time is
negative; the case passes and the run's statistics and geometric mean are computed from negative times.

What a correct harness must do: refuse a window that is not positive (a protocol error or a FAIL), and charge at
least the parent's own bracket less the gap (never more than the tolerance below it), so a claim can shave at most
the tolerance, not turn a time negative."""
import sys

from z_scale_seed_recovery import custom_kernel  # noqa: F401

CLAIM_NS = -1e6

protocol = sys.modules.get("harness.protocol")
if protocol is not None:
    _real = protocol.to_dict

    def _negative(msg):
        d = _real(msg)
        if d.get("msg") == "RunReply" and d.get("elapsed_ns"):
            d["elapsed_ns"] = CLAIM_NS
        return d

    protocol.to_dict = _negative
