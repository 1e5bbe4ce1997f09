"""Cheat: a daemon (fork, setsid, fork, the middle process exits) that outlives the worker's session and spins on
the CPU, e.g. while the other side of ``compare`` is timed; on a CUDA run (the parent's PID namespace) killing the
worker's session does not reach it. Expected: the case fails with "left a process behind" and the daemon is gone.

LEAVE_WHEN: ``import`` (default) or ``call`` (in the first call only); LEAVE_NAME: the name (comm, at most 15
characters) the daemon takes, so a test can look for it; LEAVE_SPIN: ``1`` to spin, else it sleeps."""
import ctypes
import os
import time

from honest_torch import custom_kernel as _honest

_libc = ctypes.CDLL(None)
_NAME = os.environ.get("LEAVE_NAME", "fp4b-daemon").encode()[:15]
_left = False


def _daemon() -> None:
    middle = os.fork()
    if middle:
        os.waitpid(middle, 0)  # the middle process exits at once: the daemon is an orphan
        return
    try:
        os.setsid()
        if os.fork() == 0:
            _libc.prctl(15, _NAME, 0, 0, 0)  # PR_SET_NAME
            spin = os.environ.get("LEAVE_SPIN") == "1"
            while True:
                if not spin:
                    time.sleep(0.05)
    finally:
        os._exit(0)


def _leave() -> None:
    global _left
    if not _left:
        _left = True
        _daemon()


if os.environ.get("LEAVE_WHEN", "import") == "import":
    _leave()


def custom_kernel(data):
    _leave()
    return _honest(data)
