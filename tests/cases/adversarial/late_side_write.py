"""Cheat (GPU): computes on the caller's stream, but the final write of every output happens on a private
stream, behind 1 ms of other work, never joined: that work is outside the timed window. The outputs are
right once everything has finished. On the CPU there are no streams, so it is honest there."""
import torch

from honest_torch import custom_kernel as _honest

_stream = None


def custom_kernel(data):
    global _stream
    outs = _honest(data)
    if not torch.cuda.is_available():
        return outs
    if _stream is None:
        _stream = torch.cuda.Stream()
    results = [c.clone() for c in outs]
    for c in outs:
        c.zero_()
    _stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_stream):
        torch.cuda._sleep(2_000_000)  # about 1 ms at 2 GHz: beyond the bracket's tolerance on any window here
        for c, r in zip(outs, results):
            c.copy_(r)
            r.record_stream(_stream)  # keep the copy's source alive until the side stream has read it
    return outs
