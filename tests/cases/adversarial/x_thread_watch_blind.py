"""Kind: blind the thread watch, then let a background thread work between samples. Source: issue 41 (kind 3);
the kind of pygpubench's error_counter (silence the harness's own detector instead of avoiding it).

harness/worker/threads.py lists threads through its module global ``os`` (os.listdir("/proc/self/task")) and reads
CPU clocks through its module global ``time``. On its first timed call this submission swaps both globals for
shims: the listing shows only the threads alive at that moment less its own (so its thread, and the OpenMP team its
torch calls start, are left out), and the process clock has the hidden threads' CPU time taken off, so no
"threads that have since exited" residue shows either. Its thread then runs all the time: on the CPU it watches the
shared input buffer and computes each new sample's outputs into their c buffers as soon as the parent has written
them, before the timed window; a call whose output is ready returns c at once. Outputs are always correct.
A correct harness must still see the thread's CPU outside the window (the watch must not read the OS through
objects the submission can replace) and fail the case with "work outside the timed window"."""
import sys
import threading
import time

import torch

from honest_torch import custom_kernel as _honest
from task.sample_buffers import Views, layout_of_sizes

_tid = []
_ready: dict[tuple, list] = {}  # _fingerprint(input) -> the outputs computed for it
_views: list = []              # per host slot, views of the shared buffers for a timed sample


class _Shim:
    def __init__(self, real, **over):
        self._real = real
        self.__dict__.update(over)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _blind() -> None:
    """From now on the watch sees only the threads alive now, less ours: ours and any thread born later (the
    OpenMP team that our thread's torch calls start) are left out of the listing and of the process clock."""
    watch = sys.modules["harness.worker.threads"]
    if not hasattr(watch, "os"):  # the watch moved to the parent: nothing in this process to blind
        return
    real_os, real_time = watch.os, watch.time
    shown = set(real_os.listdir("/proc/self/task")) - {str(t) for t in _tid}

    def listdir(path):
        names = real_os.listdir(path)
        return [n for n in names if n in shown] if path == "/proc/self/task" else names

    def process_time_ns():
        hidden = 0
        for name in set(real_os.listdir("/proc/self/task")) - shown:
            try:
                hidden += real_time.clock_gettime_ns(watch.thread_clock(int(name)))
            except OSError:
                pass
        return real_time.process_time_ns() - hidden

    watch.os = _Shim(real_os, listdir=listdir)
    watch.time = _Shim(real_time, process_time_ns=process_time_ns)


def _fingerprint(x) -> tuple[int, int]:
    """Two checksums over every byte a call reads (A, B and their scales, every group): same sums, same inputs."""
    flat = torch.cat([t.view(torch.uint8).reshape(-1)
                      for abc, sf in zip(x[0], x[1]) for t in (abc[0], abc[1], sf[0], sf[1])]).to(torch.int64)
    return int(flat.sum()), int((flat * torch.arange(1, flat.numel() + 1)).sum())


def _precompute(views: Views) -> None:
    for x in views.inputs():
        before = _fingerprint(x)
        if before in _ready:
            continue
        outs = _honest(([(a, b, c.clone()) for a, b, c in x[0]], x[1], x[2], x[3]))
        if _fingerprint(x) == before:  # the parent did not overwrite the inputs meanwhile
            if len(_ready) > 300:
                _ready.clear()
            _ready[before] = outs


def _work() -> None:
    _tid.append(threading.get_native_id())
    seen, latest = [None, None], 0
    while True:
        for slot, views in enumerate(list(_views)):
            head = views.sfa[0][0].reshape(-1)[:32].tolist()
            if head != seen[slot]:  # the parent wrote the scales of the next sample here
                seen[slot], latest = head, slot
        if _views:
            _precompute(_views[latest])
        time.sleep(0.0005)


def _set_up(frame) -> None:
    worker, req = frame.f_locals["self"], frame.f_locals["req"]
    if worker.device.type == "cpu":
        layout = layout_of_sizes(req.sizes, req.calls)
        host = worker.buffers["host"].tensor
        for offset in (0, layout.host_slot_bytes):
            _views.append(Views(layout, worker.buffers["device"].tensor, host[offset:]))
    threading.Thread(target=_work, daemon=True, name="helper").start()
    while not _tid:
        time.sleep(0.001)
    _blind()


def custom_kernel(data):
    if not _tid:
        f = sys._getframe(1)
        while f is not None and not (f.f_code.co_name == "run" and "req" in f.f_locals):
            f = f.f_back
        if f is not None and f.f_locals["req"].kind == "time":
            _set_up(f)
    outs = _ready.pop(_fingerprint(data), None)
    return outs if outs is not None else _honest(data)
