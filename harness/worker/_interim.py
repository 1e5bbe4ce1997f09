"""INTERIM stand-ins for harness.worker.native and harness.worker.threads (replaced when those land)."""
from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass


class PythonWindow:
    kind = "python"

    def __init__(self):
        self._t = None
        self._start_ev = None
        self._end_ev = None

    def arm(self):
        pass

    def read_line(self, fd):
        buf = bytearray()
        while not buf.endswith(b"\n"):
            chunk = os.read(fd, 1)
            if not chunk:
                break
            buf += chunk
        return bytes(buf)

    def run_calls(self, kernel, inputs, stream):
        import torch
        gc.disable()
        if stream is not None:
            self._start_ev, self._end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._start_ev.record()
        t0 = time.perf_counter_ns()
        try:
            out = [kernel(x) for x in inputs]
        finally:
            t1 = time.perf_counter_ns()
            if stream is not None:
                self._end_ev.record()
            self._t = t1 - t0
        return out

    def elapsed_ns(self):
        if self._end_ev is not None:
            self._end_ev.synchronize()
            return self._start_ev.elapsed_time(self._end_ev) * 1e6
        return float(self._t)

    def ms_after_start(self, event):
        raise NotImplementedError

    def scrub(self):
        pass

    def cleared(self):
        found = []
        if sys.gettrace() is not None:
            found.append("sys.settrace hook")
            sys.settrace(None)
        if sys.getprofile() is not None:
            found.append("sys.setprofile hook")
            sys.setprofile(None)
        return found

    def release(self):
        gc.enable()


@dataclass(frozen=True)
class ThreadInfo:
    tid: int
    name: str
    cpu_ns: int


@dataclass(frozen=True)
class Snapshot:
    process_ns: int
    threads: dict


def _cpu_ns(tid: int) -> int:
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def snapshot() -> Snapshot:
    threads = {}
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        threads[tid] = ThreadInfo(tid, name, _cpu_ns(tid))
    return Snapshot(time.process_time_ns(), threads)


@dataclass(frozen=True)
class Finding:
    name: str
    tid: int
    cpu_ns: int


def foreign_cpu(before: Snapshot, after: Snapshot, trusted: frozenset) -> list:
    out = []
    for tid, info in after.threads.items():
        if tid in trusted:
            continue
        used = info.cpu_ns - (before.threads[tid].cpu_ns if tid in before.threads else 0)
        if used > 0:
            out.append(Finding(info.name, tid, used))
    return out
