"""A worker with the submission loaded, and the sample buffers it maps: the parent's side of one worker's life.

``Session`` starts the worker, measures the bracket's honest gap on empty calibration windows before the import
(harness.parent.bracket), imports the submission, maps the shared sample buffers, sends each run request (a timed
one inside the parent's bracket) and ends the worker, killing what the submission left running
(harness.parent.proc_cleanup). Faults come back as judge.CaseFailed. harness.parent.case_runner runs a case's
phases on it.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch

from harness import protocol as P
from harness.hardware import default_device
from harness.parent import judge, memory, proc_cleanup, proc_table, watch
from harness.parent.bracket import CALIBRATION_WINDOWS, Bracket, Measured
from harness.parent.judge import CaseFailed
from harness.parent.process import EXIT_WAIT_S, WorkerDied, WorkerProcess, WorkerTimeout
from harness.parent.registry import Variant
from harness.parent.samples import ArenaSample, SharedSet
from harness.parent.sandbox import Sandbox, plan_for
from harness.parent.settings import Settings
from harness.results.record import Status
from harness.shapes import DEFAULT_PROBLEM


class Session:
    """A worker with the submission loaded, and the sample buffers it maps; the worker is started on demand and
    restarted after any fault (the buffers stay: a new worker maps them again)."""

    def __init__(self, variant: Variant, settings: Settings, device: torch.device | None = None,
                 sandbox: Sandbox = Sandbox(), worker_log: Path | None = None, profiler: bool = False,
                 problem: str = DEFAULT_PROBLEM):
        self.variant, self.settings, self.worker_log, self.problem = variant, settings, worker_log, problem
        self.device = device or default_device()
        self.profiler = profiler and self.device.type == "cuda"  # kernel-time passes will run (P.Load.profiler)
        self._loading: float | None = None  # when Load was sent, until its reply is in
        self.sandbox = plan_for(variant, sandbox, settings, self.device.type == "cuda")
        self.proc: WorkerProcess | None = None
        self.first_call = True
        self.stray_bytes = 0
        self.shared = SharedSet(self.device)
        clear, self.clear_note = (memory.l2_clear_bytes(problem, memory.device_total_bytes())
                                  if self.device.type == "cuda" else (None, ""))
        self.bracket = Bracket(self.device, clear)  # the L2 clear of ``problem``'s official loop
        self.trusted: frozenset = frozenset()   # (pid, tid) of the worker's tasks before the import (watch)
        self._since: watch.Snapshot | None = None  # the worker tree at the last timed window's close
        self._idle: tuple[watch.Snapshot, int] | None = None  # the tree and the clock (ns) at the last run's reply
        self._mapped = -1

    def start(self) -> None:
        """Start a worker and send its first calibration window, without waiting (``load`` waits); no-op while
        one is up."""
        if self.proc is not None:
            return
        self.proc = WorkerProcess(sandbox=self.sandbox, log=self.worker_log, label=self.variant.name)
        proc_cleanup.LEDGER.enter(self, self.proc.tree.start_ticks)
        self.first_call = True
        self._mapped, self._since = -1, None
        self._gaps: list[float] = []
        self.proc.send(P.Calibrate(0, self.bracket.flags_ref(), self.profiler))  # no bracket: nothing waits on it
        self._loading = time.monotonic()

    def _calibrate(self, profiler: bool = False, idle: bool = False) -> None:
        """Send one empty window through the bracket (bracket.open + P.Calibrate; ``idle``: its end queued on an
        idle GPU); ``_calibrated`` reads it."""
        seq = self.bracket.open()
        self.proc.send(P.Calibrate(seq, self.bracket.flags_ref(), profiler, idle))

    def _calibrated(self, timeout_s: float) -> None:
        """The calibration window's answer: its gap (bracket - window) joins ``_gaps``."""
        try:
            closed = self._receive(timeout_s, (P.Closed,))
        except CaseFailed:
            self.bracket.settle()  # the worker is gone: end the parent's waits now
            raise
        self.bracket.closed()
        self._gaps.append(self.bracket.measured().bracket_ns - closed.elapsed_ns)

    def load(self) -> None:
        """Start a worker (``start``), measure the bracket's honest gap on empty windows, take the worker's trusted
        tasks, then import the submission and wait for it. ``import_s`` bounds the worker's start-up (counted from
        its first request) and, afresh, the import (from the Load request): neither is the submission's call, so
        --timeout (the calls' limits) leaves both alone. Raises CaseFailed(ERROR) if the import fails (TIMEOUT,
        CRASH as ``_receive``)."""
        self.start()
        if self._loading is None:
            return
        limit = self.settings.import_s
        started = f"the worker (Python, torch, CUDA; no submission code yet) did not start in import_s = {limit:g} s"
        with judge.timeout_named(started):
            self._receive(max(limit - (time.monotonic() - self._loading), 0.001), (P.Closed,))
            for i in range(CALIBRATION_WINDOWS):  # both kinds of end: queued ahead of the GPU, and on an idle GPU
                self._calibrate(idle=i % 2 == 1)
                self._calibrated(limit)  # empty windows: only a stalled machine makes them slow
        self.bracket.calibrate(self._gaps)
        self.trusted = frozenset(watch.snapshot(self.proc.proc.pid).tasks)
        self.proc.send(P.Load(str(self.variant.path), self.problem))
        self._loading = None
        with judge.timeout_named(f"importing the submission took over import_s = {limit:g} s"):
            reply = self._receive(limit, (P.Loaded, P.Failed))
        if isinstance(reply, P.Failed):
            self.close()
            raise judge.load_failed(reply, str(self.variant.path))

    def _receive(self, timeout_s: float, expect: tuple):
        try:
            header, _payload = self.proc.receive(timeout_s)
            if header.get("msg") == "Oversized":
                self.close()
                raise CaseFailed(Status.FAIL, f"the worker's reply was {header.get('bytes')} bytes, over the "
                                              f"channel's limit; it was cut (a submission's message that large "
                                              f"cannot be shown)")
            return P.from_dict(header, expect)
        except WorkerTimeout as exc:
            self.close()
            raise CaseFailed(Status.TIMEOUT, str(exc)) from None
        except WorkerDied as exc:
            self.close()
            raise CaseFailed(Status.CRASH, str(exc), cuda=exc.code == P.ExitCode.CUDA_FAILURE) from None
        except P.ProtocolError as exc:
            self.close()
            raise judge.protocol_broken(exc) from None

    def reserve(self, layouts) -> None:
        """Size the shared buffers for the largest of ``layouts`` up front, so no case has to grow them."""
        if layouts and not self.shared.fits(*layouts):
            self.shared.grow(*layouts)

    def buffers_for(self, layout) -> SharedSet:
        """The shared buffers, grown for ``layout`` if needed, mapped by the current worker (started if needed);
        buffers the worker mapped before a grow are freed once it has mapped the new ones."""
        self.load()
        if not self.shared.fits(layout):
            self.shared.grow(layout)
        if self._mapped != self.shared.generation:
            self._idle = None  # mapping is work the parent asked for
            msg, fds = self.shared.map_request()
            self.proc.send(msg, fds)
            reply = self._receive(self.settings.import_s, (P.Mapped, P.Failed))
            if isinstance(reply, P.Failed):
                self.close()
                raise judge.map_failed(reply)
            try:
                self.shared.attach_device(reply.device)
            except (ValueError, RuntimeError) as exc:
                self.close()
                raise CaseFailed(Status.ERROR, f"harness error: the worker's device buffer: {exc}") from None
            self._mapped = self.shared.generation
            self.shared.free_retired()
        return self.shared

    def run(self, req: P.Run, sample: ArenaSample, on_closed=None) -> tuple[P.RunReply, Measured | None, str | None]:
        """One run request on ``sample``'s inputs, prepared but not yet in the worker's buffers (published here: a
        timed request's inside the bracket, after the worker says it is ready, before the L2 clear). A timed request
        (kind ``time``) runs inside the parent's bracket (harness.parent.bracket): the canaries are fixed and the
        outputs copied into the parent's snapshot there; other kinds get the canaries fixed first and the outputs
        copied after the reply. The first request after a (re)start gets the first-call time limit (compiles
        happen there). Once a timed window has closed, ``on_closed()`` runs (its time does not count against the
        call's limit, and what it raises is raised after the reply).

        Returns (the worker's reply, the bracket's measurement or None, the watch's verdict on CPU used outside
        the window since the last timed window or None). Raises CaseFailed for the submission's faults."""
        timeout = self.settings.first_call_s if self.first_call else self.settings.call_s
        self.first_call = False
        timed = req.kind == "time"
        pid = self.proc.proc.pid
        outside = None
        if timed:
            now = watch.snapshot(pid)
            if req.watch and self._since is not None:
                outside = watch.verdict(watch.foreign(self._since, now, self.trusted))
            if req.watch and outside is None and self._idle is not None:
                outside = watch.idle_verdict(self._idle[0], now, self.trusted, time.monotonic_ns() - self._idle[1])
            # the sample reaches the worker's buffer inside the bracket (CUDA: once the worker says ready)
            req = replace(req, seq=self.bracket.open(sample.fix, sample.take_snapshot,
                                                     publish=lambda: sample.publish(sync=False)))
        else:
            before = watch.snapshot(pid)
            sample.publish()
            sample.fix()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        self._since = self._idle = None
        self.proc.send(req)
        expect = (P.RunReply, P.Failed, P.Closed) if timed else (P.RunReply, P.Failed)
        started, raised, measured = time.monotonic(), None, None
        try:
            while True:
                reply = self._receive(max(timeout - (time.monotonic() - started), 0.001), expect)
                if not isinstance(reply, P.Closed):
                    break
                expect = (P.RunReply, P.Failed)  # one Closed per request
                paused = time.monotonic()
                self.bracket.closed()
                measured = self.bracket.measured()
                self._since = watch.snapshot(pid)
                try:
                    if on_closed is not None:
                        on_closed()
                except Exception as exc:  # noqa: BLE001 - raised once the worker's reply is in
                    raised = exc
                started += time.monotonic() - paused
        finally:
            if timed:
                self.bracket.settle(0.0 if measured is None else 5.0)
        if raised is not None:
            raise raised
        if isinstance(reply, P.Failed):
            failed = judge.call_failed(reply, self.variant.path.parent)
            if failed.cuda:  # the worker exits: its context is gone
                self.close()
            raise failed
        if timed and measured is None:
            raise CaseFailed(Status.FAIL, "the worker answered a timed sample without saying its window had closed")
        if not timed:
            sample.take_snapshot()
            if req.kind in ("kernels", "profile"):  # the profiler's own threads, born in this pass
                self.trusted |= frozenset(watch.snapshot(pid).tasks) - frozenset(before.tasks)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._idle = (watch.snapshot(pid), time.monotonic_ns())
        return reply, measured, outside

    def close(self, wait_s: float = EXIT_WAIT_S) -> None:
        """End the worker (WorkerProcess.close: asked to exit, killed after ``wait_s``)."""
        self.bracket.settle()
        if self.proc is not None:
            self.stray_bytes += self.proc.stray_bytes
            self.proc.close(wait_s)
            self.proc = None
            self._mapped, self._since, self._idle = -1, None, None
            self._loading = None
        self.shared.detach_device()
        self.shared.free_retired()
        proc_cleanup.LEDGER.attribute([self])  # orphans of the worker just ended: killed, no verdict (the case has one)
        orphans = proc_cleanup.LEDGER.take(self)
        if orphans:
            proc_cleanup.kill(orphans)

    def release(self, wait_s: float = EXIT_WAIT_S) -> None:
        """Close the worker and free the shared buffers; ``wait_s`` as for close (0 after Ctrl-C)."""
        self.close(wait_s)
        self.shared.close()
        self.bracket.close()
        proc_cleanup.LEDGER.leave(self)

    def end_case(self) -> str | None:
        """Kill what the submission left running at the end of a case: every process below the worker's launcher
        but the launcher's own and the worker, and the orphans this process adopted that are charged to this
        session (harness.parent.proc_cleanup.LEDGER; those charged to nobody are this session's). Returns the
        case's failure message ("left a process behind: ..."), or None when there was nothing."""
        tab = proc_table.table()
        tree = self.proc.tree if self.proc is not None else None
        found = tree.leftovers(tab) if tree is not None else []
        proc_cleanup.LEDGER.attribute([self], tab)
        found += proc_cleanup.LEDGER.take(self)
        if found:
            proc_cleanup.kill(found, more=tree.leftovers if tree is not None else None)
        return proc_cleanup.left_behind(found)


def load_failure(session: Session) -> CaseFailed | None:
    """Start ``session``'s worker and import the submission: None, or why it could not be loaded."""
    try:
        session.load()
    except CaseFailed as exc:
        return exc
    return None
