"""The worker -> parent reply channel: length-prefixed frames on a pipe, carrying claims, never proof.

A submission runs in the worker and can write to any descriptor there, read any memory there and call any code
there, so nothing the worker's process sends can be authenticated: a key it holds is a key the submission holds.
The channel therefore only frames messages; every reply is a claim that the parent checks against what it measures
itself (harness.parent.bracket: the time, the outputs; harness.parent.watch: the CPU outside the window). Bytes
that are not a frame (fake ``check: pass`` lines, garbage) are skipped and counted. Frame layout:

    MAGIC | header length (8) | payload length (8) | header | payload

The header is JSON (never pickle: a forged frame must not run code in the parent); the payload is raw bytes. A
frame whose header is longer than MAX_HEADER is read through and delivered as an ``Oversized`` header naming its
size, so a huge message is cut, not waited for.
"""
from __future__ import annotations

import os
import select
import struct
import time

import msgspec

MAGIC = b"\x00FP4BENCH\x01"
_LENGTHS = struct.Struct("<QQ")
_PREFIX = len(MAGIC) + _LENGTHS.size
#: The longest header the parent decodes (bytes); a longer one is skipped and reported as ``Oversized``.
MAX_HEADER = 4 << 20
#: The longest payload a frame may carry (bytes): the worker sends none today.
MAX_PAYLOAD = 1 << 30


class ChannelTimeout(TimeoutError):
    """No complete frame arrived in time."""


class ChannelClosed(EOFError):
    """The worker's end closed (it exited or crashed)."""


def encode(header: dict, payload: bytes = b"") -> bytes:
    """One frame carrying ``header`` (JSON-able dict) and ``payload``."""
    hbytes = msgspec.json.encode(header)
    return MAGIC + _LENGTHS.pack(len(hbytes), len(payload)) + hbytes + payload


class Writer:
    """Worker side: writes frames to a file descriptor."""

    def __init__(self, fd: int):
        self._fd = fd
        self._write = os.write

    def send(self, header: dict, payload=b"") -> None:
        """``payload``: bytes, or a list of buffers sent one after another without joining them."""
        chunks = [memoryview(c).cast("B") for c in (payload if isinstance(payload, list) else [payload])]
        hbytes = msgspec.json.encode(header)
        self._write_all(MAGIC + _LENGTHS.pack(len(hbytes), sum(c.nbytes for c in chunks)) + hbytes)
        for chunk in chunks:
            self._write_all(chunk)

    def _write_all(self, data) -> None:
        view = memoryview(data)
        while view:
            view = view[self._write(self._fd, view):]


class Reader:
    """Parent side: reads frames, skipping bytes that are not a frame (counted in ``stray_bytes``)."""

    def __init__(self, fd: int):
        self._fd = fd
        self._buf = bytearray()
        self.stray_bytes = 0

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ChannelTimeout("no result within the time limit")
        ready, _, _ = select.select([self._fd], [], [], remaining)
        if not ready:
            raise ChannelTimeout("no result within the time limit")
        chunk = os.read(self._fd, 1 << 22)
        if not chunk:
            raise ChannelClosed("the worker closed its result channel")
        self._buf += chunk

    def _need(self, n: int, deadline: float) -> None:
        while len(self._buf) < n:
            self._fill(deadline)

    def receive(self, timeout_s: float) -> tuple[dict, memoryview]:
        """The next frame's (header, payload; the payload is the parent's own copy). A header that is not a JSON
        object is skipped as stray bytes; one longer than MAX_HEADER comes back as ``{"msg": "Oversized",
        "bytes": N}``. Raises ChannelTimeout or ChannelClosed."""
        deadline = time.monotonic() + timeout_s
        while True:
            start = self._buf.find(MAGIC)
            if start < 0:
                keep = len(MAGIC) - 1
                if len(self._buf) > keep:
                    self.stray_bytes += len(self._buf) - keep
                    del self._buf[:-keep]
                self._fill(deadline)
                continue
            if start:
                self.stray_bytes += start
                del self._buf[:start]
            self._need(_PREFIX, deadline)
            hlen, plen = _LENGTHS.unpack(bytes(self._buf[len(MAGIC):_PREFIX]))
            if plen > MAX_PAYLOAD:
                self.stray_bytes += 1
                del self._buf[:1]
                continue
            if hlen > MAX_HEADER:
                del self._buf[:_PREFIX]
                self._skip(hlen + plen, deadline)
                return {"msg": "Oversized", "bytes": hlen}, memoryview(b"")
            frame = self._read_frame(_PREFIX + hlen + plen, deadline)
            view = memoryview(frame)
            try:
                header = msgspec.json.decode(bytes(view[_PREFIX:_PREFIX + hlen]))
            except msgspec.DecodeError:
                header = None
            if not isinstance(header, dict):
                self.stray_bytes += 1
                view.release()
                self._buf[:0] = frame[1:]  # rescan what followed the false start
                continue
            return header, view[_PREFIX + hlen:]

    def _skip(self, n: int, deadline: float) -> None:
        """Read and drop ``n`` bytes of the stream (an oversized frame), never holding more than a chunk."""
        drop = min(n, len(self._buf))
        del self._buf[:drop]
        n -= drop
        while n:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._fd], [], [], remaining)[0]:
                raise ChannelTimeout("no result within the time limit")
            chunk = os.read(self._fd, min(n, 1 << 22))
            if not chunk:
                raise ChannelClosed("the worker closed its result channel")
            n -= len(chunk)

    def _read_frame(self, total: int, deadline: float) -> bytearray:
        """Exactly ``total`` bytes from the front of the stream: what is buffered, then read straight into one
        buffer of the final size (a large payload is copied once, not appended and sliced)."""
        if len(self._buf) >= total:
            frame = self._buf[:total]
            del self._buf[:total]
            return frame
        frame = bytearray(total)
        have = len(self._buf)
        frame[:have] = self._buf
        self._buf.clear()
        view = memoryview(frame)
        while have < total:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._fd], [], [], remaining)[0]:
                self._buf[:0] = frame[:have]
                raise ChannelTimeout("no result within the time limit")
            n = os.readv(self._fd, [view[have:]])
            if n == 0:
                raise ChannelClosed("the worker closed its result channel")
            have += n
        view.release()
        return frame
