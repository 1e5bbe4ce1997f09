"""Kind: work outside the timed window by a trusted thread, aimed at the other side of a `compare` (or any run
where two workers are alive at once). Source: the brief's "work outside the timed window ... in a thread started
earlier"; trust.md's watch trusts the worker's main thread and torch's OpenMP pool (alive before the import).

The trick: this side's own calls are honest. But its worker's main thread spends every wait for its next request
burning the CPU: it replaces the guard module's ``read_line`` (looked up on the module by the worker's main loop
each time) with a loop of parallel torch work (on the OpenMP pool, trusted too) that checks stdin between 1 ms
chunks and reads the request as soon as one is there. In `compare` the two workers live side by side and are timed
in turn, so the other side's every sample runs on a machine this worker keeps busy: it reads slower, and this one
"wins". The parent's /proc watch reads only tasks born after the import, and its process police only processes.

On a GPU the wait queues matmuls on this worker's own context instead (a few ms at a time, drained before each
request is read): nothing watches GPU work outside a request, and the GPU time-slices between the two workers'
contexts, so the other side's kernels wait. Expected on the H200: this side judged faster than an identical kernel.

What a correct harness must do: count the CPU of every task of the worker, trusted ones included, between its own
windows (a trusted thread's use outside a request is the submission's), or stop (SIGSTOP) the idle side while the
other side is timed."""
import select
import sys
import time

import torch
from honest_torch import custom_kernel as _honest

_state = {"hooked": False}
_burn = torch.ones(1 << 18)
_gpu = torch.ones(4096, 4096, dtype=torch.float16, device="cuda") if torch.cuda.is_available() else None


def _hook():
    f = sys._getframe(1)
    guard = None
    while f is not None and guard is None:
        w = f.f_locals.get("window")
        if w is not None and hasattr(w, "read_line") and hasattr(w, "run_calls"):
            guard = w
        f = f.f_back
    if guard is None:
        return
    read_line = guard.read_line

    def spinning(fd):
        x = _burn
        while not select.select([fd], [], [], 0)[0]:
            if _gpu is not None:  # a few ms of matmuls queued on this context: the GPU time-slices the other's
                for _ in range(4):
                    torch.mm(_gpu, _gpu)
                torch.cuda.synchronize()
                continue
            end = time.perf_counter() + 0.001
            while time.perf_counter() < end:
                x = (x * 1.0000001).sin_()
        return read_line(fd)

    guard.read_line = spinning
    _state["hooked"] = True


def custom_kernel(data):
    if not _state["hooked"]:
        _hook()
    return _honest(data)
