"""Can a trusted parent bracket a worker's timed window on the GPU without disturbing it? (H200, issue 41.)

Two processes: the parent owns the L2 clear, a start event and an interprocess event G it records after them; the
worker waits on G, times its calls with its own events (the figure the official loop reports, W), then signals
the end, and the parent records its end event after that signal. Three ways to signal the end are compared:
``event`` (the worker records interprocess event D and says so over a pipe; the parent waits on D as soon as it
hears), ``late`` (the parent waits on D only after the worker has synchronised: a host round trip), ``flag`` (the
worker writes a flag with cuStreamWriteValue32 and the parent's stream waits on it with cuStreamWaitValue32,
enqueued before the go). Baseline ``alone``: the worker clears the L2 and times itself, the parent idle.

Per mode and workload it prints W (us per sample, mean and sd) and B - W (the parent's bracket minus W) and writes
them as JSON to --out. Run on a GPU machine: ``python benchmarks/bracket_probe.py --out $OUT/bracket.json``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp

CALLS = 15
WORKLOADS = {"gemm_100us": (4096, 8192), "gemm_15us": (1024, 2048), "tiny_host_bound": (64, 64)}


def _lib():
    lib = ctypes.CDLL("libcuda.so.1")
    for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        fn.restype = ctypes.c_int
    return lib


def worker(conn, g_handle, d_handle, flag, outbuf):
    torch.cuda.init()
    dev = torch.device("cuda", 0)
    lib = _lib()
    g = torch.cuda.Event.from_ipc_handle(dev, g_handle)
    d = torch.cuda.Event.from_ipc_handle(dev, d_handle)
    clear = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.current_stream()
    while True:
        msg = conn.recv()
        if msg is None:
            return
        mode, (m, k), seq = msg
        a = torch.randn(m, k, device=dev, dtype=torch.float16)
        b = torch.randn(k, k, device=dev, dtype=torch.float16)
        torch.cuda.synchronize()
        conn.send("ready")
        conn.recv()  # go
        if mode == "alone":
            clear.zero_()
        elif mode == "gated":
            for slot, op in ((0, lib.cuStreamWriteValue32_v2), (1, lib.cuStreamWaitValue32_v2)):
                assert op(stream.cuda_stream, flag.data_ptr() + 4 * slot, seq, 0) == 0
        else:
            stream.wait_event(g)
        start.record()
        outs = [a @ b for _ in range(CALLS)]
        end.record()
        if mode == "gated":
            n = min(outbuf.numel(), a.shape[0] * a.shape[1])
            flat = torch.cat([o.view(-1)[: n // CALLS] for o in outs])
            outbuf[: flat.numel()].copy_(flat)
            assert lib.cuStreamWriteValue32_v2(stream.cuda_stream, flag.data_ptr() + 8, seq, 0) == 0
        if mode in ("event", "late"):
            d.record()
            if mode == "event":
                conn.send("marked")
        elif mode == "flag":
            rc = lib.cuStreamWriteValue32_v2(stream.cuda_stream, flag.data_ptr(), seq, 0)
            assert rc == 0, rc
        torch.cuda.synchronize()
        conn.send(start.elapsed_time(end) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    lib = _lib()
    flag = torch.zeros(64, dtype=torch.int32, device=dev)
    g = torch.cuda.Event(interprocess=True)
    d = torch.cuda.Event(interprocess=True)
    clear = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    s = torch.cuda.Stream()  # a blocking stream is fine here: nothing runs on the legacy default stream
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    outbuf = torch.zeros(64 << 20, dtype=torch.float16, device=dev)
    snap = torch.empty_like(outbuf)
    tg = torch.cuda.Event(enable_timing=True)
    proc = ctx.Process(target=worker, args=(child, g.ipc_handle(), d.ipc_handle(), flag, outbuf))
    proc.start()
    results, seq = {}, 0
    for name, shape in WORKLOADS.items():
        for mode in ("alone", "gated", "flag", "gated", "alone"):
            ws, gaps = [], []
            for i in range(args.samples):
                seq += 1
                parent.send((mode, shape, seq))
                assert parent.recv() == "ready"
                if mode == "gated":
                    with torch.cuda.stream(s):
                        assert lib.cuStreamWaitValue32_v2(s.cuda_stream, flag.data_ptr(), seq, 0) == 0
                        t0.record(s)
                        clear.zero_()
                        tg.record(s)
                        assert lib.cuStreamWriteValue32_v2(s.cuda_stream, flag.data_ptr() + 4, seq, 0) == 0
                        assert lib.cuStreamWaitValue32_v2(s.cuda_stream, flag.data_ptr() + 8, seq, 0) == 0
                        t1.record(s)
                        snap.copy_(outbuf)
                elif mode != "alone":
                    with torch.cuda.stream(s):
                        clear.zero_()
                        t0.record(s)
                        g.record(s)
                        if mode == "flag":
                            rc = lib.cuStreamWaitValue32_v2(s.cuda_stream, flag.data_ptr(), seq, 0)  # GEQ
                            assert rc == 0, rc
                            t1.record(s)
                parent.send("go")
                if mode == "event":
                    assert parent.recv() == "marked"
                    s.wait_event(d)
                    t1.record(s)
                w = parent.recv()
                if mode == "late":
                    s.wait_event(d)
                    t1.record(s)
                torch.cuda.synchronize()
                if i >= 3:
                    ws.append(w)
                    if mode != "alone":
                        gaps.append((tg if mode == "gated" else t0).elapsed_time(t1) * 1e3 - w)
            key = f"{name}/{mode}" + ("2" if f"{name}/{mode}" in results else "")
            results[key] = {"w_mean_us": statistics.mean(ws), "w_sd_us": statistics.stdev(ws),
                            "gap_mean_us": statistics.mean(gaps) if gaps else None,
                            "gap_max_us": max(gaps) if gaps else None, "gap_min_us": min(gaps) if gaps else None}
            print(key, json.dumps({k: round(v, 2) if v is not None else None for k, v in results[key].items()}),
                  flush=True)
    parent.send(None)
    proc.join()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
