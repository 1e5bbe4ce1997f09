"""The worker -> parent result channel: authenticated frames on a pipe.

A submission runs in the worker and can write to any descriptor there, so the parent trusts only frames that
carry an HMAC made with a key sent to the worker before the submission was imported. Anything else on the pipe
(fake ``check: pass`` lines, garbage) is skipped and counted. Frame layout:

    MAGIC | header length (8) | payload length (8) | HMAC(lengths)[:16] | HMAC(header + payload) (32) | header | payload

The header is JSON (never pickle: a forged frame must not run code in the parent); the payload is raw bytes.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import select
import struct
import time

import msgspec

MAGIC = b"\x00FP4BENCH\x01"
_LENGTHS = struct.Struct("<QQ")
_PREFIX = len(MAGIC) + _LENGTHS.size + 16 + 32
MAX_HEADER = 16 << 20


class ChannelTimeout(TimeoutError):
    """No complete frame arrived in time."""


class ChannelClosed(EOFError):
    """The worker's end closed (it exited or crashed)."""


def _mac(key: bytes, *parts: bytes) -> bytes:
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.digest()


def encode(key: bytes, header: dict, payload: bytes = b"") -> bytes:
    """One frame carrying ``header`` (JSON-able dict) and ``payload``."""
    hbytes = msgspec.json.encode(header)
    lengths = _LENGTHS.pack(len(hbytes), len(payload))
    return MAGIC + lengths + _mac(key, lengths)[:16] + _mac(key, hbytes, payload) + hbytes + payload


class Writer:
    """Worker side: writes frames to a file descriptor."""

    def __init__(self, fd: int, key: bytes):
        self._fd, self._key = fd, key
        self._write = os.write

    def send(self, header: dict, payload=b"") -> None:
        """``payload``: bytes, or a list of buffers sent one after another without joining them."""
        chunks = [memoryview(c).cast("B") for c in (payload if isinstance(payload, list) else [payload])]
        hbytes = msgspec.json.encode(header)
        lengths = _LENGTHS.pack(len(hbytes), sum(c.nbytes for c in chunks))
        self._write_all(MAGIC + lengths + _mac(self._key, lengths)[:16] + _mac(self._key, hbytes, *chunks) + hbytes)
        for chunk in chunks:
            self._write_all(chunk)

    def _write_all(self, data) -> None:
        view = memoryview(data)
        while view:
            view = view[self._write(self._fd, view):]


class Reader:
    """Parent side: reads frames, skipping bytes that are not an authentic frame (counted in ``stray_bytes``)."""

    def __init__(self, fd: int, key: bytes):
        self._fd, self._key = fd, key
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
        """The next authentic frame's (header, payload; a read-only view is not promised, but the payload is
        the parent's own copy). Raises ChannelTimeout or ChannelClosed."""
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
            pos = len(MAGIC)
            lengths = bytes(self._buf[pos:pos + _LENGTHS.size])
            hlen, plen = _LENGTHS.unpack(lengths)
            pos += _LENGTHS.size
            if not hmac.compare_digest(bytes(self._buf[pos:pos + 16]), _mac(self._key, lengths)[:16]) \
                    or hlen > MAX_HEADER:
                self.stray_bytes += 1
                del self._buf[:1]
                continue
            frame = self._read_frame(_PREFIX + hlen + plen, deadline)
            view = memoryview(frame)
            hbytes = bytes(view[_PREFIX:_PREFIX + hlen])
            payload = view[_PREFIX + hlen:]
            if not hmac.compare_digest(bytes(view[pos + 16:pos + 48]), _mac(self._key, hbytes, payload)):
                self.stray_bytes += 1
                view.release()
                self._buf[:0] = frame[1:]  # rescan what followed the false start
                continue
            return msgspec.json.decode(hbytes), payload

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
