"""Processes a submission leaves behind (harness.parent.proc_table, .proc_cleanup): the parent finds them in /proc,
kills them and fails the case. Real processes on this machine; no timing is asserted (waits have generous deadlines)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import replace

import pytest
from tests.conftest import ADVERSARIAL, SHARED_CASES
from tests.trust.test_cases import FAST, TWO_CASES, _run

from harness.parent import proc_cleanup, proc_table
from harness.parent.compare import MODE, compare
from harness.parent.registry import read_variant
from harness.parent.runner import RunOptions
from harness.parent.sandbox import Sandbox
from harness.results.record import Status

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")

#: How a worker is started: unconfined (its orphans come to the parent, a subreaper), confined with its own PID
#: namespace (the CPU default: orphans go to the namespace's first process, below the launcher), confined in the
#: parent's PID namespace (as on CUDA runs: orphans come to the parent).
HOW = {"off": (Sandbox("off"), FAST), "auto": (Sandbox("auto"), FAST),
       "shared-pid": (Sandbox("auto"), replace(FAST, isolate_pid_ipc="never"))}
LEFT = r"left a process behind: pid (\d+) '{name}' \(started by the submission; fp4bench killed it\)"


def _name() -> str:
    return f"fp4b{uuid.uuid4().hex[:10]}"  # a comm (15 characters at most) no other process has


def _named(name: str) -> list[proc_table.Proc]:
    return [p for p in proc_table.table().values() if p.name == name]


_BEFORE: dict = {"pids": set(), "trees": set()}


@pytest.fixture(autouse=True)
def _baseline():
    """What earlier tests of the session left (a Dask cluster's processes, a worker still watched) is not this
    test's: _nothing_left looks only at what appeared since this test began."""
    _BEFORE["pids"] = {p.pid for p in proc_table.descendants(os.getpid())}
    _BEFORE["trees"] = set(map(id, proc_cleanup.TREES))
    yield


def _nothing_left() -> bool:
    """No process below this one outside its session (workers and what they started), no watched worker, that
    this test started."""
    trees = [t for t in proc_cleanup.TREES if id(t) not in _BEFORE["trees"]]
    return not trees and not [p for p in proc_table.descendants(os.getpid())
                              if p.sid != os.getsid(0) and p.pid not in _BEFORE["pids"]]


def _adopted(pid: int) -> bool:
    p = proc_table.read(pid)
    return p is not None and p.ppid == os.getpid()


def _until(check, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


# -- the harness: run, compare, a worker that is killed

@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("file", ["daemon_process.py", "child_process.py"])
def test_a_process_left_at_import_fails_the_case_and_is_killed(monkeypatch, file, how):
    name = _name()
    monkeypatch.setenv("LEAVE_NAME", name)
    sandbox, settings = HOW[how]
    first, second = _run(ADVERSARIAL / file, shapes=TWO_CASES, settings=settings, sandbox=sandbox).cases
    assert first.status is Status.FAIL, first.message
    pid = int(re.fullmatch(LEFT.format(name=name), first.message).group(1))
    assert (second.status, second.message) == (Status.PASS, "")  # the worker itself was spared
    assert not _named(name) and not os.path.exists(f"/proc/{pid}")  # killed and reaped
    assert _nothing_left()


@pytest.mark.parametrize("file", ["daemon_process.py", "child_process.py"])
def test_a_spinning_process_started_in_a_timed_call_fails_its_case(monkeypatch, file):
    name = _name()
    for var, value in (("LEAVE_NAME", name), ("LEAVE_WHEN", "call"), ("LEAVE_SPIN", "1")):
        monkeypatch.setenv(var, value)
    sandbox, settings = HOW["shared-pid"]
    first, second = _run(ADVERSARIAL / file, "benchmark", TWO_CASES, settings, sandbox=sandbox).cases
    # whichever the parent sees first: the spinning process's CPU between samples (harness.parent.watch), or the
    # process itself at the case's end
    assert first.status is Status.FAIL and (re.fullmatch(LEFT.format(name=name), first.message) or
                                            first.message.startswith(f"work outside the timed window: child process '{name}'")
                                            ), first.message
    assert second.status is Status.PASS
    assert not _named(name) and _nothing_left()


def test_an_honest_submission_leaves_nothing_and_passes():
    sandbox, settings = HOW["shared-pid"]
    rec = _run(SHARED_CASES / "honest_torch.py", "benchmark", TWO_CASES, settings, sandbox=sandbox)
    assert [(c.status, c.message) for c in rec.cases] == [(Status.PASS, "")] * 2
    assert proc_table.strays(proc_cleanup.known()) == [] and _nothing_left()


@pytest.mark.parametrize("daemon", [True, False])
def test_a_worker_killed_on_timeout_takes_what_it_started_along(tmp_path, monkeypatch, daemon):
    """The timeout stays the verdict; the process is gone all the same (a daemon too, in the parent's PID
    namespace)."""
    name = _name()
    sub = tmp_path / "hang" / "leave_and_hang.py"
    sub.parent.mkdir()
    sub.write_text((ADVERSARIAL / ("daemon_process.py" if daemon else "child_process.py")).read_text().replace(
        "from honest_torch import custom_kernel as _honest", "def _honest(data):\n    time.sleep(600)"))
    monkeypatch.setenv("LEAVE_NAME", name)
    sandbox, settings = HOW["shared-pid"]
    r = _run(sub, settings=replace(settings, first_call_s=3, call_s=3), sandbox=sandbox).cases[0]
    assert (r.status, r.message) == (Status.TIMEOUT, "timeout after 3 s")
    assert not _named(name) and _nothing_left()


@pytest.mark.parametrize("daemon_side", ["A", "B"])
def test_compare_charges_a_daemon_to_the_side_whose_call_started_it(monkeypatch, daemon_side):
    name = _name()
    for var, value in (("LEAVE_NAME", name), ("LEAVE_WHEN", "call"), ("LEAVE_SPIN", "1")):
        monkeypatch.setenv(var, value)
    cheat, honest = read_variant(ADVERSARIAL / "daemon_process.py"), read_variant(SHARED_CASES / "honest_torch.py")
    a, b = (cheat, honest) if daemon_side == "A" else (honest, cheat)
    opts = RunOptions(MODE, settings=FAST, sandbox=Sandbox("off"))  # the daemon comes to the parent
    result = compare(a, b, TWO_CASES, opts)
    bad, good = (result.a, result.b) if daemon_side == "A" else (result.b, result.a)
    assert bad.cases[0].status is Status.FAIL and re.fullmatch(LEFT.format(name=name), bad.cases[0].message)
    assert good.cases[0].status is Status.PASS and "left a process" not in good.cases[0].message
    assert [c.status for c in (bad.cases[1], good.cases[1])] == [Status.PASS, Status.PASS]
    assert not _named(name) and _nothing_left()


# -- procs on processes started here

_TREE = r"""
import os, sys, threading, time
r, w = os.pipe()
child = os.fork()
if child == 0:
    if os.fork() == 0:
        os.write(w, b"x")
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
    os._exit(0)
os.read(r, 1)
print(child, flush=True)
time.sleep(60)
"""

_ORPHAN = r"""
import os, time
if os.fork() == 0:
    print(os.getpid(), flush=True)
    time.sleep(60)
    os._exit(0)
"""

_SPIN = r"""
import os, sys, threading, time
sleeper = threading.Thread(target=time.sleep, args=(60,), daemon=True)
sleeper.start()
r, w = os.pipe()
child = os.fork()
if child == 0:
    while time.process_time() < 0.05:
        pass
    os.write(w, b"x")
    time.sleep(60)
    os._exit(0)
os.read(r, 1)
print(child, sleeper.native_id, flush=True)
time.sleep(60)
"""


def _start(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **kw)


def _end(p: subprocess.Popen) -> None:
    proc_cleanup.kill([*proc_table.descendants(p.pid), *filter(None, [proc_table.read(p.pid)])])
    p.kill()
    p.wait()
    p.stdout.close()


def test_descendants_lists_children_and_grandchildren_oldest_first():
    p = _start(_TREE)
    try:
        child = int(p.stdout.readline())
        found = proc_table.descendants(p.pid)
        assert [d.pid for d in found][:1] == [child] and len(found) == 2
        assert found[1].ppid == child and found[0].ppid == p.pid
        assert found[0].start_ticks <= found[1].start_ticks
        assert all(d.name == proc_table.read(p.pid).name and d.alive and d.cpu_ns >= 0 for d in found)
        assert proc_table.descendants(found[1].pid) == []
        assert set(proc_table.subtree(p.pid)) == {p.pid, *(d.pid for d in found)}
    finally:
        _end(p)
    assert proc_table.read(p.pid) is None and proc_table.descendants(p.pid) == []


def test_an_orphan_is_adopted_as_a_stray_then_killed_and_reaped():
    assert proc_cleanup.become_subreaper() == ""
    p = _start(_ORPHAN, start_new_session=True)  # as a worker: a session of its own
    orphan = int(p.stdout.readline())
    p.wait()
    p.stdout.close()
    _until(lambda: _adopted(orphan))
    found = [s for s in proc_table.strays(proc_cleanup.known()) if s.pid == orphan]
    assert len(found) == 1 and found[0].sid != os.getsid(0)
    assert [k.pid for k in proc_cleanup.kill(found)] == [orphan]
    assert proc_table.read(orphan) is None  # no zombie left: reaped


def test_a_child_this_process_started_is_no_stray():
    same_session = subprocess.Popen(["sleep", "60"])
    own_session = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        pids = {s.pid for s in proc_table.strays(set())}
        assert same_session.pid not in pids and own_session.pid in pids  # nothing says the second is a worker
        assert own_session.pid not in {s.pid for s in proc_table.strays({own_session.pid})}
    finally:
        for q in (same_session, own_session):
            q.kill()
            q.wait()
    assert own_session.returncode == same_session.returncode == -9  # their exit statuses were left to Popen


def test_tree_cpu_ns_gives_every_thread_of_the_tree():
    p = _start(_SPIN)
    try:
        child, sleeper = map(int, p.stdout.readline().split())
        per_task = proc_table.tree_cpu_ns(p.pid)
        assert {p.pid, sleeper, child} <= set(per_task)
        assert per_task[child] >= 40_000_000  # it spun for 50 ms of CPU by its own clock
        assert all(isinstance(ns, int) and ns >= 0 for ns in per_task.values())
    finally:
        _end(p)
    assert proc_table.tree_cpu_ns(p.pid) == {}


def test_a_worker_tree_tells_the_launcher_and_the_worker_from_what_the_worker_left():
    """A launcher (sh, as unshare's PID-namespace init) runs the worker (Python), which starts a child once told
    to (as a submission would): the child is a leftover; the launcher and the worker are spared by kill."""
    code = "import os, sys, time\nsys.stdin.readline()\nif os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\n" \
           "print('started', flush=True)\ntime.sleep(60)\n"
    root = subprocess.Popen(["/bin/sh", "-c", '"$@"; exit $?', "init", sys.executable, "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    tree = proc_cleanup.watch(root.pid, {"sh"})
    try:
        assert tree.worker is not None and [p.name for p in tree.launchers] == ["sh"]
        assert tree.launchers[0].pid == root.pid and tree.worker.ppid == root.pid
        assert tree.leftovers() == []
        root.stdin.write("go\n")
        root.stdin.flush()
        root.stdout.readline()
        left = tree.leftovers()
        assert [p.ppid for p in left] == [tree.worker.pid]
        assert proc_cleanup.left_behind(left) == (f"left a process behind: pid {left[0].pid} '{left[0].name}' (started "
                                           f"by the submission; fp4bench killed it)")
        proc_cleanup.kill(left)  # same process group as the worker: only the child dies
        assert tree.leftovers() == [] and proc_table.read(tree.worker.pid).alive and root.poll() is None
    finally:
        tree.ending = True
        proc_cleanup.kill(tree.members())
        root.wait()
        proc_cleanup.unwatch(tree)
        root.stdin.close()
        root.stdout.close()
    assert root.pid not in proc_cleanup.TREES


def test_left_behind_names_the_oldest_and_counts_the_rest():
    p = [proc_table.Proc(30, "spin", 1, 500, 0), proc_table.Proc(20, "python3", 1, 400, 0),
         proc_table.Proc(40, "x", 1, 600, 0)]
    assert proc_cleanup.left_behind([]) is None
    assert proc_cleanup.left_behind(p) == ("left a process behind: pid 20 'python3' and 2 others (started by the "
                                    "submission; fp4bench killed them)")
    assert proc_cleanup.left_behind(p[:1]).endswith("pid 30 'spin' (started by the submission; fp4bench killed it)")


def test_the_ledger_charges_an_orphan_to_the_tree_it_was_seen_in_else_to_the_side_in_flight():
    assert proc_cleanup.become_subreaper() == ""
    orphans = []
    for _ in range(2):
        p = _start(_ORPHAN, start_new_session=True)
        orphans.append(int(p.stdout.readline()))
        p.wait()
        p.stdout.close()
    _until(lambda: all(_adopted(o) for o in orphans))
    seen, unseen = (proc_table.read(o) for o in orphans)
    ledger = proc_cleanup.Ledger()
    try:
        ledger.enter("late", seen.start_ticks + 10 * proc_table.CLK_TCK)  # started after both: never charged
        assert ledger.attribute(["late"]) == [] and ledger.take("late") == []
        for owner in ("A", "B"):
            ledger.enter(owner, 0)
        ledger.observe("A", [seen])  # e.g. below A's worker, before its middle process exited
        ledger.attribute(["B"])
        assert [p.pid for p in ledger.take("A")] == [seen.pid]
        assert [p.pid for p in ledger.take("B")] == [unseen.pid]
        assert ledger.take("A") == [] and ledger.attribute(["A", "B"]) == []  # charged once
    finally:
        proc_cleanup.kill([seen, unseen])
    assert proc_table.read(seen.pid) is None and proc_table.read(unseen.pid) is None


def test_subreaper_is_set_once_and_holds():
    import ctypes
    assert proc_cleanup.become_subreaper() == proc_cleanup.become_subreaper() == ""
    flag = ctypes.c_int(0)
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value == 1  # GET_CHILD_SUBREAPER
