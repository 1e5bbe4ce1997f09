"""Kind: a double-forked daemon left behind. Source: issue 41 (kind 6).

At import the worker forks a child that calls setsid() and forks again: the grandchild is a daemon in its own
session (the parent's kill of the worker's session does not reach it) and an orphan. It closes every descriptor it
inherited, sleeps, and exits by itself after 60 s at most (a bounded test; a real one would stay, e.g. to keep a
core warm or to read the next worker's shared buffers). Where the worker has no PID namespace of its own (CUDA runs)
it outlives the worker; with one, it dies with the worker's PID 1. If X_DAEMON_PIDFILE is set it writes there its
PID as its /proc shows it (the first NSpid: the host's PID unless the namespace has its own /proc), so a test can
find and end it (the test checks the process's environment first). Outputs are honest_torch's and the time
is honest. A correct harness must notice the process the submission left (alive after its call returned or after
the worker ended) and fail the case: "left a process behind"."""
import os
import time

from honest_torch import custom_kernel  # noqa: F401


def _host_pid() -> str:
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith("NSpid:"))


def _daemon() -> None:
    pidfile = os.environ.get("X_DAEMON_PIDFILE")
    if pidfile:
        with open(pidfile, "w") as f:
            f.write(_host_pid())
    os.closerange(0, 65536)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        time.sleep(0.5)


if os.fork() == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            _daemon()
    finally:
        os._exit(0)
os.wait()
