"""The processes a submission starts, kept in view and ended by the parent: nothing the worker says counts here.

A submission can start processes (``subprocess``, ``os.fork``; a daemon: fork, setsid, fork, the middle one exits).
They are invisible to the worker's thread watch and outlive the worker's session when the run shares the parent's
PID namespace (CUDA runs): one spinning on the CPU while the other side of ``compare`` is timed skews the verdict.
So the parent:

- makes itself a child subreaper (``become_subreaper``, once, before its first worker): a process orphaned below a
  worker is adopted by the parent instead of init, so it stays in view (``strays``) and its zombie is reaped here;
- knows each worker's processes (``WorkerTree``): the process it started (a launcher such as ``unshare`` or bwrap,
  or the worker itself), the launcher's own processes down to the worker (resolved before any submission code
  runs), and everything below (``descendants``);
- at the end of every case kills every descendant of the worker and every adopted orphan (``kill``); the case then
  fails (``left_behind``). ``LEDGER`` says whose an orphan is when two workers run (``compare``).

What a process is and how the tree is read: harness.parent.proc_table. Linux only (/proc); elsewhere nothing is
found and ``become_subreaper`` says why it did nothing.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from typing import Callable, Hashable, Iterable

from harness.parent.proc_table import Proc, below, by_parent, children, read, same_and_alive, stat, strays, table

PR_SET_CHILD_SUBREAPER = 36
#: How long ``kill`` keeps looking for processes that are still alive or were started meanwhile, at most (s).
KILL_WAIT_S = 5.0
_subreaper: str | None = None  # None: not tried yet; "": this process is a subreaper; else why not


def become_subreaper() -> str:
    """Make this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER), once: "" when it is one, else why not
    (not Linux, prctl failed). Never raises; later calls return the first answer."""
    global _subreaper
    if _subreaper is None:
        if not sys.platform.startswith("linux"):
            _subreaper = f"not Linux ({sys.platform}): orphans of a worker go to init, out of the parent's sight"
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
                _subreaper = ""
            else:
                err = ctypes.get_errno()
                _subreaper = f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(err)} (errno {err})"
    return _subreaper


def _sigkill(p: Proc) -> bool:
    """SIGKILL ``p`` if it is still that process (pid and start time; through a pidfd where the kernel has them,
    so a reused pid is never hit). Returns whether the signal went."""
    try:
        fd = os.pidfd_open(p.pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):
        fd = None
    try:
        if not same_and_alive(p, stat(p.pid)):
            return False
        if fd is None:
            os.kill(p.pid, signal.SIGKILL)
        else:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


class WorkerTree:
    """One worker's processes. ``root``: the process the parent started (a launcher such as ``unshare`` or bwrap,
    or the worker itself); ``launchers``: the launcher's own processes from ``root`` down to the worker (e.g.
    unshare, its PID namespace's first process ``sh``), named by ``launcher_names``; ``worker``: the process that
    runs ``python -m harness.worker`` (None until found). Made by ``watch``."""

    def __init__(self, root: int, launcher_names: Iterable[str] = ()):
        self.root, self.launcher_names = root, frozenset(n[:15] for n in launcher_names)
        self.launchers: tuple[Proc, ...] = ()
        self.worker: Proc | None = None
        self.ending = False  # set when the parent ends this worker: its processes are no longer spared
        started = stat(root)
        self.start_ticks = started.start_ticks if started else 0  # every process below starts later

    def resolve(self, timeout_s: float = 10.0) -> bool:
        """Find the worker: from ``root`` down each launcher's oldest child to the first process whose name is
        not one of ``launcher_names`` (a launcher that has not yet exec'd the next program, or started its child,
        is waited for). Call it before the worker is sent any request: no submission code has run, so the names
        and the order of children are the launchers'. Waits up to ``timeout_s`` (s; 10-30 ms seen here). Returns
        whether the worker was found (False: ``root`` ended first, or the time ran out)."""
        deadline, chain, pid = time.monotonic() + timeout_s, [], self.root
        while time.monotonic() < deadline:
            p = stat(pid)
            if p is None or not p.alive:
                return False
            if p.name not in self.launcher_names:
                self.launchers, self.worker = tuple(chain), p
                return True
            kids = children(pid)
            if kids:
                chain.append(p)
                pid = kids[0]
            else:
                time.sleep(0.001)
        return False

    def own(self) -> list[Proc]:
        """The launchers' processes and the worker: what the end of a case leaves running."""
        return [*self.launchers, *([self.worker] if self.worker else [])]

    def members(self, tab: dict[int, Proc] | None = None) -> list[Proc]:
        """``root`` and every process below it, alive or zombie (CPU time as ``tab`` has it)."""
        tab = tab if tab is not None else table()
        root = tab.get(self.root)
        return ([root] if root else []) + below(self.root, tab)

    def leftovers(self, tab: dict[int, Proc] | None = None) -> list[Proc]:
        """The live processes below ``root`` other than the launchers' and the worker (the submission's), oldest
        first; all of them below ``root`` when the worker was never found."""
        own = {p.key for p in self.own()}
        found = below(self.root, tab if tab is not None else table())
        return [read(p.pid) or p for p in found if p.alive and p.key not in own]


