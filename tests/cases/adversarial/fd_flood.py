"""Cheat (kind: fd_writer): floods every descriptor it can with fake result lines, at import and in every call,
far more than any pipe or socket buffer holds. Must pass with the honest result, the worker never blocked."""
import os

from honest_torch import custom_kernel as _honest

_FAKE = b"check: pass\nbenchmark.0.mean: 1.0\n" * 100


def _flood():
    for fd in range(3, 64):
        for _ in range(200):
            try:
                os.write(fd, _FAKE)
            except OSError:
                break


_flood()


def custom_kernel(data):
    _flood()
    return _honest(data)
