"""One timed sample, through functions captured before the submission is imported.

Import this module before the submission: every torch function the measurement uses is bound here, so a
submission that replaces ``torch.cuda.Event.elapsed_time`` (or any other attribute) changes nothing we use.
``guard_report()`` lists the attributes a submission did replace, for the record.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

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

#: CU_LIMIT_PERSISTING_L2_CACHE_SIZE in the CUDA driver API (cuda.h, CUlimit).
_CU_LIMIT_PERSISTING_L2 = 0x06


def guard_report() -> list[str]:
    """Names of measurement attributes that no longer hold the objects captured at import."""
    return [name for name, (owner, attr, obj) in _GUARDED.items() if getattr(owner, attr, None) is not obj]


class L2Flush:
    """Clears the L2 before each sample: zeroes a buffer exactly the size of the device's L2 (allocated once),
    and drops any persisting-L2 reservation (limit reset to 0, persisting lines reset) through the driver API."""

    def __init__(self, device: torch.device):
        self.bytes = torch.cuda.get_device_properties(device).L2_cache_size
        self._buf = _empty(self.bytes, dtype=torch.uint8, device=device)
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            self._set_limit = lib.cuCtxSetLimit
            self._set_limit.argtypes = [ctypes.c_int, ctypes.c_size_t]
            self._reset = lib.cuCtxResetPersistingL2Cache
        except OSError:
            self._set_limit = self._reset = None

    def __call__(self) -> None:
        if self._reset is not None:
            self._set_limit(_CU_LIMIT_PERSISTING_L2, 0)
            self._reset()
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

    def mark_pending(self) -> list:
        """Right after the end event is recorded: an event behind the queued work of every stream that has any.
        Call ``late`` with these once everything has finished."""
        marks = []
        for s in self.streams:
            if not self._query(s):
                ev = _Event(enable_timing=True)
                _record(ev, s)
                marks.append(ev)
        return marks

    def late(self, marks: list, window, elapsed_ns: float) -> int:
        """How many streams' queued work (``mark_pending``) finished after the window's end mark (``window``:
        the guard holding the marks; ``elapsed_ns``: its end - start); all events must be complete."""
        end_ms = elapsed_ns / 1e6
        return sum(1 for ev in marks if window.ms_after_start(ev.cuda_event) > end_ms + self.TOLERANCE_MS)


@dataclass(frozen=True)
class Window:
    """One pass over a sample's inputs: ``elapsed_ns`` between the start and end marks (all calls), the returned
    ``outputs`` in call order, ``late_streams`` (pool streams whose queued work finished after the end mark) and
    ``changed`` (1-based calls whose copied outputs differ from the same outputs read after every stream
    finished: work outside the window)."""

    elapsed_ns: float
    outputs: list
    late_streams: int = 0
    changed: tuple[int, ...] = ()
    before: object = None   # snapshot() right before the start mark
    after: object = None    # snapshot() right after the end mark


def run_window(window, kernel, inputs: list, copy_out, cuda: bool, flush: "L2Flush | None" = None,
               watch: "StreamWatch | None" = None, snapshot=lambda: None) -> Window:
    """Run ``kernel`` on every input back to back between the marks ``window`` (the native guard, or its Python
    fallback) holds; L2 flushed first on CUDA. ``copy_out(outputs, into_scratch)`` copies what each call returned
    to the output buffer (right after the end mark, on the same stream: the state at the end of the window) and,
    after every stream has finished, to a scratch buffer; it returns the calls whose two copies differ.
    ``flush``: clear the L2 first (timed samples); ``watch``: look for work left on other streams; ``snapshot``
    (the threads' CPU clocks) is taken right before the start mark and right after the end mark, so everything
    but the calls themselves lies outside the interval between them.

    Raises whatever a call raised (the marks are closed first)."""
    if cuda:
        _device_sync()
    if flush is not None:
        flush()
    stream = _current_stream().cuda_stream if cuda else None
    before = snapshot()
    outputs = window.run_calls(kernel, inputs, stream)
    marks = watch.mark_pending() if watch is not None else []  # first: a side stream's tail must still be queued
    after = snapshot()
    copy_out(outputs, False)
    if cuda:
        _device_sync()
    elapsed = window.elapsed_ns()
    late = watch.late(marks, window, elapsed) if watch is not None else 0
    changed = copy_out(outputs, True) if cuda else ()
    return Window(elapsed, outputs, late, tuple(changed), before, after)
