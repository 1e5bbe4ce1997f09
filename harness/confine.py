"""The worker's first code: confine this process, then run ``harness.worker`` in it (``python -m harness.confine``).

Started by the parent (harness.parent.sandbox builds the command line) inside bubblewrap or ``unshare`` namespaces; it
reads its orders from the environment variable FP4BENCH_CONFINE (JSON, removed before the worker runs), applies
them in this order, and only then imports the worker (before any submission code exists):

1. no new privileges (PR_SET_NO_NEW_PRIVS: no set-user-ID or file-capability gains from here on);
2. resource limits (setrlimit; never raised above the current hard limit);
3. Landlock (``landlock``: ``full``: reads only beneath ``read``, writes only beneath ``write``, read+write on the
   ``devices`` files, everything beneath ``hide`` unreadable even inside a read root; ``scope``: no file rules;
   either way no ptrace/``/proc/<pid>/mem`` of a process outside this domain, and from ABI 6 no signals to them
   and no abstract Unix sockets outside it);
4. every capability dropped (bounding, ambient, effective, permitted, inheritable), when ``drop_caps``;
5. this process made non-dumpable (``/proc/<pid>/mem`` and ``environ`` closed to other processes of its user).

Any step that fails ends the process with exit code ``EXIT_REFUSED`` and one line on stderr naming the step: a
worker never runs less confined than the parent was told. Leaf module: the standard library only.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import runpy
import stat
import sys

ENV = "FP4BENCH_CONFINE"
EXIT_REFUSED = 111

# Landlock (include/uapi/linux/landlock.h)
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
FS_REFER, FS_TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1}  # IOCTL_DEV (ABI 5) is never handled: GPUs
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR

# prctl / capabilities
_PR_CAPBSET_READ, _PR_CAPBSET_DROP, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 23, 24, 4, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SYS_CAPSET = 126
_CAP_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class Refused(Exception):
    """A confinement step failed; the message names it and the OS error."""


def _oserror(what: str) -> Refused:
    err = ctypes.get_errno()
    return Refused(f"{what}: {os.strerror(err)} (errno {err})")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (1, 2, ...), or 0 when Landlock is absent or disabled."""
    abi = _libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(abi), 0)


def handled_fs(abi: int) -> int:
    """Every file-system right Landlock ABI ``abi`` knows, except IOCTL_DEV (device ioctls stay free for GPUs)."""
    return _FS_BY_ABI[min(abi, 3)] if abi > 0 else 0


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _rules_beneath(root: str, rights: int, hide: list[str]):
    """(path, rights) rules granting ``rights`` beneath ``root`` except beneath any of ``hide``: a hidden path
    inside ``root`` splits the grant into its siblings, level by level. Symbolic links get no rule of their own
    (access through one is checked on its target). A split folder keeps the right to be listed (Python's import
    system lists a folder to find a module in it), which Landlock extends to the folders beneath: a hidden
    folder's names can be listed, never its files read."""
    inside = [h for h in hide if _is_within(h, root)]
    if root in inside:
        return
    if not inside:
        yield root, rights
        return
    if rights & FS_READ_DIR:
        yield root, FS_READ_DIR
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir():
                yield from _rules_beneath(entry.path, rights, inside)
            elif entry.path not in inside:
                yield entry.path, rights & _FILE_RIGHTS


def apply_landlock(abi: int, mode: str, read: list[str], write: list[str], devices: list[str],
                   hide: list[str]) -> None:
    """Restrict this thread (and what it starts) with a Landlock ruleset; ``mode`` ``full`` or ``scope`` (see the
    module docstring). Paths that do not exist are skipped. Raises Refused."""
    if abi < 1:
        raise Refused("Landlock: not available in this kernel")
    attr = _RulesetAttr()
    size = 8
    if mode == "full":
        attr.handled_access_fs = handled_fs(abi)
    elif abi < 6:
        attr.handled_access_fs = FS_MAKE_BLOCK  # a domain needs one handled right before scopes exist (ABI 6)
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
    elif abi >= 4:
        size = 16
    ruleset = _libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _oserror("Landlock: landlock_create_ruleset")
    try:
        if mode == "full":
            handled = attr.handled_access_fs
            rules = [r for root in read for r in _rules_beneath(root, READ, hide)]
            rules += [r for root in write for r in _rules_beneath(root, handled, hide)]
            rules += [(d, FS_READ_FILE | FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)) for d in devices]
            for path, rights in rules:
                _add_rule(ruleset, path, rights & handled)
        if _libc.syscall(_SYS_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise _oserror("Landlock: landlock_restrict_self")
    finally:
        os.close(ruleset)


def _add_rule(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Refused(f"Landlock: cannot open {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        if _libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                         ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise _oserror(f"Landlock: landlock_add_rule({path})")
    finally:
        os.close(fd)


def apply_limits(limits: dict[str, int]) -> None:
    """setrlimit for each ``{"RLIMIT_AS": bytes, ...}``: soft and hard, never above the current hard limit."""
    for name, value in limits.items():
        which = getattr(resource, name, None)
        if not name.startswith("RLIMIT_") or which is None:
            raise Refused(f"setrlimit: no resource limit named {name!r} here")
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError) as exc:
            raise Refused(f"setrlimit({name}, {value}): {exc}") from None


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Empty the bounding and ambient sets, then the effective/permitted/inheritable ones. Raises Refused."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if _libc.prctl(_PR_CAPBSET_READ, cap, 0, 0, 0) == 1 and _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise _oserror(f"prctl(PR_CAPBSET_DROP, {cap})")
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    data = (_CapData * 2)()
    if _libc.syscall(_SYS_CAPSET, ctypes.byref(_CapHeader(_CAP_VERSION_3, 0)), data) != 0:
        raise _oserror("capset")


def confine(orders: dict) -> None:
    """Apply ``orders`` (the FP4BENCH_CONFINE document) to this process. Raises Refused."""
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # no set-user-ID gains from here on
        raise _oserror("prctl(PR_SET_NO_NEW_PRIVS)")
    apply_limits(orders.get("limits", {}))
    if orders.get("landlock", "none") != "none":
        apply_landlock(landlock_abi(), orders["landlock"], orders.get("read", []), orders.get("write", []),
                       orders.get("devices", []), orders.get("hide", []))
    if orders.get("drop_caps"):
        drop_capabilities()
    if _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise _oserror("prctl(PR_SET_DUMPABLE, 0)")


def main() -> None:
    raw = os.environ.pop(ENV, None)
    try:
        orders = json.loads(raw) if raw is not None else None
    except ValueError:
        orders = None
    if not isinstance(orders, dict):
        got = "nothing" if raw is None else repr(raw[:60])
        sys.stderr.write(f"fp4bench sandbox: expected the parent's orders (a JSON object) in {ENV}, got {got}\n")
        os._exit(EXIT_REFUSED)
    try:
        confine(orders)
    except (Refused, OSError) as exc:
        sys.stderr.write(f"fp4bench sandbox: refused to run the worker: {exc}\n")
        os._exit(EXIT_REFUSED)
    runpy.run_module("harness.worker", run_name="__main__", alter_sys=True)

if __name__ == "__main__":
    main()
