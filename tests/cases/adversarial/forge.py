"""Helper of the cases that forge or rewrite result frames (x_key_*, x_writer_state, x_seccomp_trap,
x_pipe_interpose, x_fd_overwrite; not a submission itself): fp4bench's frame layout (``frame``, ``rescaled``), the
channel's Writer found through gc (``writer``), and ``Forger``, which with the signing key in hand answers every run
request with a forged, correctly signed RunReply whose time is a fraction of the real one.

Forger: each call computes its outputs honestly (honest_torch). The last call of a request (found through the worker's
``run`` frame: its ``req``, ``inputs`` and ``views`` locals) copies every call's outputs into the output buffer the
parent judges, then writes the forged reply to its own copy of the result descriptor. The first time, it points
the worker's descriptor at /dev/null, so the worker's true replies go nowhere. ``keys``: one or more candidate
keys (a frame signed with a wrong key is skipped by the parent as stray bytes)."""
import json
import os
import struct
import sys
import time

import torch

from honest_torch import custom_kernel as _honest

MAGIC = b"\x00FP4BENCH\x01"  # the frame layout is documented in harness/channel.py


def frame(key: bytes, header: dict) -> bytes:
    """A frame as harness/channel.py lays it out. ``key`` is ignored: the channel has carried no signature since the
    trust-boundary rework (a key in the worker's process is the submission's key); the parameter stays so the
    kinds that once stole one still run, now with nothing to steal."""
    body = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<QQ", len(body), 0) + body


def run_frame():
    """The worker's Worker.run frame (the request being served), or None."""
    f = sys._getframe(1)
    while f is not None and not (f.f_code.co_name == "run" and "views" in f.f_locals and "req" in f.f_locals):
        f = f.f_back
    return f


class Forger:
    def __init__(self, keys, fd: int, factor: float = 8.0):
        self.keys, self.fd, self.factor = list(keys), fd, factor
        self.out_fd = None
        self.t0 = 0

    def _silence(self) -> None:
        self.out_fd = os.dup(self.fd)
        null = os.open("/dev/null", os.O_WRONLY)
        os.dup2(null, self.fd)
        os.close(null)

    def __call__(self, data):
        f = run_frame()
        out = _honest(data)
        if f is None:
            return out
        req, inputs, views = f.f_locals["req"], f.f_locals["inputs"], f.f_locals["views"]
        if data is inputs[0]:
            self.t0 = time.perf_counter_ns()
        if data is not inputs[-1]:
            return out
        for j, x in enumerate(inputs):
            for g, (_, _, c) in enumerate(x[0]):
                views.out[g][j].copy_(c)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        fake = (time.perf_counter_ns() - self.t0) / self.factor
        groups = len(data[0])
        meta = [{"type_name": "torch.Tensor", "plain_tensor": True, "dtype": "torch.float16",
                 "shape": [m, n, 1], "device": str(c.device)} for (m, n, _, _), (_, _, c) in zip(data[3], data[0])]
        reply = {"msg": "RunReply", "elapsed_ns": float(fake) if req.kind == "time" else 0.0, "calls": len(inputs),
                 "containers": [{"name": "builtins.list", "exact": True}] * len(inputs),
                 "metas": [meta] * len(inputs), "copied": [[True] * groups] * len(inputs)}
        if req.kind == "kernels":
            reply["kernel_ns"] = fake / len(inputs)
        if self.out_fd is None:
            self._silence()
        closed = [{"msg": "Closed", "elapsed_ns": reply["elapsed_ns"]}] if req.kind == "time" else []
        view = memoryview(b"".join(frame(k, h) for k in self.keys for h in closed + [reply]))
        while view:
            view = view[os.write(self.out_fd, view):]
        return out


def writer():
    """The worker's channel Writer (its ``_fd``; ``_key`` b"" now that the channel is unsigned), through the garbage
    collector."""
    import gc
    found = next(o for o in gc.get_objects() if type(o).__name__ == "Writer" and isinstance(getattr(o, "_fd", None), int))
    if not isinstance(getattr(found, "_key", None), bytes):
        found._key = b""
    return found


def rescaled(key: bytes, data: bytes, factor: float = 8.0) -> bytes:
    """``data`` with the RunReply frame at its start (if any) re-signed with its ``elapsed_ns`` divided by ``factor``;
    anything else unchanged."""
    prefix = len(MAGIC) + 16
    if not data.startswith(MAGIC) or len(data) < prefix:
        return data
    hlen, plen = struct.unpack_from("<QQ", data, len(MAGIC))
    if plen or len(data) < prefix + hlen:
        return data
    header = json.loads(data[prefix:prefix + hlen])
    if header.get("msg") not in ("RunReply", "Closed"):
        return data
    header["elapsed_ns"] = header["elapsed_ns"] / factor
    return frame(key, header) + data[prefix + hlen:]
