"""What this machine offers to confine a worker (bwrap, Landlock, namespaces, capabilities, prctl), probed once
per process; harness.parent.sandbox plans a worker's confinement from it."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass

from harness import confine

_CAP_SETPCAP = 8
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4


@dataclass(frozen=True)
class Offer:
    """What this machine offers a worker, probed once per process (``probe()``)."""

    root: bool                 # the parent runs as uid 0
    bwrap: str                 # "bubblewrap 0.8.0 (/usr/bin/bwrap)", or "" when absent
    bwrap_error: str           # why bwrap cannot confine a worker here ("" when it can)
    bwrap_pid_ipc: bool        # bwrap can also unshare the PID and IPC namespaces
    landlock_abi: int          # 0: no Landlock
    unshare_net: bool          # `unshare` can give a process its own network namespace
    unshare_pid_ipc: bool      # ... and its own PID and IPC namespaces
    unshare_error: str         # why not ("" when it can)
    user_namespaces: bool      # an unprivileged user namespace can be made (what non-root needs)
    cap_drop: bool             # a worker can drop its capabilities (always for non-root: it has none)
    non_dumpable: bool         # prctl(PR_SET_DUMPABLE) works here
    bwrap_user_ns: bool = False    # bwrap works only with --unshare-user (non-root, or root without CAP_SYS_ADMIN)
    unshare_user_ns: bool = False  # unshare works only with --user --map-root-user

    @property
    def mechanism(self) -> str:
        """``bwrap``, ``landlock`` or ``none``: what would confine the worker's file system view."""
        if not self.bwrap_error:
            return "bwrap"
        return "landlock" if self.landlock_abi else "none"


def _run_ok(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return done.returncode == 0, "" if done.returncode == 0 else last


@functools.lru_cache(maxsize=1)
def probe() -> Offer:
    """Probe this machine once: bwrap (installed, and able to make the sandbox: as root first without a user
    namespace, then with one, as a container without CAP_SYS_ADMIN needs), Landlock's ABI, namespaces by
    ``unshare`` (likewise), capabilities, prctl. Starts a few short processes; never raises."""
    root = os.geteuid() == 0
    bwrap_path, bwrap, bwrap_error, bwrap_pid, bwrap_user = shutil.which("bwrap"), "", "not installed", False, False
    if bwrap_path:
        bwrap = f"{_run_text([bwrap_path, '--version']) or 'bubblewrap'} ({bwrap_path})"
        base = [bwrap_path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                "--cap-drop", "ALL"]
        bwrap_user, bwrap_error = _first_working(base, ["--unshare-user"], root)
        if bwrap_user is not None:
            user = ["--unshare-user"] if bwrap_user else []
            bwrap_pid = _run_ok([*base, *user, "--unshare-pid", "--unshare-ipc", "--", "/bin/true"])[0]
    unshare = shutil.which("unshare")
    net = pid = unshare_user = False
    unshare_error = "not installed"
    if unshare:
        unshare_user, unshare_error = _first_working([unshare, "--net"], ["--user", "--map-root-user"], root)
        net = unshare_user is not None
        if net:
            user = ["--user", "--map-root-user"] if unshare_user else []
            pid = _run_ok([unshare, "--net", *user, "--pid", "--fork", "--mount-proc", "--ipc", "--kill-child",
                           "--", "/bin/true"])[0]
    user_ns = bool(unshare) and _run_ok([unshare, "--user", "--", "/bin/true"])[0]
    return Offer(root, bwrap, bwrap_error, bwrap_pid, confine.landlock_abi(), net, pid, unshare_error, user_ns,
                 not root or _has_capability(_CAP_SETPCAP), _dumpable() is not None, bool(bwrap_user),
                 bool(unshare_user))


def _first_working(base: list[str], user_ns: list[str], root: bool) -> tuple[bool | None, str]:
    """Whether ``base -- /bin/true`` needs the ``user_ns`` flags (False: works without; True: only with; None:
    fails either way) and, when it fails, why (its last line of output). Root tries without them first."""
    error = ""
    for with_user in ((False, True) if root else (True,)):
        ok, error = _run_ok([*base, *(user_ns if with_user else []), "--", "/bin/true"])
        if ok:
            return with_user, ""
    return None, f"it fails here: {error}"


def _run_text(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _has_capability(cap: int) -> bool:
    try:
        with open("/proc/self/status") as f:
            eff = next(line for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(int(eff.split()[1], 16) >> cap & 1)


def _dumpable() -> int | None:
    """PR_GET_DUMPABLE of this process (1 dumpable, 0 not), None when prctl is unavailable."""
    value = confine._libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
    return None if value < 0 else int(value)


def protect_parent() -> bool:
    """Make this process non-dumpable (prctl PR_SET_DUMPABLE 0): a process of the same user without
    CAP_SYS_PTRACE can no longer read its /proc/<pid>/mem or environ. Returns whether it now is."""
    confine._libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    return _dumpable() == 0
