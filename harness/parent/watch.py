"""CPU used by a worker's threads and its descendants' threads, read by the parent from /proc: work outside the
timed window, judged where the submission cannot write.

The worker's own account of its threads would be a claim (a submission can swap the functions or globals it reads
/proc through). The parent reads ``/proc/<pid>/task/<tid>/schedstat`` (the first field is the task's CPU time in ns,
sum_exec_runtime) for the worker and every descendant (``/proc/<pid>/task/<tid>/children``), and
``/proc/<pid>/stat`` (utime + stime, clock ticks, the time of threads that have exited included) for what exited
threads used. Tasks alive before the submission is imported (the worker's main thread, CUDA's, the OpenMP pool,
CUPTI's) are trusted; any other task that used CPU between two snapshots is a finding, and so is the CPU of
threads that exited between them, beyond a rounding tick.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

#: Clock ticks a second (utime/stime units in /proc/<pid>/stat).
_TICKS = os.sysconf("SC_CLK_TCK")
#: Exited threads' CPU below this many ticks (summed over the tree) is rounding, not a finding.
EXITED_TICKS = 2


@dataclass(frozen=True)
class Task:
    pid: int
    tid: int
    name: str
    cpu_ns: int


@dataclass(frozen=True)
class Snapshot:
    tasks: dict[tuple[int, int], Task]   # (pid, tid) -> Task
    ticks: int                           # utime + stime of every process of the tree, exited threads included
    live_ticks: int                      # the same summed over the live tasks


@dataclass(frozen=True)
class Finding:
    name: str
    pid: int
    tid: int          # 0: threads that have exited
    cpu_ns: int

    def describe(self) -> str:
        if not self.tid:
            return f"threads that have since exited used {_ms(self.cpu_ns)}"
        return f"thread '{self.name}' (pid {self.pid}, tid {self.tid}) used {_ms(self.cpu_ns)}"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.1f} ms" if ns >= 100_000 else f"{max(ns / 1e3, 1):.0f} us"


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def _stat_fields(text: str) -> tuple[str, list[str]]:
    """(comm, the fields after it) of a /proc stat line (comm may hold spaces and parentheses)."""
    return text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()


def tree(pid: int) -> list[int]:
    """``pid`` and every live descendant (depth first), from /proc/<pid>/task/<tid>/children."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            kids = _read(f"/proc/{p}/task/{t}/children")
            if kids:
                todo += [int(c) for c in kids.split()]
    return seen


def snapshot(pid: int) -> Snapshot:
    """Every task of ``pid``'s tree with its CPU time (ns), and the tree's tick counts. A task or process that
    ends while being read is left out."""
    tasks, ticks, live = {}, 0, 0
    for p in tree(pid):
        stat = _read(f"/proc/{p}/stat")
        if stat is None:
            continue
        _, f = _stat_fields(stat)
        ticks += int(f[11]) + int(f[12])  # utime, stime (fields 14, 15)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            tid = int(t)
            sched, tstat = _read(f"/proc/{p}/task/{t}/schedstat"), _read(f"/proc/{p}/task/{t}/stat")
            if sched is None or tstat is None:
                continue
            name, tf = _stat_fields(tstat)
            live += int(tf[11]) + int(tf[12])
            tasks[(p, tid)] = Task(p, tid, name, int(sched.split()[0]))
    return Snapshot(tasks, ticks, live)


def foreign(before: Snapshot, after: Snapshot, trusted: frozenset) -> list[Finding]:
    """CPU used between ``before`` and ``after`` by tasks not in ``trusted`` ((pid, tid) pairs), one finding per
    task that used any, plus one for threads that exited (more than EXITED_TICKS of the tree's ticks not found
    in its live tasks). A task new in ``after`` counts from zero."""
    found = []
    for key, now in after.tasks.items():
        if key in trusted:
            continue
        was = before.tasks.get(key)
        used = now.cpu_ns - (was.cpu_ns if was is not None else 0)
        if used > 0:
            found.append(Finding(now.name, now.pid, now.tid, used))
    residue = (after.ticks - before.ticks) - (after.live_ticks - before.live_ticks)
    if residue >= EXITED_TICKS:
        found.append(Finding("exited", 0, 0, residue * 1_000_000_000 // _TICKS))
    return found


def verdict(findings: list[Finding]) -> str | None:
    """The sentence for ``findings``, or None."""
    if not findings:
        return None
    shown = "; ".join(f.describe() for f in findings[:3])
    more = f" and {len(findings) - 3} more did too" if len(findings) > 3 else ""
    return (f"work outside the timed window: {shown}{more} of CPU between samples (read by the parent from /proc); "
            f"a submission's threads and processes must be idle outside its custom_kernel calls")
