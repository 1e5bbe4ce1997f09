"""Timed samples, through functions captured before the submission is imported.

Import this module before the submission: every torch function the measurement uses is bound here, so a
submission that replaces ``torch.cuda.Event.elapsed_time`` (or any other attribute) changes nothing we use.
``guard_report()`` lists the attributes a submission did replace, for the record.

Two loops: ``run_window`` is the worker's (marks held by the native guard, outputs copied out, other streams
watched); ``measure`` is the plain loop of the official evaluator and of the standalone scripts (benchmarks/,
submissions/*/bench.py), whose parameters name where they differ (L2 clear, kernels alone, events per call,
stopping rule). Importing this module only binds names: it allocates nothing and creates no CUDA context.
"""
from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import torch

_perf_ns = time.perf_counter_ns
_Tensor = torch.Tensor
_empty = torch.empty
_zero_ = torch.Tensor.zero_
_cuda_available = torch.cuda.is_available()

#: Attributes a submission might replace to fake a measurement, with the objects we captured.
_GUARDED = {
    "time.perf_counter_ns": (time, "perf_counter_ns", time.perf_counter_ns),
    "torch.Tensor.zero_": (torch.Tensor, "zero_", torch.Tensor.zero_),
    "torch.sum": (torch, "sum", torch.sum),
    "torch.cuda.synchronize": (torch.cuda, "synchronize", torch.cuda.synchronize),
    "torch.cuda.Event": (torch.cuda, "Event", torch.cuda.Event),
    "torch.cuda.Event.record": (torch.cuda.Event, "record", torch.cuda.Event.record),
    "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time),
    "torch.cuda.Event.synchronize": (torch.cuda.Event, "synchronize", torch.cuda.Event.synchronize),
}
if _cuda_available:
    _Event = torch.cuda.Event
    _record = torch.cuda.Event.record
    _elapsed_ms = torch.cuda.Event.elapsed_time
    _event_sync = torch.cuda.Event.synchronize
    _device_sync = torch.cuda.synchronize
    _current_stream = torch.cuda.current_stream
    _spin_cycles = torch.cuda._sleep

#: CU_LIMIT_PERSISTING_L2_CACHE_SIZE in the CUDA driver API (cuda.h, CUlimit).
_CU_LIMIT_PERSISTING_L2 = 0x06


def guard_report() -> list[str]:
    """Names of measurement attributes that no longer hold the objects captured at import."""
    return [name for name, (owner, attr, obj) in _GUARDED.items() if getattr(owner, attr, None) is not obj]


