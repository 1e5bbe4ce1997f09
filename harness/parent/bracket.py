"""The parent's own measurement of every timed sample: a bracket around the worker's window, taken where the
submission cannot write.

The worker's window (its start and end marks, the figure the official loop reports) is a claim: the submission can
rewrite anything in the worker's process. The parent checks it against a bracket of its own:

- The inputs the worker maps hold a few secret wrong bytes (harness.parent.samples: canaries) until the parent
  fixes them, inside the bracket. Work on the inputs before the bracket opens computes wrong outputs.
- CUDA: everything is queued on the parent's own stream before the request is sent, ordered against the worker's
  stream through flag words in the parent's memory (harness.buffers: cuStreamWaitValue32 / cuStreamWriteValue32):
  wait until the worker writes ``ready`` -> T0 -> the sample's inputs copied into the worker's buffer (only now
  can the worker read them) -> the L2 clear -> the fix of the inputs -> Tg -> write ``go`` ->
  wait for ``end_calls`` (the worker writes it right behind its end mark) -> T1 -> wait for ``end_copy`` -> T2 -> a
  copy of the output buffer into the parent's own memory, chunks in a secret order -> T3. Two checks: the calls
  phase, T1 - Tg against the worker's window (the window plus two crossings between the CUDA contexts); and the
  copy phase, T2 - T1, the worker's copy of its outputs, against the parent's own copy of the same bytes (T3 - T2).
  A worker that signals early is judged on outputs read at that point.
- CPU: the parent's monotonic clock: the inputs copied into the worker's buffer, the fix -> tg -> the request -> the worker's ``Closed`` (its
  outputs already in the output buffer) -> t1 and the copy of the outputs; one check, t1 - tg against the window.

Before the submission is imported the parent runs empty windows through the same protocol (``calibrate``): their
bracket minus their window is the honest gap (CUDA: two context switches, about 0.3 ms on an H200; CPU: a pipe round
trip). Half of them end on an idle GPU, as a host-bound submission's window does (the end mark and the end flag
queued by the host after the GPU got there: on the H200 some 30 us more than a window queued ahead). A timed sample
is a strike when its calls phase exceeds the window by more than the gap plus a tolerance, or its copy phase takes
more than COPY_FACTOR times the parent's copy plus COPY_HOST_NS (``Margin``); a case fails at once when its strikes
are most of at least ``EARLY_SAMPLES``, or ``GROSS_STRIKES`` strikes over ``GROSS`` times their allowance are most
of its samples (a forged time strikes every sample, by far), and once its samples are done when they reach
``STRIKES`` and more than ``STRIKE_SHARE`` of them (``verdict``: an honest sample's bracket can catch a rare
scheduling hiccup, and the first samples of a case catch more of them).
"""
from __future__ import annotations

import statistics
import time
import weakref
from dataclasses import dataclass

import torch

from harness import buffers as B
from harness.buffers import SharedBuffer
from harness.protocol import NO_BUFFER, BufferRef

#: Empty windows measured before the import (the first is dropped: it pays one-off costs).
CALIBRATION_WINDOWS = 9
#: Tolerance beyond the calibrated gap (ns, per sample; at least 3 spreads of the calibration) and relative to the
#: window: CUDA, CPU (a CPU's bracket also holds the worker's copy of the outputs and the scheduler's pauses).
TOLERANCE_NS = {"cuda": 20_000.0, "cpu": 3_000_000.0}
TOLERANCE_REL = {"cuda": 0.03, "cpu": 0.2}
#: CUDA copy phase: the worker's copy of its outputs may take two honest gaps (the GPU switches to the parent's
#: context only once the worker's queue drains, so a host-bound worker's copy phase holds a switch there and back),
#: COPY_FACTOR times the parent's copy of the same bytes, and COPY_HOST_NS of host time. When the parent's end mark
#: lands only after the copy (GPU-bound shapes), the calls phase is credited with up to 1.5 parent copies.
COPY_FACTOR, COPY_HOST_NS = 2.0, 100_000.0
#: Copy-phase strikes fail a case at this share of its samples: on the H200 an honest host-bound worker's copy
#: phase crossed the allowance in up to 8 % of samples (triton_grouped, g8_n7168_k2048).
COPY_STRIKE_SHARE = 0.2
#: Once its samples are done a case fails when its strikes reach STRIKES (or all its samples, when fewer) and
#: more than STRIKE_SHARE of them (a CPU's bracket holds the scheduler's pauses of a busy host). While they run it
#: fails at once when they reach STRIKES and EARLY_SHARE of at least EARLY_SAMPLES judged (a forged time strikes
#: every sample). On the H200 (2026-12-04) honest host-bound windows struck in up to 19 of 104 samples before the
#: idle calibration windows, and honest Triton variants struck in their first samples, then rarely.
STRIKES, STRIKE_SHARE = 5, {"cuda": 0.1, "cpu": 0.25}
EARLY_SHARE, EARLY_SAMPLES = 0.75, 8
#: A strike more than GROSS times over its allowance is gross (honest strikes on the H200 were at most 1.3 times
#: over); a case fails at once on GROSS_STRIKES of them that are EARLY_SHARE of its samples: a forged time.
GROSS, GROSS_STRIKES = 2.0, 3
#: How long the parent waits for its queued bracket to finish once the worker says its window closed (s).
SIGNAL_GRACE_S = 2.0


