"""Cheat: a plain child process (os.fork, same session) left running after the call that started it, invisible to
the worker's thread watch. Expected: the case fails with "left a process behind" and the child is gone.

LEAVE_WHEN: ``import`` (default) or ``call`` (in the first call only); LEAVE_NAME: the child's name (comm, at most 15
characters); LEAVE_SPIN: ``1`` to spin, else it sleeps."""
import ctypes
import os
import time

from honest_torch import custom_kernel as _honest

_libc = ctypes.CDLL(None)
_NAME = os.environ.get("LEAVE_NAME", "fp4b-child").encode()[:15]
_left = False


def _leave() -> None:
    global _left
    if _left:
        return
    _left = True
    if os.fork() == 0:
        try:
            _libc.prctl(15, _NAME, 0, 0, 0)  # PR_SET_NAME
            spin = os.environ.get("LEAVE_SPIN") == "1"
            while True:
                if not spin:
                    time.sleep(0.05)
        finally:
            os._exit(0)


if os.environ.get("LEAVE_WHEN", "import") == "import":
    _leave()


def custom_kernel(data):
    _leave()
    return _honest(data)
