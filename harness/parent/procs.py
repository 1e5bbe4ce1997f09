"""The processes a submission starts, seen and ended by the parent from /proc: nothing the worker says counts here.

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

Linux only (/proc); elsewhere nothing is found and ``become_subreaper`` says why it did nothing. Times: CPU time in
ns, start times in clock ticks after boot (``CLK_TCK`` a second).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable, Hashable, Iterable

PR_SET_CHILD_SUBREAPER = 36
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: How long ``kill`` keeps looking for processes that are still alive or were started meanwhile, at most (s).
KILL_WAIT_S = 5.0
_subreaper: str | None = None  # None: not tried yet; "": this process is a subreaper; else why not


@dataclass(frozen=True)
class Proc:
    """One process as /proc showed it: ``name`` is its comm (at most 15 characters, set by the process itself),
    ``start_ticks`` its start time after boot in clock ticks (with ``pid``, its identity: ``key``), ``cpu_ns`` the
    CPU time its live threads used (ns), ``state`` the stat letter (``Z``: a zombie), ``pgid`` and ``sid`` its
    process group and session."""

    pid: int
    name: str
    ppid: int
    start_ticks: int
    cpu_ns: int
    state: str = "R"
    pgid: int = 0
    sid: int = 0

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start_ticks

    @property
    def alive(self) -> bool:
        return self.state not in "ZX"


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


def _stat(pid: int, tid: int | None = None) -> Proc | None:
    """The process (or thread ``tid`` of it) from its stat file, CPU time as utime + stime; None when gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        fd = os.open(path, os.O_RDONLY)  # not open(): half the cost, and table() reads one per process
        try:
            text = os.read(fd, 4096).decode(errors="replace")
        finally:
            os.close(fd)
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()  # fields 3.. (the name may hold spaces and parentheses)
    ticks = int(rest[11]) + int(rest[12])  # utime, stime (fields 14, 15)
    return Proc(pid if tid is None else tid, text[text.index("(") + 1:text.rindex(")")], int(rest[1]),
                int(rest[19]), ticks * 1_000_000_000 // CLK_TCK, rest[0], int(rest[2]), int(rest[3]))


def _task_ns(pid: int, tid: int) -> int | None:
    """Thread ``tid``'s CPU time in ns: the first field of its schedstat (ns), else its stat's utime + stime."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
            ns = int(f.read().split()[0])
        if ns > 0:
            return ns
    except (OSError, ValueError, IndexError):
        pass
    t = _stat(pid, tid)
    return t.cpu_ns if t is not None else None


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def read(pid: int) -> Proc | None:
    """Process ``pid`` now, with the CPU time of its live threads (schedstat, ns); None when it does not exist."""
    p = _stat(pid)
    if p is None:
        return None
    per_task = [ns for tid in _tasks(pid) if (ns := _task_ns(pid, tid)) is not None]
    return replace(p, cpu_ns=sum(per_task)) if sum(per_task) > 0 else p


def table() -> dict[int, Proc]:
    """Every process this one can see, by pid (CPU time from stat: clock-tick resolution). Empty without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    procs = (_stat(int(n)) for n in names if n.isdigit())
    return {p.pid: p for p in procs if p is not None}


def _children(tab: dict[int, Proc]) -> dict[int, list[Proc]]:
    kids: dict[int, list[Proc]] = {}
    for p in tab.values():
        kids.setdefault(p.ppid, []).append(p)
    return kids


def _below(pid: int, tab: dict[int, Proc]) -> list[Proc]:
    """Every process below ``pid`` in ``tab``, oldest first, CPU time as ``tab`` has it."""
    kids, found, todo = _children(tab), [], [pid]
    while todo:
        for child in kids.get(todo.pop(), ()):
            found.append(child)
            todo.append(child.pid)
    return sorted(found, key=lambda p: (p.start_ticks, p.pid))


def descendants(pid: int, tab: dict[int, Proc] | None = None) -> list[Proc]:
    """Every process below ``pid`` (children, theirs, ...; zombies included, ``pid`` not), oldest first, with
    their CPU time read now (``read``). ``tab``: a ``table()`` to walk instead of a fresh one."""
    return [read(p.pid) or p for p in _below(pid, tab if tab is not None else table())]


def strays(known: set[int], tab: dict[int, Proc] | None = None) -> list[Proc]:
    """The live orphans this process adopted as a subreaper, oldest first: its children that are not in ``known``
    (the pids it started itself: workers or launchers) and not in its own session (a worker starts a session of
    its own, and nothing below it can join this one, so a child in it is one this process started:
    ``subprocess.run``). So this process must start no child in a session of its own but its workers (``watch``
    them): such a child would be taken for an orphan, and ``reap`` could take its exit status. ``tab`` as for
    ``descendants``."""
    me, sid = os.getpid(), os.getsid(0)
    tab = tab if tab is not None else table()
    found = [p for p in tab.values() if p.ppid == me and p.pid not in known and p.sid != sid and p.alive]
    return [read(p.pid) or p for p in sorted(found, key=lambda p: (p.start_ticks, p.pid))]


def tree_cpu_ns(pid: int) -> dict[int, int]:
    """CPU time (ns) of every thread of process ``pid`` and of every process below it, by thread id (schedstat's
    first field, else utime + stime). Threads that have exited are not in it; neither is a process that ends
    while it is read. Empty when ``pid`` does not exist."""
    out: dict[int, int] = {}
    for p in [pid, *(d.pid for d in descendants(pid))]:
        for tid in _tasks(p):
            ns = _task_ns(p, tid)
            if ns is not None:
                out[tid] = ns
    return out


def _is(p: Proc, now: Proc | None) -> bool:
    """Whether ``now`` (a fresh read of ``p.pid``) is ``p`` and alive."""
    return now is not None and now.start_ticks == p.start_ticks and now.alive


def _child_pids(pid: int) -> list[int] | None:
    """The children of process ``pid`` (of all its threads) from /proc/PID/task/TID/children; None where the
    kernel has no such files (CONFIG_PROC_CHILDREN)."""
    found = []
    for tid in _tasks(pid):
        try:
            fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY)
        except FileNotFoundError:
            if os.path.exists(f"/proc/{pid}/task/{tid}"):
                return None
            continue
        except OSError:
            continue
        try:
            found += [int(c) for c in os.read(fd, 1 << 16).split()]
        except OSError:
            pass
        finally:
            os.close(fd)
    return found


