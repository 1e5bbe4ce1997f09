"""Control (must PASS): does every group's work on a private CUDA stream, then makes the caller's stream wait
for it before returning. Legitimate fork-join; the side-stream detector must not flag it. On the CPU it just
computes."""
import torch

from honest_torch import custom_kernel as _honest

_stream = None


def custom_kernel(data):
    global _stream
    if not torch.cuda.is_available():
        return _honest(data)
    if _stream is None:
        _stream = torch.cuda.Stream()
    caller = torch.cuda.current_stream()
    _stream.wait_stream(caller)  # inputs were written on the caller's stream
    with torch.cuda.stream(_stream):
        outs = _honest(data)
    caller.wait_stream(_stream)
    for c in outs:
        c.record_stream(caller)
    return outs
