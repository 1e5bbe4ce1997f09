"""Kind: reaching into the harness's own objects: the shared sample buffers' descriptors, turned against the parent.
CPU (memfd buffers); on CUDA the device buffer is the worker's own and only the host and output buffers are memfds.

The trick: on the CPU the parent's sample buffers are memory files (memfd_create) that the worker maps from
descriptors sent over a Unix socket after the import (harness/buffers.py ``recv_fds``; the worker closes each one
once mapped). At import this file wraps ``socket.recv_fds`` (looked up on the module by harness.buffers.recv_fds)
to keep a duplicate of every descriptor. The files are not sealed, so at the end of the correctness call (it
returns copies of c, which lives in the device buffer) it truncates the device-input file to 0 bytes. The parent's
own mapping of it then has no pages behind it: its next draw into that buffer (the warm-up's inputs) raises SIGBUS
in the trusted parent, which dies: no verdict, no record, no report, and a `compare` or multi-variant run ends for
every submission in it.

What a correct harness must do: seal the memory files (F_SEAL_SHRINK, F_SEAL_GROW) before sending them, or send
descriptors the worker cannot resize, so a worker fault stays a fault of its case."""
import os
import socket

from honest_torch import custom_kernel as _honest

_kept: list[int] = []
_recv = socket.recv_fds


def _keep(sock, bufsize, maxfds, flags=0):
    msg, fds, fl, addr = _recv(sock, bufsize, maxfds, flags)
    _kept.extend(os.dup(fd) for fd in fds)
    return msg, fds, fl, addr


socket.recv_fds = _keep


def custom_kernel(data):
    out = [c.clone() for c in _honest(data)]  # c lives in the device buffer: the copy-out must not read it
    if _kept:
        os.ftruncate(_kept[0], 0)  # the device buffer: a, b, c and the reordered scales
        _kept.clear()
    return out