@dataclass(frozen=True)
class Margin:
    """What an honest worker's window may fall short of the parent's bracket: ``gap_ns`` (the largest calibrated
    gap), ``tolerance_ns`` and ``rel`` (of the window); the copy allowance is per sample (``allowed_ns``)."""

    gap_ns: float
    tolerance_ns: float
    rel: float
    windows: int

    cuda: bool = True

    def allowed_ns(self, window_ns: float, snapshot_ns: float = 0.0, copy_ns: float = 0.0) -> float:
        """The largest honest calls phase - window (ns) for a window of ``window_ns``, crediting a worker's copy
        that ran before the parent's end mark (COPY_FACTOR x ``snapshot_ns`` less the copy phase ``copy_ns``)."""
        absorbed = max(0.0, 1.5 * snapshot_ns - copy_ns) if self.cuda else 0.0
        return self.gap_ns + self.tolerance_ns + self.rel * window_ns + absorbed

    def copy_allowed_ns(self, snapshot_ns: float) -> float:
        """The longest honest copy phase (CUDA, ns) for outputs the parent copied in ``snapshot_ns``."""
        return 2 * self.gap_ns + COPY_FACTOR * snapshot_ns + COPY_HOST_NS

    def describe(self) -> str:
        """One line for the run's notes."""
        copy = (f"; the worker's copy of its outputs within two gaps + {COPY_FACTOR:g}x the parent's copy + "
                f"{COPY_HOST_NS / 1e3:.0f} us" if self.cuda else "")
        return (f"time bracket: the worker's window is accepted when the parent's bracket exceeds it by at most "
                f"{self.gap_ns / 1e3:.0f} us (honest gap, largest of {self.windows} empty windows before the "
                f"import) + {self.tolerance_ns / 1e3:.0f} us + {self.rel:.0%} of the window{copy}")


@dataclass(frozen=True)
class Measured:
    """The parent's bracket of one sample (ns): ``bracket_ns`` (the fix of the inputs to the end of the calls:
    CUDA T1 - Tg; CPU the worker's Closed, its outputs copied), ``copy_ns`` (CUDA: the worker's copy of its
    outputs, T2 - T1; CPU 0), ``snapshot_ns`` (the parent's copy of the outputs), ``signalled`` (False: the worker
    never signalled the end, and the parent ended its own wait)."""

    bracket_ns: float
    copy_ns: float
    snapshot_ns: float
    signalled: bool = True


#: One clear buffer per device and size, shared by the brackets alive in this process (compare's two sides would
#: otherwise hold 62.5 GiB each); freed with the last bracket that holds it.
_CLEARS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _shared_clear(device: torch.device, nbytes: int | None):
    from harness.worker.timing import L2Flush  # the official clear

    key = (str(device), nbytes)
    clear = _CLEARS.get(key)
    if clear is None:
        clear = _CLEARS[key] = L2Flush(device) if nbytes is None else L2Flush(device, nbytes=nbytes)
    return clear