def busy_us(intervals: Sequence[tuple[float, float]]) -> float:
    """Length of the union of ``intervals`` ((start, end) pairs, any unit; here us from torch.profiler's device
    events): the time at least one of them runs. Kernels that overlap (programmatic dependent launch, where the
    next kernel is resident and waiting before the last one ends; work on side streams) count once, so a call's
    GPU time is never more than its wall time on the device. 0.0 for no intervals; an interval with end < start
    counts as empty."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


#: reference-kernels' problems/nvidia/nvfp4_group_gemm/utils.py ``clear_l2_cache`` fills a (32, 1024, 1024) int64
#: tensor, 256 MiB: the worker's clear before untimed passes. The leaderboard's eval (task.yml's) clears with
#: ``clear_l2_cache_large``, 62.5 GiB: the parent's clear before each timed sample (TimingLoop.l2_clear_bytes).
OFFICIAL_CLEAR_BYTES = 32 * 1024 * 1024 * 8


class L2Flush:
    """Clears the L2 before each sample: zeroes a buffer of max(the device's L2, ``nbytes``) bytes (default
    ``OFFICIAL_CLEAR_BYTES``; the parent passes its problem's official clear, harness.parent.memory.l2_clear_bytes)
    (allocated once, on the current stream), after dropping any persisting-L2 reservation through the driver API:
    ``limit`` sets the persisting-L2 limit to 0, ``lines`` resets the persisting lines (each skipped where libcuda
    cannot be loaded). fp4bench's worker does both; the official evaluator neither (``L2Flush(device, limit=False,
    lines=False)``).

    The size is the official clear's, not just the L2's, because the clear's GPU time is part of how the official
    loop times: its start event is queued behind the fill (about 80 us of writes on an H200), so the first call's
    host path (Python, the launch) runs while the GPU is still busy and costs the window nothing. An L2-sized
    buffer (60 MiB, about 20 us) hid less of it, and a first call that runs cold after fp4bench's pause between
    samples then showed in every sample."""

    def __init__(self, device: torch.device, limit: bool = True, lines: bool = True,
                 nbytes: int = OFFICIAL_CLEAR_BYTES):
        self.bytes = max(torch.cuda.get_device_properties(device).L2_cache_size, nbytes)
        self._buf = _empty(self.bytes, dtype=torch.uint8, device=device)
        self._set_limit = self._reset = None
        if limit or lines:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError:
                return
            if limit:
                self._set_limit = lib.cuCtxSetLimit
                self._set_limit.argtypes = [ctypes.c_int, ctypes.c_size_t]
            if lines:
                self._reset = lib.cuCtxResetPersistingL2Cache

    def __call__(self) -> None:
        self.drop_persisting()
        self.zero()

    def drop_persisting(self) -> None:
        """The persisting-L2 limit to 0 and the persisting lines reset (each a driver call that may wait for the
        whole context: never while the context has a stream waiting on another process)."""
        if self._set_limit is not None:
            self._set_limit(_CU_LIMIT_PERSISTING_L2, 0)
        if self._reset is not None:
            self._reset()

    def zero(self) -> None:
        """Zero the buffer on the current stream."""
        _zero_(self._buf)


class StreamWatch:
    """Every stream of torch's per-device pools (torch.cuda.Stream() hands them out round robin), to find work
    that a call left queued on another stream when the timed window closed. Streams made outside torch are not
    seen here; the output fingerprint taken at the end event covers those."""

    #: Work on another stream may finish this long after the end event before it counts as outside the window:
    #: a side stream that is properly joined finishes with the join, within a microsecond or two of the end.
    TOLERANCE_MS = 0.01

    def __init__(self, device: torch.device):
        self.streams = []
        for priority in (0, -1, -2, -3):
            try:
                self.streams += [torch.cuda.Stream(device=device, priority=priority) for _ in range(32)]
            except (RuntimeError, ValueError):
                break
        self._query = torch.cuda.Stream.query
        self._clock = _private_stream(device)

    def mark_pending(self) -> list:
        """After the window (the copy queued): for every stream that still has work queued, a pair of events
        recorded back to back, a clock on an idle private stream and a mark behind that stream's work. The clock is
        stamped when the GPU takes the record in; the mark then too, or later if the stream's work was still running.
        A joined stream's work ended inside the window, so its mark lies before the end mark or at its clock, even
        when both were taken in late, after a switch to the parent's context (on the H200, 2026-12-04, such a mark
        alone read as late). Call ``late`` with these once everything has finished."""
        marks = []
        for s in self.streams:
            if not self._query(s):
                clock, mark = _Event(enable_timing=True), _Event(enable_timing=True)
                _record(clock, self._clock)
                _record(mark, s)
                marks.append((clock, mark))
        return marks

    def late(self, marks: list, window, elapsed_ns: float) -> int:
        """How many streams' queued work (``mark_pending``) finished after the window's end mark and after its
        mark was taken in (``window``: the guard holding the marks; ``elapsed_ns``: its end - start); all events
        must be complete."""
        end_ms = elapsed_ns / 1e6
        late = 0
        for clock, mark in marks:
            at = window.ms_after_start(mark.cuda_event)
            late += at > max(end_ms, window.ms_after_start(clock.cuda_event)) + self.TOLERANCE_MS
        return late


def _private_stream(device: torch.device):
    """A stream from none of torch's pools (so no call queues work on it), non-blocking: cuStreamCreate with
    CU_STREAM_NON_BLOCKING in the device's current context, as a torch stream."""
    with torch.cuda.device(device):
        torch.cuda.current_stream().query()  # the primary context current on this thread
        lib = ctypes.CDLL("libcuda.so.1")
        handle = ctypes.c_void_p()
        status = lib.cuStreamCreate(ctypes.byref(handle), ctypes.c_uint(1))
        if status != 0:
            raise RuntimeError(f"cuStreamCreate failed with CUresult {status}")
        return torch.cuda.ExternalStream(handle.value, device=device)


