"""A worker's stdout and stderr, kept bounded: in memory, never on disk, drained as fast as the worker writes.

``Capture`` is a pipe that the worker gets as both streams, drained by a daemon thread of the parent as fast as it
fills: it keeps the first ``head_bytes`` and the last ``tail_bytes`` of what came and counts the bytes dropped
between, so a print flood of any size costs the parent head + tail bytes of memory (plus the pipe's buffer) and
nothing on disk (a temporary file once grew by gigabytes). The pipe's buffer is raised to ``PIPE_BYTES`` where
Linux allows: a write blocks only while that much is unread, and the thread reads whenever Python lets it run
(the interpreter hands the GIL over every few ms).

``snapshot()`` reads what is still in the pipe first, so once the worker has exited it holds all it wrote; the
crash message's last lines and ``--worker-log`` (harness.parent.process) are made from it.
"""
from __future__ import annotations

import fcntl
import os
import select
import threading

#: The pipe buffer asked for (Linux's default limit for an unprivileged process, /proc/sys/fs/pipe-max-size).
PIPE_BYTES = 1 << 20
#: Bytes read from the pipe at a time.
_CHUNK = 1 << 16
#: Most bytes one read pass takes before it lets another thread at the kept output.
_PASS_BYTES = 1 << 22


class Capture:
    """The read end of the worker's output pipe and what was kept of it. Give ``write_fd`` to the worker as its
    stdout and stderr, then call ``started`` (the parent's copy of the write end must close, or the pipe never
    ends); ``close`` when done."""

    def __init__(self, head_bytes: int, tail_bytes: int):
        self.head_bytes, self.tail_bytes = head_bytes, tail_bytes
        self._head, self._tail = bytearray(), bytearray()
        self._dropped = 0
        self._read_fd, self.write_fd = os.pipe()
        try:
            fcntl.fcntl(self.write_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # the default buffer (64 KiB): writes still never wait long
        os.set_blocking(self._read_fd, False)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ended = False
        self._thread = threading.Thread(target=self._drain, name="fp4bench-worker-output", daemon=True)
        self._thread.start()

    def started(self) -> None:
        """The worker holds its copy of the write end: close the parent's."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def _keep(self, data: bytes) -> None:
        room = self.head_bytes - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            excess = len(self._tail) - self.tail_bytes
            if excess > 0:
                del self._tail[:excess]  # from the front: CPython moves the start, not the bytes
                self._dropped += excess

    def _pump(self, limit: int) -> None:
        """Read what the pipe holds now (at most ``limit`` bytes) into the kept output; the caller holds the lock."""
        taken = 0
        while not self._ended and taken < limit:
            try:
                data = os.read(self._read_fd, _CHUNK)
            except BlockingIOError:
                return
            if not data:
                self._ended = True  # every writer has closed its end
                return
            self._keep(data)
            taken += len(data)

    def _drain(self) -> None:
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        while not self._stop.is_set() and not self._ended:
            if poller.poll(100):
                with self._lock:
                    self._pump(_PASS_BYTES)

    def snapshot(self) -> tuple[bytes, int, bytes]:
        """(head, bytes dropped between, tail), after reading what is in the pipe now. With nothing dropped, head
        and tail are the whole output, in order."""
        with self._lock:
            if not self._stop.is_set():
                self._pump(_PASS_BYTES)
            return bytes(self._head), self._dropped, bytes(self._tail)

    def close(self) -> None:
        """Stop the thread (within a tenth of a second) and close both ends; what was kept stays readable."""
        with self._lock:
            if not self._stop.is_set():
                self._pump(_PASS_BYTES)
        self._stop.set()
        self._thread.join()
        self.started()
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1