class Bracket:
    """The parent's bracket on ``device`` (one per worker session; the flag words outlive workers)."""

    def __init__(self, device: torch.device, clear_bytes: int | None = None):
        """``clear_bytes``: what the L2 clear writes before each sample (CUDA; None: L2Flush's default)."""
        self.device = device
        self.cuda = device.type == "cuda"
        self.seq = 0
        self.margin: Margin | None = None
        self.strikes: dict[object, int] = {}
        self.copy_strikes: dict[object, int] = {}
        self.last: dict[tuple[object, str], str] = {}  # the last strike's figures, per case and phase
        self.gross: dict[object, int] = {}  # strikes over GROSS times their allowance, per case
        self.judged: dict[object, int] = {}
        self._ended_by_parent = False
        self._t: dict[str, float] = {}
        if self.cuda:
            self.flags = SharedBuffer(4 * B.FLAG_WORDS, device)
            self.flags.tensor.zero_()
            self.stream = torch.cuda.Stream(device)    # torch's pool streams are non-blocking
            self.spare = torch.cuda.Stream(device)     # ends a wait the worker never ended
            self.clear = _shared_clear(device, clear_bytes)
            self.events = {k: torch.cuda.Event(enable_timing=True) for k in ("t0", "tg", "t1", "t2", "t3")}
            torch.cuda.synchronize(device)

    def flags_ref(self) -> BufferRef:
        return self.flags.ref() if self.cuda else NO_BUFFER

    def open(self, fix=None, snapshot=None, publish=None) -> int:
        """Open the bracket for the next request and return its ``seq``. ``publish()`` puts the sample's inputs
        into the worker's buffer (CUDA: queued once the worker says ``ready``, before the L2 clear, so the worker
        cannot read them before and the copy leaves nothing of them in L2), ``fix()`` writes the true input bytes
        (queued on the parent's stream on CUDA), ``snapshot()`` copies the output buffer into the parent's memory
        (CUDA: queued after ``end_copy``; CPU: run by ``closed``)."""
        self.seq += 1
        self._snapshot, self._ended_by_parent = snapshot, False
        if not self.cuda:
            if publish is not None:
                publish()
            if fix is not None:
                fix()
            self._t = {"tg": time.monotonic_ns()}
            return self.seq
        s, ev, ptr = self.stream, self.events, self.flags.ptr
        h = s.cuda_stream
        self.clear.drop_persisting()  # before any wait is queued: these driver calls may wait for the context
        with torch.cuda.stream(s):
            B.stream_wait_flag(h, ptr, B.READY, self.seq)
            ev["t0"].record(s)
            if publish is not None:
                publish()
            self.clear.zero()
            if fix is not None:
                fix()
            ev["tg"].record(s)
            B.stream_write_flag(h, ptr, B.GO, self.seq)
            B.stream_wait_flag(h, ptr, B.END_CALLS, self.seq)
            ev["t1"].record(s)
            B.stream_wait_flag(h, ptr, B.END_COPY, self.seq)
            ev["t2"].record(s)
            if snapshot is not None:
                snapshot()
            ev["t3"].record(s)
        return self.seq

    def closed(self) -> None:
        """The worker says its window closed: CPU, take the end mark and the outputs now; CUDA, make sure the
        parent's queued bracket can finish (after SIGNAL_GRACE_S, the parent writes the flags itself)."""
        if not self.cuda:
            self._t["t1"] = time.monotonic_ns()
            if self._snapshot is not None:
                self._snapshot()
            self._t["t3"] = time.monotonic_ns()
            return
        self.settle(SIGNAL_GRACE_S)

    def settle(self, grace_s: float = 0.0) -> None:
        """Wait up to ``grace_s`` for the parent's queued bracket; then end its waits itself (a worker that died,
        failed or never signalled), so nothing on the parent's stream blocks. Idempotent."""
        if not self.cuda:
            return
        end = time.monotonic() + grace_s
        while not self.events["t3"].query():
            if time.monotonic() >= end:
                with torch.cuda.stream(self.spare):
                    for word in range(B.FLAG_WORDS):
                        B.stream_write_flag(self.spare.cuda_stream, self.flags.ptr, word, self.seq)
                self._ended_by_parent = True
                break
            time.sleep(0.0002)
        self.events["t3"].synchronize()

    def measured(self) -> Measured:
        """The last bracket (after ``closed``)."""
        if not self.cuda:
            t = self._t
            return Measured(float(t["t1"] - t["tg"]), 0.0, float(t["t3"] - t["t1"]))
        ev = self.events
        ms = lambda a, b: ev[a].elapsed_time(ev[b]) * 1e6  # noqa: E731
        return Measured(ms("tg", "t1"), ms("t1", "t2"), ms("t2", "t3"), not self._ended_by_parent)

    def calibrate(self, gaps_ns: list[float]) -> Margin:
        """The margin from the empty windows' gaps (bracket - window, ns; the first dropped)."""
        kept = gaps_ns[1:] or gaps_ns
        kind = "cuda" if self.cuda else "cpu"
        spread = statistics.pstdev(kept) if len(kept) > 1 else 0.0
        self.margin = Margin(max(kept), max(TOLERANCE_NS[kind], 3 * spread), TOLERANCE_REL[kind], len(kept),
                             self.cuda)
        return self.margin

    def judge(self, key, window_ns: float, measured: Measured) -> tuple[bool, str]:
        """Judge one timed sample of case ``key``: the worker's ``window_ns`` against ``measured``. Returns (fail
        the case now, the sentence). A strike fails the case now only as EARLY_SHARE and EARLY_SAMPLES, or GROSS
        and GROSS_STRIKES, say; ``verdict`` judges the share over the whole case once its samples are done."""
        if not measured.signalled:
            return True, ("the worker never signalled the end of its window (its stream did not write the bracket's "
                          "end flags); the parent ended its own wait")
        if self.margin is None:
            return False, ""
        judged = self.judged[key] = self.judged.get(key, 0) + 1
        allowed = self.margin.allowed_ns(window_ns, measured.snapshot_ns, measured.copy_ns)
        excess = measured.bracket_ns - window_ns
        if excess > allowed:
            strikes = self.strikes[key] = self.strikes.get(key, 0) + 1
            self.last[key, "calls"] = (f"window {window_ns / 1e3:.1f} us, bracket {measured.bracket_ns / 1e3:.1f} "
                                       f"us, more than the {allowed / 1e3:.1f} us an honest worker leaves")
            return self._early(key, strikes, judged, excess > GROSS * allowed), self._sentence(key, "calls")
        copy_allowed = self.margin.copy_allowed_ns(measured.snapshot_ns) if self.cuda else float("inf")
        if measured.copy_ns > copy_allowed:
            strikes = self.copy_strikes[key] = self.copy_strikes.get(key, 0) + 1
            self.last[key, "copy"] = (f"{measured.copy_ns / 1e3:.1f} us, more than the {copy_allowed / 1e3:.1f} us "
                                      f"the parent's bracket allows for those bytes")
            gross = measured.copy_ns > GROSS * copy_allowed
            return self._early(key, strikes, judged, gross), self._sentence(key, "copy")
        return False, ""

    def charged_ns(self, window_ns: float, measured: Measured) -> float:
        """The sample's time to keep (ns): the worker's ``window_ns`` when the bracket agrees with it, else the
        parent's own bracket less the honest gap. A struck sample (forged, or an honest one caught in a pause) thus
        never counts shorter than the parent measured it, whether or not its strikes end up failing the case."""
        if self.margin is None or not measured.signalled:
            return window_ns
        allowed = self.margin.allowed_ns(window_ns, measured.snapshot_ns, measured.copy_ns)
        if measured.bracket_ns - window_ns <= allowed:
            return window_ns
        return max(window_ns, measured.bracket_ns - self.margin.gap_ns)

    def verdict(self, key) -> tuple[bool, str]:
        """Once case ``key``'s timed samples are done: (fail, the sentence) when its strikes reach STRIKES (or all
        its samples judged, when fewer) and more than STRIKE_SHARE (calls phase) or COPY_STRIKE_SHARE (copy phase)
        of them."""
        judged = self.judged.get(key, 0)
        for phase, strikes, share in (("calls", self.strikes, STRIKE_SHARE["cuda" if self.cuda else "cpu"]),
                                      ("copy", self.copy_strikes, COPY_STRIKE_SHARE)):
            n = strikes.get(key, 0)
            if n and n >= min(STRIKES, judged) and n > share * judged:
                return True, self._sentence(key, phase)
        return False, ""

    def _early(self, key, strikes: int, judged: int, gross: bool) -> bool:
        if gross:
            self.gross[key] = self.gross.get(key, 0) + 1
        g = self.gross.get(key, 0)
        return (judged >= EARLY_SAMPLES and strikes >= max(STRIKES, EARLY_SHARE * judged)) or (
            g >= GROSS_STRIKES and g >= EARLY_SHARE * judged)

    def _sentence(self, key, phase: str) -> str:
        judged = self.judged.get(key, 0)
        if phase == "calls":
            return (f"the time the worker reported disagrees with the parent's bracket in {self.strikes[key]} of "
                    f"{judged} samples (the last: {self.last[key, phase]}); work was done outside the reported "
                    f"window or the time was forged")
        return (f"the worker's copy of its outputs after its window was too long in {self.copy_strikes[key]} of "
                f"{judged} samples (the last: {self.last[key, phase]}); work was done after the reported window")

    def close(self) -> None:
        if self.cuda:
            self.settle()
            self.flags.close()