#: Every WorkerTree this process has started whose root it has not yet waited for, by root pid: the roots are
#: "known" to ``strays`` and ``reap`` (never taken for orphans), and the launchers and workers of those not
#: ``ending`` are spared by ``kill``.
TREES: dict[int, WorkerTree] = {}


def watch(root: int, launcher_names: Iterable[str] = (), timeout_s: float = 10.0) -> WorkerTree:
    """The WorkerTree of the just started ``root``, resolved (``WorkerTree.resolve``) and registered in TREES."""
    tree = WorkerTree(root, launcher_names)
    TREES[root] = tree
    tree.resolve(timeout_s)
    return tree


def unwatch(tree: WorkerTree) -> None:
    """Forget ``tree`` once its root has been waited for (``subprocess.Popen.wait``)."""
    TREES.pop(tree.root, None)


def _spared() -> list[Proc]:
    return [p for t in TREES.values() if not t.ending for p in t.own()]


def known() -> set[int]:
    """The pids this process started or runs as workers (TREES' roots, launchers and workers): never strays."""
    return set(TREES) | {p.pid for t in TREES.values() for p in t.own()}


def reap() -> int:
    """Collect the zombies of adopted orphans (``strays``' criteria; never a process this one started, so no
    ``subprocess.Popen`` loses its exit status). Returns how many were reaped."""
    me, sid, n, mine = os.getpid(), os.getsid(0), 0, known()
    for p in table().values():
        if p.ppid == me and not p.alive and p.pid not in mine and p.sid != sid:
            try:
                n += os.waitpid(p.pid, os.WNOHANG)[0] == p.pid
            except ChildProcessError:
                pass
    return n


def kill(found: Iterable[Proc], more: Callable[[dict[int, Proc]], list[Proc]] | None = None,
         wait_s: float = KILL_WAIT_S) -> list[Proc]:
    """SIGKILL every process of ``found`` that is still alive, then, round after round until a round finds none
    alive (or ``wait_s`` seconds have passed): what is left of them, the processes below them, the orphans adopted
    since this call began and ``more(table)``. A process group is killed whole when it holds none of a watched
    worker's or launcher's processes (TREES) and is not this process's. Reaps the adopted orphans' zombies.
    Returns every process it found alive and signalled, oldest first."""
    doomed = {p.key: p for p in found}
    before = {p.key for p in strays(known())}
    hit: dict[tuple[int, int], Proc] = {}
    deadline = time.monotonic() + wait_s
    own_pgid, own_sid = os.getpgid(0), os.getsid(0)
    while True:
        tab = table()
        kids = by_parent(tab)
        spared = {p.key for p in _spared()}
        extra = [s for s in strays(known(), tab) if s.key not in before]
        for p in list(doomed.values()) + extra + (more(tab) if more else []):
            doomed.setdefault(p.key, p)
        todo = [p for p in doomed.values() if same_and_alive(p, tab.get(p.pid))]
        while todo:  # everything below a doomed process
            for c in kids.get(todo.pop().pid, ()):
                if c.key not in doomed and c.key not in spared:
                    doomed[c.key] = c
                    todo.append(c)
        live = [p for p in doomed.values() if same_and_alive(p, tab.get(p.pid)) and p.key not in spared]
        if not live or time.monotonic() > deadline:
            break
        spared_groups = {tab[p.pid].pgid for p in _spared() if p.pid in tab}
        for p in live:
            g = tab[p.pid].pgid
            if g > 1 and g != own_pgid and g not in spared_groups and tab[p.pid].sid != own_sid:
                try:
                    os.killpg(g, signal.SIGKILL)
                except OSError:
                    pass
            _sigkill(p)
            hit.setdefault(p.key, p)
        time.sleep(0.002)
    reap()
    return sorted(hit.values(), key=lambda p: (p.start_ticks, p.pid))


