"""Cheat (issue 41, reply path): replaces the protocol module's encoder through sys.modules so every timed window
the worker reports is 8x shorter; the outputs stay correct. The parent's bracket must catch it."""
import sys

from honest_torch import custom_kernel  # noqa: F401

protocol = sys.modules.get("harness.protocol")
if protocol is not None:
    _real = protocol.to_dict

    def _forged(msg):
        d = _real(msg)
        if d.get("elapsed_ns"):
            d["elapsed_ns"] = d["elapsed_ns"] / 8
        return d

    protocol.to_dict = _forged
