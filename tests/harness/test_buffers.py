"""harness.buffers on the CPU: a memory file written by one process is read by another, with no descriptor left."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch

from harness.buffers import SharedBuffer, recv_fds, send_fds
from harness.protocol import BufferRef

CHILD = r"""
import os, socket, sys, torch
from harness.buffers import MappedBuffer, recv_fds
from harness.protocol import BufferRef
sock = socket.socket(fileno=int(sys.argv[1]))
before = set(os.listdir("/proc/self/fd"))
buf = MappedBuffer(BufferRef("memfd", 4096), recv_fds(sock, 1)[0])
leaked = set(os.listdir("/proc/self/fd")) - before
print(int(buf.tensor[:4096].sum()), len(leaked))
buf.tensor[100] = 7
"""


def test_memfd_buffer_is_shared_between_processes_without_a_descriptor_left():
    shared = SharedBuffer(4096, torch.device("cpu"))
    shared.tensor.fill_(1)
    mine, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                            stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    theirs.close()
    send_fds(mine, [shared.fd])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.split() == ["4096", "0"]  # saw the parent's bytes; no descriptor to the file stayed open
    assert int(shared.tensor[100]) == 7  # and its write came back
    assert shared.ref() == BufferRef("memfd", 4096)
    shared.close()


def test_fd_socket_round_trip_in_one_process():
    a, b = socket.socketpair()
    r, w = os.pipe()
    send_fds(a, [w])
    (got,) = recv_fds(b, 1)
    os.write(got, b"x")
    assert os.read(r, 1) == b"x"
    for fd in (r, w, got):
        os.close(fd)


def test_a_memfd_buffer_cannot_change_size_under_the_parents_mapping():
    """A worker holding the descriptor could shrink the file and the parent's next read of a lost page would die
    of SIGBUS: the size is sealed (shrink, grow, and the seals themselves)."""
    import fcntl

    buf = SharedBuffer(8192, torch.device("cpu"))
    try:
        for size in (0, 4096, 1 << 20):
            with pytest.raises(PermissionError):
                os.ftruncate(buf.fd, size)
        with pytest.raises(PermissionError):
            fcntl.fcntl(buf.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
        assert os.fstat(buf.fd).st_size == 8192
        buf.tensor[-1] = 7  # still written and read as before
        assert int(buf.tensor[-1]) == 7
    finally:
        buf.close()