def reap_gone(found: Iterable[Proc], wait_s: float = KILL_WAIT_S) -> list[Proc]:
    """Reap adopted zombies (``reap``) until no process of ``found`` is left in the table, alive or a zombie, or
    ``wait_s`` seconds have passed: a killed worker may finish exiting (a large CUDA address space takes a while)
    after its launcher was waited for, and only then hands its dead children to this process. Returns what is
    left."""
    deadline = time.monotonic() + wait_s
    while True:
        reap()
        tab = table()
        left = [p for p in found if (now := tab.get(p.pid)) is not None and now.start_ticks == p.start_ticks]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.002)


def left_behind(found: list[Proc]) -> str | None:
    """The failure message for processes the submission left running, naming the oldest and counting the rest:
    "left a process behind: pid 1234 'python3' (started by the submission; fp4bench killed it)"; None when
    ``found`` is empty."""
    if not found:
        return None
    first = min(found, key=lambda p: (p.start_ticks, p.pid))
    rest = len({p.key for p in found}) - 1
    others = f" and {rest} other{'s' if rest > 1 else ''}" if rest else ""
    return (f"left a process behind: pid {first.pid} '{first.name}'{others} (started by the submission; "
            f"fp4bench killed {'them' if rest else 'it'})")


class Ledger:
    """Whose adopted orphan is whose when several workers run (``compare``): the owner (any hashable, e.g. a
    Session) whose worker's tree it was last seen in (``observe``), else the owners whose requests were in flight
    when it was first seen (``attribute``: each of them, when several were), never one that started after it.
    Processes charged to an owner wait in the ledger until ``take``."""

    def __init__(self):
        self._seen: dict[tuple[int, int], Hashable] = {}
        self._since: dict[Hashable, int] = {}
        self._owed: dict[Hashable, dict[tuple[int, int], Proc]] = {}
        self._taken: set[tuple[int, int]] = set()  # charged and taken: never charged again

    def enter(self, owner: Hashable, start_ticks: int) -> None:
        """``owner``'s first worker started at ``start_ticks``: older orphans are never its."""
        self._since.setdefault(owner, start_ticks)

    def leave(self, owner: Hashable) -> None:
        """``owner`` is done: forget it and what it was owed."""
        self._since.pop(owner, None)
        self._owed.pop(owner, None)
        self._seen = {k: o for k, o in self._seen.items() if o is not owner}

    def observe(self, owner: Hashable, procs: Iterable[Proc]) -> None:
        """``procs`` are in ``owner``'s worker's tree now."""
        for p in procs:
            self._seen[p.key] = owner

    def charge(self, owner: Hashable, procs: Iterable[Proc]) -> None:
        """``procs`` are ``owner``'s to answer for."""
        self._owed.setdefault(owner, {}).update((p.key, p) for p in procs)

    def attribute(self, in_flight: list[Hashable], tab: dict[int, Proc] | None = None) -> list[Proc]:
        """Charge every adopted orphan not yet charged to anyone (``observe``'s owner, else ``in_flight``'s
        owners that started before it); returns the orphans charged now. Forgets observations of ended
        processes."""
        tab = tab if tab is not None else table()
        live = lambda k: k[0] in tab and tab[k[0]].start_ticks == k[1]  # noqa: E731
        self._seen = {k: o for k, o in self._seen.items() if live(k)}
        self._taken = {k for k in self._taken if live(k)}
        charged = self._taken | {k for owed in self._owed.values() for k in owed}
        new = []
        for s in strays(known(), tab):
            if s.key in charged:
                continue
            seen = self._seen.get(s.key)
            owners = [seen] if seen is not None else [
                o for o in in_flight if self._since.get(o, 0) <= s.start_ticks]
            for o in owners:
                self.charge(o, [s])
            new += [s] if owners else []
        return new

    def take(self, owner: Hashable) -> list[Proc]:
        """What ``owner`` was charged with since the last ``take``, oldest first (never charged again)."""
        owed = self._owed.pop(owner, {})
        self._taken.update(owed)
        return sorted(owed.values(), key=lambda p: (p.start_ticks, p.pid))


#: The parent's one ledger (orphans are adopted by the process, not by a worker).
LEDGER = Ledger()
