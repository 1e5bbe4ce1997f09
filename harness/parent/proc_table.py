"""Processes as /proc shows them, read by the parent: nothing the worker says counts here.

``Proc`` is one process's stat line (name, parent, start time, CPU time, state, group, session); ``table`` reads
every process, ``read`` one with its threads' CPU time, ``below``/``descendants``/``subtree`` walk the tree under a
process, ``strays`` finds the orphans this process adopted as a subreaper (harness.parent.proc_cleanup ends them).

Linux only (/proc); elsewhere nothing is found. Times: CPU time in ns, start times in clock ticks after boot
(``CLK_TCK`` a second).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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



def stat(pid: int, tid: int | None = None) -> Proc | None:
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
    t = stat(pid, tid)
    return t.cpu_ns if t is not None else None


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def read(pid: int) -> Proc | None:
    """Process ``pid`` now, with the CPU time of its live threads (schedstat, ns); None when it does not exist."""
    p = stat(pid)
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
    procs = (stat(int(n)) for n in names if n.isdigit())
    return {p.pid: p for p in procs if p is not None}


def by_parent(tab: dict[int, Proc]) -> dict[int, list[Proc]]:
    """The processes of ``tab`` (a ``table()``) grouped by their parent's pid."""
    kids: dict[int, list[Proc]] = {}
    for p in tab.values():
        kids.setdefault(p.ppid, []).append(p)
    return kids


def below(pid: int, tab: dict[int, Proc]) -> list[Proc]:
    """Every process below ``pid`` in ``tab``, oldest first, CPU time as ``tab`` has it."""
    kids, found, todo = by_parent(tab), [], [pid]
    while todo:
        for child in kids.get(todo.pop(), ()):
            found.append(child)
            todo.append(child.pid)
    return sorted(found, key=lambda p: (p.start_ticks, p.pid))


def descendants(pid: int, tab: dict[int, Proc] | None = None) -> list[Proc]:
    """Every process below ``pid`` (children, theirs, ...; zombies included, ``pid`` not), oldest first, with
    their CPU time read now (``read``). ``tab``: a ``table()`` to walk instead of a fresh one."""
    return [read(p.pid) or p for p in below(pid, tab if tab is not None else table())]


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


def same_and_alive(p: Proc, now: Proc | None) -> bool:
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


def children(pid: int) -> list[int]:
    """The children of process ``pid``, oldest first; [] when it has none or is gone."""
    found = _child_pids(pid)
    if found is None:
        return [c.pid for c in below(pid, table()) if c.ppid == pid]
    stats = [p for c in found if (p := stat(c)) is not None]
    return [p.pid for p in sorted(stats, key=lambda c: (c.start_ticks, c.pid))]


def subtree(pid: int) -> dict[int, Proc]:
    """``pid`` and every process below it, by pid, as ``table()`` has them, found through the children files of
    their threads: as many reads as the tree has threads, not one per process of the machine (``table()`` itself
    where the kernel has no such files). A process that starts or is re-parented while it is read can be missed:
    the end of a case reads the whole table."""
    out, todo = {}, [pid]
    while todo:
        p = stat(todo.pop())
        if p is None or p.pid in out:
            continue
        out[p.pid] = p
        kids = _child_pids(p.pid)
        if kids is None:
            return table()
        todo += kids
    return out