@dataclass(frozen=True)
class Window:
    """One pass over a sample's inputs: ``elapsed_ns`` between the start and end marks (all calls), the returned
    ``outputs`` in call order, ``late_streams`` (pool streams whose queued work finished after the end mark)."""

    elapsed_ns: float
    outputs: list
    late_streams: int = 0


class Gate:
    """The worker's half of the parent's bracket on a CUDA stream (harness.parent.bracket): ``open`` queues the
    write of ``ready`` and a wait until the parent writes ``go`` (after its L2 clear and its fix of the inputs);
    ``calls_done`` and ``copied`` queue the writes of ``end_calls`` and ``end_copy``. ``flags_ptr``: the device
    address of the parent's flag words as mapped here; ``seq``: the request's number."""

    def __init__(self, flags_ptr: int, seq: int):
        from harness import buffers
        self._buffers, self.ptr, self.seq = buffers, flags_ptr, seq

    def open(self, stream: int) -> None:
        b = self._buffers
        b.stream_write_flag(stream, self.ptr, b.READY, self.seq)
        b.stream_wait_flag(stream, self.ptr, b.GO, self.seq)

    def calls_done(self, stream: int) -> None:
        self._buffers.stream_write_flag(stream, self.ptr, self._buffers.END_CALLS, self.seq)

    def copied(self, stream: int) -> None:
        self._buffers.stream_write_flag(stream, self.ptr, self._buffers.END_COPY, self.seq)


def run_window(window, kernel, inputs: list, copy_out, cuda: bool, flush: L2Flush | None = None,
               watch: StreamWatch | None = None, gate: Gate | None = None) -> Window:
    """Run ``kernel`` on every input back to back between the marks ``window`` (the native guard, or its Python
    fallback) holds, then ``copy_out(outputs)`` (what each call returned, to the parent's output buffer, on the same
    stream). ``flush``: clear the L2 first (untimed passes; a timed sample's clear is the parent's, inside its
    bracket); ``watch``: look for work left on other streams; ``gate``: the bracket's flags around the window
    (CUDA timed samples: ``ready``/``go`` before the start mark, ``end_calls`` after the end mark, ``end_copy``
    after the copy). Returns once the device is idle.

    Raises whatever a call raised (the marks are closed first)."""
    if cuda:
        _device_sync()
    if flush is not None:
        flush()
    stream = _current_stream().cuda_stream if cuda else None
    if gate is not None:
        gate.open(stream)
    outputs = window.run_calls(kernel, inputs, stream)
    # end_calls first, queued with the end mark before the host falls behind: a flag written after the host's copy
    # (or after a device synchronize) left the GPU idle, so it switched to the parent's context and back, one more
    # switch (about 0.3 ms on an H200) in every honest bracket of a host-bound submission (2026-12-04: 100 of 102
    # samples over the margin). A write left on another stream lands before the copy only within that switch.
    if gate is not None:
        gate.calls_done(stream)
    copy_out(outputs)
    if gate is not None:
        gate.copied(stream)
    marks = watch.mark_pending() if watch is not None else []  # 128 queries: after the copy, outside the bracket
    if cuda:
        _device_sync()
    elapsed = window.elapsed_ns()
    late = watch.late(marks, window, elapsed) if watch is not None else 0
    return Window(elapsed, outputs, late)


class StopRule(Protocol):
    """When ``measure`` stops (harness.results.stats.StoppingRule is the official one)."""

    def is_finished(self, samples_ns: Sequence[float], wall_ns: float) -> bool:
        """True to stop, given the per-call time of every sample so far (ns) and the wall time spent (ns)."""


