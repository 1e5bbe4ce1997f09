"""Every OS thread of this process and the CPU time it used: finds work done outside the timed window.

A submission's thread can find freshly drawn inputs through the garbage collector and compute their outputs
before the window opens. ``threading.enumerate()`` lists only ``threading.Thread`` objects, not a thread started
with ``_thread`` or by a C library, so threads are taken from the OS: ``/proc/self/task`` lists them all, and
``/proc/self/task/TID/stat`` gives each one's name (comm, 15 characters) and start time.

CPU time per thread comes from its per-thread CPU clock. Linux encodes the clock of thread TID as
``((~TID) << 3) | 6``: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), with CPUCLOCK_PERTHREAD_MASK 4 and
CPUCLOCK_SCHED 2 (include/linux/posix-timers.h), the id glibc's pthread_getcpuclockid returns. Reading it
(task_sched_runtime) folds in the slice the thread is running now, in ns. Not used: ``/proc/self/task/TID/
schedstat`` holds the same sum without the running slice (stale by up to a scheduler tick for a thread busy on
another CPU); psutil's ``Process().threads()`` reports user/system time in clock ticks (10 ms), so a thread that
wakes for 20 us every 10 ms (raw_thread_idle.py) shows no time at all for long stretches.

The process CPU clock (``time.process_time_ns()``) also keeps the time of threads that have exited, so "process
clock minus live threads" between two snapshots is what exited threads used. The kernel sums the process clock
from each thread's runtime as last brought up to date, and reading a thread's clock brings it up to date; so a
snapshot reads every thread, then the process clock, then every thread again: the second pass bounds what busy
threads ran between their read and the process clock's (``slack_ns``), and the residue less that slack never
exceeds what exited threads really used (an honest process with busy pool threads shows no residue).

``foreign_cpu`` judges two snapshots; the worker decides when to take them. An idle thread (blocked on a lock, a
queue or a pipe) uses no CPU and is no finding: torch.compile leaves such pool threads. Threads alive before the
submission is imported (the main thread, CUDA's, the OpenMP pool after ``prestart_torch_pool``, the worker's own)
are the trusted set. A submission that raises ``torch.set_num_threads`` creates new pool threads, which spin for a
while after each parallel region (GOMP_SPINCOUNT / KMP_BLOCKTIME) and so show as foreign CPU after the window.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

#: The residue (less the slack) is a lower bound of what exited threads used; below this it is not reported.
EXITED_TOLERANCE_NS = 50_000
EXITED = "threads that have exited"


def thread_clock(tid: int) -> int:
    """The per-thread CPU clock id of thread ``tid`` (Linux: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED))."""
    return ((~tid) << 3) | 6


@dataclass(frozen=True)
class ThreadInfo:
    tid: int
    name: str          # comm as the kernel has it (at most 15 characters)
    cpu_ns: int        # CPU time used since the thread started
    start_ticks: int   # start time after boot in clock ticks: tells a reused tid from the thread it replaced


@dataclass(frozen=True)
class Snapshot:
    process_ns: int                       # the process CPU clock, exited threads included, read after the threads
    threads: Mapping[int, ThreadInfo]     # read-only, by tid
    slack_ns: int = 0                     # what the threads ran between their read and the process clock's, at most

    def tids(self) -> frozenset[int]:
        """The threads alive in this snapshot (as ``trusted`` for a later ``foreign_cpu``)."""
        return frozenset(self.threads)


@dataclass(frozen=True)
class Finding:
    name: str
    tid: int | None    # None for the threads that have exited
    cpu_ns: int

    def describe(self) -> str:
        """One line: "thread 'python3' (tid 1234) used 3.2 ms of CPU outside the timed window"."""
        who = self.name if self.tid is None else f"thread '{self.name}' (tid {self.tid})"
        return f"{who} used {_duration(self.cpu_ns)} of CPU outside the timed window"


def _duration(ns: int) -> str:
    return f"{ns / 1e6:.1f} ms" if ns >= 1_000_000 else f"{ns / 1e3:.0f} us" if ns >= 1000 else f"{ns} ns"


def _read(tid: int) -> ThreadInfo | None:
    """One thread, or None if it exited while being read."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        cpu_ns = time.clock_gettime_ns(thread_clock(tid))
    except (FileNotFoundError, ProcessLookupError, OSError):
        return None
    name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
    return ThreadInfo(tid, name, cpu_ns, int(rest[19]))  # stat field 22, starttime (fields 3.. follow the name)


def snapshot() -> Snapshot:
    """Every thread of this process with its CPU time, the process CPU clock, and the slack (module docstring).
    Linux only (/proc). Raises OSError if /proc/self/task cannot be listed."""
    caller = threading.get_native_id()
    threads = {}
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        info = _read(tid) if tid != caller else None
        if info is not None:
            threads[tid] = info
    threads[caller] = _read(caller)  # last: it runs until the process clock is read
    process_ns = time.process_time_ns()
    slack_ns = 0
    for tid in (caller, *(t for t in threads if t != caller)):  # the caller first: it runs this loop
        try:
            slack_ns += time.clock_gettime_ns(thread_clock(tid)) - threads[tid].cpu_ns
        except OSError:  # it ended mid-snapshot; what it ran after its read (microseconds) is not bounded here
            continue
    return Snapshot(process_ns, MappingProxyType(threads), slack_ns)


def foreign_cpu(before: Snapshot, after: Snapshot, trusted: frozenset[int]) -> list[Finding]:
    """The CPU used between two snapshots by threads not in ``trusted`` (tids), one finding per thread that used
    any, plus one for "threads that have exited" when the process clock advanced by more than the live threads
    and ``after``'s slack account for (above ``EXITED_TOLERANCE_NS``). A thread whose tid was reused counts as
    new. Idle threads are no finding. Threads the worker itself starts and joins between the two snapshots count
    as exited: it must not."""
    findings, live_ns = [], 0
    for tid, now in sorted(after.threads.items()):
        was = before.threads.get(tid)
        same = was is not None and was.start_ticks == now.start_ticks
        used = now.cpu_ns - was.cpu_ns if same else now.cpu_ns
        live_ns += used
        if used > 0 and not (tid in trusted and (same or was is None)):
            findings.append(Finding(now.name, tid, used))
    residue = after.process_ns - before.process_ns - live_ns - after.slack_ns
    if residue > EXITED_TOLERANCE_NS:
        findings.append(Finding(EXITED, None, residue))
    return findings


def merged(findings: list[Finding]) -> list[Finding]:
    """``findings`` from several intervals with one finding per thread (name, tid): their CPU times summed, in the
    order each thread first appears."""
    total: dict[tuple[str, int | None], int] = {}
    for f in findings:
        total[(f.name, f.tid)] = total.get((f.name, f.tid), 0) + f.cpu_ns
    return [Finding(name, tid, ns) for (name, tid), ns in total.items()]


def prestart_torch_pool() -> int:
    """Start torch's intra-op (OpenMP) thread pool now, by running a small parallel op, so its threads are alive
    before the submission is imported and can be trusted. Returns the number of intra-op threads torch uses."""
    import torch

    x = torch.ones(1 << 20)
    for _ in range(3):
        x = x + 1  # an elementwise op above torch's grain size (32768) runs on every pool thread
    return torch.get_num_threads()
