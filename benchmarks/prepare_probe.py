"""Two diagnostics for a sample's cost on a GPU (writes to stdout):
1. the parent's prepare() (draw, reference, copies) for one case: wall ms per sample and the profiler's top ops;
2. a kernel's time on inputs in three kinds of memory: torch allocations (clones), driver memory in this process
   (harness.buffers.SharedBuffer), and the same driver memory mapped through CUDA IPC in a child process.

    python benchmarks/prepare_probe.py --submission wgmma_sm90 --case 0
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time

import torch
from submission_loader import load_submission

from harness.buffers import MappedBuffer
from harness.parent.samples import Sample, SharedSet
from harness.protocol import BufferRef
from harness.worker.timing import L2Flush, measure
from task.arena import Layout, Views
from task.spec import Case, load_shapes


def _time_us(kernel, inputs, reps: int = 20) -> float:
    """Mean us per call over ``reps`` samples of the official loop (L2 cleared, then every input back to back),
    after one untimed pass."""
    for x in inputs:
        kernel(x)
    samples = measure(kernel, inputs, reps, flush=L2Flush(torch.device("cuda", 0), limit=False, lines=False))
    return sum(s.per_call_ns for s in samples) / len(samples) / 1e3


def _clone(x):
    abc, sfs, sfr, sizes = x
    cl = lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)
    return ([tuple(cl(t) for t in g) for g in abc], [tuple(cl(t) for t in g) for g in sfs],
            [tuple(cl(t) for t in g) for g in sfr], sizes)


def child(args) -> None:
    case = Case(*json.loads(args.case_json))
    refs = json.loads(args.refs)
    sock = socket.socket(fileno=args.sock)
    fds = socket.recv_fds(sock, 1, 1)[1]
    dev = MappedBuffer(BufferRef(**refs["device"]))
    host = MappedBuffer(BufferRef(**refs["host"]), fds[0])
    views = Views(Layout.of(case, 15), dev.tensor, host.tensor)
    kernel = load_submission(args.submission)[1].custom_kernel
    inputs = views.inputs()
    print(json.dumps({"ipc_us": _time_us(kernel, inputs), "ipc_clone_us": _time_us(kernel, [_clone(x) for x in inputs])}))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--submission", required=True)
    p.add_argument("--case", type=int, default=0)
    p.add_argument("--child", action="store_true")
    p.add_argument("--case-json")
    p.add_argument("--refs")
    p.add_argument("--sock", type=int)
    args = p.parse_args()
    if args.child:
        return child(args)
    case = load_shapes("benchmarks").cases[args.case]
    dev = torch.device("cuda")
    shared = SharedSet(dev)
    sample = Sample(case, 15, "official", dev, shared)
    shared.grow(sample.layout)
    print("host buffer pinned:", shared.buffers["host"]._pinned)
    sample.prepare(list(range(15)), False)
    ms = []
    for i in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        sample.prepare([100 + i] * 15, False)
        ms.append((time.perf_counter() - t) * 1e3)
    print(f"{case.name} prepare ms:", " ".join(f"{m:.1f}" for m in ms))
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sample.prepare([7] * 15, False)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=40))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=40))
    kernel = load_submission(args.submission)[1].custom_kernel
    views = Views(sample.layout, shared.buffers["device"].tensor, shared.buffers["host"].tensor)
    inputs = views.inputs()
    print(json.dumps({"driver_mem_us": _time_us(kernel, inputs), "clone_us": _time_us(kernel, [_clone(x) for x in inputs])}))
    a, b = socket.socketpair()
    refs = {k: vars(shared.buffers[k].ref()) for k in ("device", "host")}
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--submission", args.submission, "--case-json",
                             json.dumps([list(case.m), list(case.n), list(case.k), case.g, case.seed]),
                             "--refs", json.dumps(refs), "--sock", str(b.fileno())], pass_fds=(b.fileno(),))
    socket.send_fds(a, [b"F"], [shared.buffers["host"].fd])
    proc.wait()


if __name__ == "__main__":
    main()