@dataclass(frozen=True)
class Sample:
    """One pass of ``measure`` over its inputs. ``elapsed_ns``: start mark to end mark over all ``calls``;
    ``host_ns``: host time for the calls to return (perf_counter_ns; with ``per_call`` on a GPU the event records
    between calls too; on the CPU the same interval as the window);
    ``call_ns``: each call's own time (events between calls on a GPU, the host clock on the CPU), only when
    ``measure(per_call=True)``, else empty; ``host_call_ns``: each call's host time (perf_counter_ns from the
    previous call's return, or from the start mark's record for call 1; with ``per_call`` on a GPU the event
    record after each call counts in the next call's)."""

    calls: int
    elapsed_ns: float
    host_ns: float
    call_ns: tuple[float, ...]
    host_call_ns: tuple[float, ...] = ()

    @property
    def per_call_ns(self) -> float:
        """The window's time per call (ns): the figure the official evaluator reports."""
        return self.elapsed_ns / self.calls


def measure(kernel, inputs: Sequence, stop: int | StopRule, flush: L2Flush | None = None,
            queue_behind_cycles: int = 0, per_call: bool = False) -> list[Sample]:
    """Time ``kernel(x)`` for every ``x`` of ``inputs`` back to back, one ``Sample`` per pass, the same inputs every
    pass, until ``stop`` (a number of samples, or a ``StopRule`` asked after each sample with the per-call times
    so far) says stop. Nothing is checked or copied: the official evaluator's loop, not the worker's guarded
    ``run_window``. Per sample on a GPU: a device synchronize; ``flush()`` when given (None: the L2 keeps what the
    last sample left); with ``queue_behind_cycles`` a GPU spin of that many clock cycles queued first, so the
    window holds the kernels alone and not the host time that launches them; one CUDA event before the calls and
    one after (``per_call``: one after every call); a device synchronize. On the CPU: a monotonic clock
    (perf_counter_ns) around the calls. All times in ns.

    Raises ValueError for no inputs or a count below 1; whatever a call raises."""
    if not len(inputs):
        raise ValueError("measure(): no inputs to time")
    if isinstance(stop, int) and stop < 1:
        raise ValueError(f"measure(): stop must be at least 1 sample, got {stop}")
    finished = (lambda done, _wall: len(done) >= stop) if isinstance(stop, int) else stop.is_finished
    samples, per_call_ns, t0 = [], [], _perf_ns()
    while True:
        s = _sample(kernel, inputs, flush, queue_behind_cycles, per_call) if _cuda_available else \
            _cpu_sample(kernel, inputs, per_call)
        samples.append(s)
        per_call_ns.append(s.per_call_ns)
        if finished(per_call_ns, _perf_ns() - t0):
            return samples


def _sample(kernel, inputs: Sequence, flush, queue_behind_cycles: int, per_call: bool) -> Sample:
    """One CUDA sample of ``measure``."""
    _device_sync()
    if flush is not None:
        flush()
    if queue_behind_cycles:
        _spin_cycles(queue_behind_cycles)
    marks = [_Event(enable_timing=True) for _ in range(len(inputs) + 1 if per_call else 2)]
    _record(marks[0])
    stamps = [_perf_ns()]
    for i, x in enumerate(inputs):
        if per_call and i:
            _record(marks[i])
        kernel(x)
        stamps.append(_perf_ns())
    _record(marks[-1])
    _device_sync()
    calls = tuple(_elapsed_ms(a, b) * 1e6 for a, b in pairwise(marks)) if per_call else ()
    host_calls = tuple(float(b - a) for a, b in pairwise(stamps))
    return Sample(len(inputs), _elapsed_ms(marks[0], marks[-1]) * 1e6, float(stamps[-1] - stamps[0]), calls,
                  host_calls)


def _cpu_sample(kernel, inputs: Sequence, per_call: bool) -> Sample:
    """One CPU sample of ``measure``: the window is the host clock around the calls."""
    stamps = [_perf_ns()]
    for x in inputs:
        kernel(x)
        stamps.append(_perf_ns())
    host_calls = tuple(float(b - a) for a, b in pairwise(stamps))
    elapsed = float(stamps[-1] - stamps[0])
    return Sample(len(inputs), elapsed, elapsed, host_calls if per_call else (), host_calls)
