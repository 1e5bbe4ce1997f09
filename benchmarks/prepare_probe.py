"""Two diagnostics for a sample's cost on a GPU (writes to stdout):
1. the parent's prepare() (draw, reference, copies) for one case: wall ms per sample and the profiler's top ops;
2. a kernel's time on inputs in three kinds of memory: torch allocations (clones), driver memory in this process
   (harness.buffers.SharedBuffer), and the same driver memory mapped through CUDA IPC in a child process.

    python benchmarks/prepare_probe.py --submission wgmma_sm90 --case 0
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness.buffers import MappedBuffer  # noqa: E402
from harness.protocol import BufferRef  # noqa: E402
from harness.parent.registry import resolve  # noqa: E402
from harness.parent.samples import Sample, SharedSet  # noqa: E402
from task.arena import Layout, Views  # noqa: E402
from task.spec import Case, load_shapes  # noqa: E402


def _kernel(path: Path):
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("submission", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.custom_kernel


def _time_us(kernel, inputs, reps: int = 20) -> float:
    flush = torch.empty(torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    for x in inputs:
        kernel(x)
    best = []
    for _ in range(reps):
        torch.cuda.synchronize()
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for x in inputs:
            kernel(x)
        b.record()
        torch.cuda.synchronize()
        best.append(a.elapsed_time(b) * 1e3 / len(inputs))
    return sum(best) / len(best)


def _clone(x):
    abc, sfs, sfr, sizes = x
    cl = lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)  # noqa: E731
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
    kernel = _kernel(resolve(args.submission).path)
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
    kernel = _kernel(resolve(args.submission).path)
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
