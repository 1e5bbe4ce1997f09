"""Kind: a child process (not a thread) working on the CPU outside the timed window. Source: issue 41 (kind 6).

On its first timed call the worker forks a child. A forked child keeps the worker's shared mappings, so it sees the
input buffers the parent writes: it polls them, and as soon as the parent has written the next sample it computes
every call's outputs (honest_torch) into a shared anonymous mapping made before the fork, each with a key (two
checksums of the call's inputs). A timed call whose key is there returns those outputs at once; any other
computes them itself. The thread watch reads this process's threads only, and a child's CPU time never shows in
the worker's process clock, so nothing is reported. Outputs are always correct. On a GPU the child only polls
(a forked child must not touch CUDA): CPU outside the window, no gain. The child exits when the worker
does (its parent changes) or after 5 minutes. A correct harness must see the CPU its process tree used outside the
window (or that a process was left running) and fail the case: "work outside the timed window"."""
import mmap
import os
import sys
import time

import torch

from honest_torch import custom_kernel as _honest
from task.sample_buffers import Views, layout_of_sizes

_shared: dict = {}


def _fingerprint(x) -> torch.Tensor:
    """Two checksums over every byte a call reads (A, B and their scales, every group): same sums, same inputs."""
    flat = torch.cat([t.view(torch.uint8).reshape(-1)
                      for abc, sf in zip(x[0], x[1]) for t in (abc[0], abc[1], sf[0], sf[1])]).to(torch.int64)
    return torch.stack([flat.sum(), (flat * torch.arange(1, flat.numel() + 1)).sum()])


def _child(slots: list[Views], keys: torch.Tensor, outs: list[list[torch.Tensor]]) -> None:
    """Polls (every 0.5 ms) until the worker exits; on the CPU computes each new sample as soon as it is written."""
    torch.set_num_threads(1)
    parent, end, seen, latest = os.getppid(), time.monotonic() + 300, [None, None], 0
    while os.getppid() == parent and time.monotonic() < end:
        time.sleep(0.0005)
        if not slots:  # a GPU run: a forked child must not touch CUDA, it only keeps polling
            continue
        for slot, views in enumerate(slots):
            head = views.sfa[0][0].reshape(-1)[:32].tolist()
            if head != seen[slot]:  # the parent wrote the scales of the next sample here
                seen[slot], latest = head, slot
        for j, x in enumerate(slots[latest].inputs()):
            key = _fingerprint(x)
            if torch.equal(keys[j], key):
                continue
            got = _honest(([(a, b, c.clone()) for a, b, c in x[0]], x[1], x[2], x[3]))
            if not torch.equal(_fingerprint(x), key):
                break  # overwritten meanwhile
            for g, o in enumerate(got):
                outs[j][g].copy_(o)
            keys[j].copy_(key)


def _fork(worker, req) -> None:
    layout = layout_of_sizes(req.sizes, req.calls)
    sizes = [g.m * g.n for g in layout.groups]
    memory = mmap.mmap(-1, req.calls * (16 + 2 * sum(sizes)))  # MAP_SHARED: the child's writes are seen here
    keys = torch.frombuffer(memory, dtype=torch.int64, count=2 * req.calls).view(req.calls, 2)
    flat = torch.frombuffer(memory, dtype=torch.float16, offset=16 * req.calls)
    outs, at = [], 0
    for _ in range(req.calls):
        outs.append([])
        for g, n in zip(layout.groups, sizes):
            outs[-1].append(flat[at:at + n].view(g.m, g.n, 1))
            at += n
    _shared.update(keys=keys, outs=outs)
    host = worker.buffers["host"].tensor
    slots = [Views(layout, worker.buffers["device"].tensor, host[off:]) for off in (0, layout.host_slot_bytes)
             if worker.device.type == "cpu"]
    if os.fork() == 0:
        try:
            _child(slots, keys, outs)
        finally:
            os._exit(0)


def custom_kernel(data):
    if not _shared:
        f = sys._getframe(1)
        while f is not None and not (f.f_code.co_name == "run" and "req" in f.f_locals):
            f = f.f_back
        if f is None or f.f_locals["req"].kind != "time":
            return _honest(data)
        _fork(f.f_locals["self"], f.f_locals["req"])
    if data[0][0][2].is_cuda:
        return _honest(data)
    key = _fingerprint(data)
    for j in range(len(_shared["keys"])):
        if torch.equal(_shared["keys"][j], key):
            return list(_shared["outs"][j])
    return _honest(data)
