"""CPU used by a worker's threads and its descendants' threads, read by the parent from /proc: work outside the
timed window, judged where the submission cannot write.

The worker's own account of its threads would be a claim (a submission can swap the functions or globals it reads
/proc through). The parent reads ``/proc/<pid>/task/<tid>/schedstat`` (the first field is the task's CPU time in ns,
sum_exec_runtime) for the worker and every descendant (``/proc/<pid>/task/<tid>/children``). Tasks alive before
the submission is imported (the worker's main thread, CUDA's, the OpenMP pool, CUPTI's) are trusted; any other
task that used CPU between two snapshots is a finding. A thread that starts and exits between two snapshots is
not seen: the process's tick counts round each thread apart (a residue of two ticks with no thread exiting, seen
on this project's CI host), and what such a thread could compute outside the window is wrong anyway (the inputs'
canaries, harness.parent.samples).
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    pid: int
    tid: int
    name: str
    cpu_ns: int


@dataclass(frozen=True)
class Snapshot:
    root: int                            # the pid the tree was read from (the worker, or its launcher)
    tasks: dict[tuple[int, int], Task]   # (pid, tid) -> Task


@dataclass(frozen=True)
class Finding:
    name: str
    pid: int
    tid: int
    cpu_ns: int
    child: bool = False   # a task of a process below the worker, not of the worker itself

    def describe(self) -> str:
        who = "child process" if self.child else "thread"
        return f"{who} '{self.name}' (pid {self.pid}, tid {self.tid}) used {_ms(self.cpu_ns)}"


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
    """Every task of ``pid``'s tree with its CPU time (ns). A task or process that ends while being read is left
    out."""
    tasks = {}
    for p in tree(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            tid = int(t)
            sched, tstat = _read(f"/proc/{p}/task/{t}/schedstat"), _read(f"/proc/{p}/task/{t}/stat")
            if sched is None or tstat is None:
                continue
            tasks[(p, tid)] = Task(p, tid, _stat_fields(tstat)[0], int(sched.split()[0]))
    return Snapshot(pid, tasks)


def foreign(before: Snapshot, after: Snapshot, trusted: frozenset) -> list[Finding]:
    """CPU used between ``before`` and ``after`` by tasks not in ``trusted`` ((pid, tid) pairs), one finding per
    task that used any. A task new in ``after`` counts from zero. ``child``: the task belongs to a process below the
    worker (any pid of the tree but the root's and the worker's own: the launcher's processes are trusted)."""
    found = []
    worker_pids = {p for (p, _t) in trusted}
    for key, now in after.tasks.items():
        if key in trusted:
            continue
        was = before.tasks.get(key)
        used = now.cpu_ns - (was.cpu_ns if was is not None else 0)
        if used > 0:
            found.append(Finding(now.name, now.pid, now.tid, used, now.pid not in worker_pids))
    return found


#: What the worker's own tasks (main thread, CUDA's, the OpenMP pool) may use while it waits for the parent's next
#: request, where an honest worker sits in recv(): a fixed allowance (its last lines after a reply; an OpenMP
#: pool's spin-wait, which the worker's GOMP_SPINCOUNT keeps short) plus a share of the wait's wall time.
IDLE_ALLOWANCE_NS = 10_000_000
IDLE_SHARE = 0.25


def idle_verdict(before: Snapshot, after: Snapshot, trusted: frozenset, wall_ns: int) -> str | None:
    """A finding when the ``trusted`` tasks used more CPU between ``before`` (the worker's reply) and ``after``
    (the parent's next request, ``wall_ns`` later) than an idle worker does: the submission working from the
    worker's own thread between requests (on the inputs it last saw, or to slow the other side of a compare)."""
    used = sum(now.cpu_ns - before.tasks[key].cpu_ns for key, now in after.tasks.items()
               if key in trusted and key in before.tasks)
    if used <= IDLE_ALLOWANCE_NS + IDLE_SHARE * wall_ns:
        return None
    return (f"work outside the timed window: the worker's own threads used {_ms(used)} of CPU in the "
            f"{_ms(wall_ns)} it waited for its next request (read by the parent from /proc); a submission must be "
            f"idle outside its custom_kernel calls")


def verdict(findings: list[Finding]) -> str | None:
    """The sentence for ``findings``, or None."""
    if not findings:
        return None
    shown = "; ".join(f.describe() for f in findings[:3])
    more = f" and {len(findings) - 3} more did too" if len(findings) > 3 else ""
    return (f"work outside the timed window: {shown}{more} of CPU between samples (read by the parent from /proc); "
            f"a submission's threads and processes must be idle outside its custom_kernel calls")