def _kids(pid: int) -> list[int]:
    """The children of process ``pid``, oldest first; [] when it has none or is gone."""
    found = _child_pids(pid)
    if found is None:
        return [c.pid for c in _below(pid, table()) if c.ppid == pid]
    stats = [p for c in found if (p := _stat(c)) is not None]
    return [p.pid for p in sorted(stats, key=lambda c: (c.start_ticks, c.pid))]


def subtree(pid: int) -> dict[int, Proc]:
    """``pid`` and every process below it, by pid, as ``table()`` has them, found through the children files of
    their threads: as many reads as the tree has threads, not one per process of the machine (``table()`` itself
    where the kernel has no such files). A process that starts or is re-parented while it is read can be missed:
    the end of a case reads the whole table."""
    out, todo = {}, [pid]
    while todo:
        p = _stat(todo.pop())
        if p is None or p.pid in out:
            continue
        out[p.pid] = p
        kids = _child_pids(p.pid)
        if kids is None:
            return table()
        todo += kids
    return out


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
        if not _is(p, _stat(p.pid)):
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
        started = _stat(root)
        self.start_ticks = started.start_ticks if started else 0  # every process below starts later

    def resolve(self, timeout_s: float = 10.0) -> bool:
        """Find the worker: from ``root`` down each launcher's oldest child to the first process whose name is
        not one of ``launcher_names`` (a launcher that has not yet exec'd the next program, or started its child,
        is waited for). Call it before the worker is sent any request: no submission code has run, so the names
        and the order of children are the launchers'. Waits up to ``timeout_s`` (s; 10-30 ms seen here). Returns
        whether the worker was found (False: ``root`` ended first, or the time ran out)."""
        deadline, chain, pid = time.monotonic() + timeout_s, [], self.root
        while time.monotonic() < deadline:
            p = _stat(pid)
            if p is None or not p.alive:
                return False
            if p.name not in self.launcher_names:
                self.launchers, self.worker = tuple(chain), p
                return True
            kids = _kids(pid)
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
        return ([root] if root else []) + _below(self.root, tab)

    def leftovers(self, tab: dict[int, Proc] | None = None) -> list[Proc]:
        """The live processes below ``root`` other than the launchers' and the worker (the submission's), oldest
        first; all of them below ``root`` when the worker was never found."""
        own = {p.key for p in self.own()}
        found = _below(self.root, tab if tab is not None else table())
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
        kids = _children(tab)
        spared = {p.key for p in _spared()}
        extra = [s for s in strays(known(), tab) if s.key not in before]
        for p in list(doomed.values()) + extra + (more(tab) if more else []):
            doomed.setdefault(p.key, p)
        todo = [p for p in doomed.values() if _is(p, tab.get(p.pid))]
        while todo:  # everything below a doomed process
            for c in kids.get(todo.pop().pid, ()):
                if c.key not in doomed and c.key not in spared:
                    doomed[c.key] = c
                    todo.append(c)
        live = [p for p in doomed.values() if _is(p, tab.get(p.pid)) and p.key not in spared]
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
