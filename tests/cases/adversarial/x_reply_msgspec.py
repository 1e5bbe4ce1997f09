"""Kind: replace a function on the worker's reply path, in a library rather than in the harness. Source: issue 41
(kind 1).

The channel's Writer encodes each header with ``msgspec.json.encode``, looked up on the msgspec.json module at
every call. This submission swaps that module attribute for a wrapper that divides a RunReply header's
``elapsed_ns`` by 8 before encoding; the Writer then signs the false header with its own key. Outputs are
honest_torch's. A correct harness must not rely on the worker's report of its own window (identity checks of the
harness's own objects do not cover a third-party library) and fails the case, or reports the real time."""
import msgspec

from honest_torch import custom_kernel  # noqa: F401

_real = msgspec.json.encode


def _faster(obj, *args, **kwargs):
    if type(obj) is dict and obj.get("msg") == "RunReply":
        obj = {**obj, "elapsed_ns": obj["elapsed_ns"] / 8}
    return _real(obj, *args, **kwargs)


msgspec.json.encode = _faster
