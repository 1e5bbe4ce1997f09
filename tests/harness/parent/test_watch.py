"""harness.parent.watch: the parent reads the CPU of a worker's threads and descendants from /proc, so nothing in
the worker's process can blind it. Real processes here: a child Python with a thread that spins, one that idles,
and a grandchild process that spins."""
from __future__ import annotations

import subprocess
import sys
import time

from harness.parent import watch

CHILD = r"""
import os, sys, threading, time, _thread
mode = sys.argv[1]
go = threading.Event()
def spin():
    go.wait()
    end = time.monotonic() + 30
    while time.monotonic() < end:
        pass
def idle():
    go.wait()
    time.sleep(30)
_thread.start_new_thread(spin if mode == "spin" else idle, ())
if mode == "child":
    import subprocess
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); import time\nend=time.monotonic()+30\nwhile time.monotonic()<end: pass"], stdin=subprocess.PIPE)
    print(p.pid, flush=True)
    sys.stdin.readline()
    p.stdin.close()
else:
    print(os.getpid(), flush=True)
    sys.stdin.readline()
go.set()
time.sleep(30)
"""


def _start(mode: str):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    proc.stdout.readline()
    time.sleep(0.3)  # its threads exist, none has run yet
    return proc


def _after(proc, seconds: float = 0.3):
    before = watch.snapshot(proc.pid)
    trusted = frozenset(before.tasks)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    time.sleep(seconds)
    return before, watch.snapshot(proc.pid), trusted


def test_a_thread_born_before_the_snapshot_but_trusted_is_no_finding_and_a_new_spinner_is():
    proc = _start("spin")
    try:
        before, after, trusted = _after(proc)
        assert watch.foreign(before, after, trusted) == []  # the spinner was alive at the trusted snapshot
        found = watch.foreign(before, after, frozenset({(proc.pid, proc.pid)}))
        assert len(found) == 1 and found[0].pid == proc.pid and found[0].tid != proc.pid
        assert found[0].cpu_ns > 100_000_000  # it spun for most of 0.3 s
        text = watch.verdict(found)
        assert text.startswith(f"work outside the timed window: thread '") and f"(pid {proc.pid}, tid " in text
    finally:
        proc.kill()


def test_an_idle_thread_is_no_finding():
    proc = _start("idle")
    try:
        before, after, _ = _after(proc)
        found = watch.foreign(before, after, frozenset({(proc.pid, proc.pid)}))
        assert [f for f in found if f.tid != proc.pid and f.cpu_ns > 5_000_000] == []
    finally:
        proc.kill()


def test_a_child_process_that_spins_is_seen_in_the_tree():
    proc = _start("child")
    try:
        before, after, trusted = _after(proc)
        kids = [p for p in watch.tree(proc.pid) if p != proc.pid]
        assert kids, "the grandchild is below the worker"
        found = watch.foreign(before, after, frozenset(k for k in trusted if k[0] == proc.pid))
        assert any(f.pid == kids[0] and f.cpu_ns > 100_000_000 for f in found), found
    finally:
        for pid in watch.tree(proc.pid)[1:]:
            subprocess.run(["kill", "-9", str(pid)])
        proc.kill()


def test_a_trusted_thread_that_spins_while_the_worker_waits_is_an_idle_finding_an_idle_one_is_not():
    """The worker's own tasks are trusted inside its windows but must sit idle between requests: a spinner born
    before the snapshot (so trusted) is a finding of the idle rule; the same process idling is not."""
    for mode, finding in (("spin", True), ("idle", False)):
        proc = _start(mode)
        try:
            t0 = time.monotonic_ns()
            before, after, trusted = _after(proc, 0.5)
            said = watch.idle_verdict(before, after, trusted, time.monotonic_ns() - t0)
        finally:
            proc.kill()
            proc.wait()
        assert (said is not None) is finding, said
        if finding:
            assert said.startswith("work outside the timed window: the worker's own threads used ")
            assert said.endswith("it waited for its next request (read by the parent from /proc); a submission "
                                 "must be idle outside its custom_kernel calls")
