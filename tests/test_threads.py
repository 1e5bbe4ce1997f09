"""harness.worker.threads: every OS thread and its CPU time, judged between two snapshots."""
from __future__ import annotations

import _thread
import ctypes
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.worker import threads
from harness.worker.threads import EXITED, EXITED_TOLERANCE_NS, Finding, Snapshot, ThreadInfo, foreign_cpu, snapshot

ROOT = Path(__file__).resolve().parent.parent

_PR_SET_NAME = 15  # prctl(2): the calling thread's comm
_BLOCK = b"\0" * (1 << 20)


def _name_thread(name: bytes) -> None:
    ctypes.CDLL(None).prctl(_PR_SET_NAME, name, 0, 0, 0)


def _burn(cpu_ns: int) -> None:
    """Use at least ``cpu_ns`` of this thread's CPU (measured by its own clock)."""
    t0 = time.thread_time_ns()
    while time.thread_time_ns() - t0 < cpu_ns:
        hashlib.sha256(_BLOCK).digest()


def _state(tid: int) -> str:
    with open(f"/proc/self/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _mine(findings: list[Finding], tids) -> list[Finding]:
    return [f for f in findings if f.tid in tids]


def test_thread_clock_is_the_threads_own_cpu_clock():
    """The encoding ((~tid) << 3) | 6 names this thread's CPU clock: it reads between two thread_time_ns()."""
    own = threads.thread_clock(threading.get_native_id())
    before = time.thread_time_ns()
    mid = time.clock_gettime_ns(own)
    after = time.thread_time_ns()
    assert before <= mid <= after


def _around_a_spinner(start, burn_ns: int, name: bytes = b""):
    """A thread started by ``start(target)`` that, between two snapshots, burns ``burn_ns`` of CPU (named
    ``name`` when given); returns (before, after, its tid). The thread then waits until the test ends."""
    go, done, stop, seen = threading.Event(), threading.Event(), threading.Event(), {}

    def spin():
        if name:
            _name_thread(name)
        seen["tid"] = threading.get_native_id()
        go.wait()
        _burn(burn_ns)
        done.set()
        stop.wait()

    start(spin)
    while "tid" not in seen:
        time.sleep(0.001)
    before = snapshot()
    go.set()
    done.wait()
    after = snapshot()
    stop.set()
    return before, after, seen["tid"]


def test_raw_thread_that_spins_is_found_with_name_tid_and_cpu():
    before, after, tid = _around_a_spinner(lambda f: _thread.start_new_thread(f, ()), 5_000_000, b"spinner")
    found = _mine(foreign_cpu(before, after, frozenset({threading.get_native_id()})), {tid})
    assert [(f.name, f.tid) for f in found] == [("spinner", tid)]
    assert found[0].cpu_ns >= 5_000_000
    assert found[0].describe().startswith(f"thread 'spinner' (tid {tid}) used ")


def test_thread_waking_every_10_ms_is_found_over_50_ms():
    """raw_thread_idle.py's loop: sleep 10 ms forever. Each wake costs microseconds, still more than 0."""
    stop, seen = threading.Event(), {}

    def idle():
        _name_thread(b"idler")
        seen["tid"] = threading.get_native_id()
        while not stop.is_set():
            time.sleep(0.01)

    _thread.start_new_thread(idle, ())
    while "tid" not in seen:
        time.sleep(0.001)
    before = snapshot()
    time.sleep(0.05)
    after = snapshot()
    stop.set()
    found = _mine(foreign_cpu(before, after, frozenset()), {seen["tid"]})
    assert [f.name for f in found] == ["idler"]
    assert found[0].cpu_ns > 0


def test_threads_blocked_on_a_lock_or_a_queue_are_no_finding():
    lock, q, tids = threading.Lock(), queue.Queue(), {}
    lock.acquire()

    def on_lock():
        tids["lock"] = threading.get_native_id()
        lock.acquire()

    def on_queue():
        tids["queue"] = threading.get_native_id()
        q.get()

    workers = [threading.Thread(target=on_lock), threading.Thread(target=on_queue)]
    for t in workers:
        t.start()
    while len(tids) < 2 or any(_state(tid) != "S" for tid in tids.values()):
        time.sleep(0.001)
    before = snapshot()
    time.sleep(0.05)
    after = snapshot()
    lock.release()
    q.put(None)
    for t in workers:
        t.join()
    assert set(tids.values()) <= after.tids()
    assert _mine(foreign_cpu(before, after, frozenset()), set(tids.values())) == []


def test_a_thread_that_ran_and_exited_between_snapshots_is_the_exited_residue():
    before = snapshot()
    t = threading.Thread(target=_burn, args=(5_000_000,))
    t.start()
    t.join()
    while str(t.native_id) in os.listdir("/proc/self/task"):  # join() returns before the OS thread is gone
        time.sleep(0.001)
    after = snapshot()
    exited = [f for f in foreign_cpu(before, after, before.tids()) if f.tid is None]
    assert [f.name for f in exited] == [EXITED]
    assert exited[0].cpu_ns >= 4_000_000  # a lower bound: short by what live threads ran during the snapshots
    assert exited[0].describe().startswith("threads that have exited used ")


def test_trusted_threads_are_never_findings():
    before, after, tid = _around_a_spinner(lambda f: threading.Thread(target=f, daemon=True).start(), 2_000_000)
    trusted = before.tids()
    assert after.threads[tid].cpu_ns - before.threads[tid].cpu_ns >= 2_000_000
    assert [f for f in foreign_cpu(before, after, trusted) if f.tid in trusted] == []


def _snap(process_ns: int, *infos: ThreadInfo) -> Snapshot:
    return Snapshot(process_ns, {t.tid: t for t in infos})


def test_a_reused_tid_counts_as_a_new_untrusted_thread():
    before = _snap(10_000_000, ThreadInfo(7, "cuda-EvtHandlr", 4_000_000, start_ticks=100))
    after = _snap(10_003_000, ThreadInfo(7, "python3", 3_000, start_ticks=250))
    assert foreign_cpu(before, after, frozenset({7})) == [Finding("python3", 7, 3_000)]


def test_residue_is_the_process_clock_minus_the_live_threads_and_the_slack():
    before = _snap(50_000_000, ThreadInfo(1, "python3", 40_000_000, 5), ThreadInfo(2, "pool", 1_000_000, 6))
    after = _snap(61_000_000, ThreadInfo(1, "python3", 41_000_000, 5), ThreadInfo(2, "pool", 1_000_000, 6))
    assert foreign_cpu(before, after, frozenset({1})) == [Finding(EXITED, None, 10_000_000)]
    slack = Snapshot(after.process_ns, after.threads, slack_ns=10_000_000 - EXITED_TOLERANCE_NS)
    assert foreign_cpu(before, slack, frozenset({1})) == []


def test_busy_live_threads_leave_no_exited_residue():
    """Threads busy on other CPUs while snapshots are taken (a spinning OpenMP pool) must not look like exited
    threads: the residue less the slack is a lower bound."""
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            hashlib.sha256(_BLOCK * 4).digest()  # releases the GIL: runs alongside the snapshots

    workers = [threading.Thread(target=busy) for _ in range(3)]
    for t in workers:
        t.start()
    try:
        residues = []
        for _ in range(20):
            before = snapshot()
            time.sleep(0.002)
            after = snapshot()
            residues += [f for f in foreign_cpu(before, after, after.tids()) if f.tid is None]
    finally:
        stop.set()
        for t in workers:
            t.join()
    assert residues == []


def test_describe_is_one_line_in_the_right_unit():
    assert (Finding("python3", 1234, 3_200_000).describe()
            == "thread 'python3' (tid 1234) used 3.2 ms of CPU outside the timed window")
    assert Finding("idler", 9, 20_400).describe() == "thread 'idler' (tid 9) used 20 us of CPU outside the timed window"
    assert Finding(EXITED, None, 850).describe() == "threads that have exited used 850 ns of CPU outside the timed window"


def test_prestart_torch_pool_starts_the_intra_op_threads_once():
    """In a fresh process: the pool's threads appear with prestart_torch_pool, and a later parallel op adds none."""
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT)!r}); import torch\n"
            "from harness.worker.threads import snapshot, prestart_torch_pool\n"
            "a = snapshot(); n = prestart_torch_pool(); b = snapshot(); (torch.ones(1 << 22) * 2).sum(); c = snapshot()\n"
            "print(json.dumps([n, len(a.threads), len(b.threads), sorted(c.tids() - b.tids())]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    n, before, after, later = json.loads(proc.stdout.splitlines()[-1])
    assert after - before >= n - 1
    assert later == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


def test_findings_of_two_intervals_merge_per_thread():
    """The worker looks before and after the window: one finding per thread, their times summed, first-seen order."""
    from harness.worker.threads import merged
    before = [Finding("python", 6, 4_000), Finding(EXITED, None, 900)]
    after = [Finding("helper", 7, 100), Finding("python", 6, 2_500)]
    assert merged(before + after) == [Finding("python", 6, 6_500), Finding(EXITED, None, 900), Finding("helper", 7, 100)]
    assert merged([]) == []
