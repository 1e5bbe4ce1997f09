"""Worker process: ``python -m harness.worker``. Reads JSON requests on stdin (the first line is the channel
key), answers on the descriptor named by FP4BENCH_RESULT_FD through harness.channel. Exit code 110 after a
CUDA error that poisons the context (the parent then starts a fresh worker)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import traceback

from harness.worker import timing  # first: captures the measurement functions before any submission import
from harness.channel import Writer
from task.check import describe
from task.inputs import default_device, generate_many, generation_threads

import torch

EXIT_CUDA = 110


def _error(kind: str, exc: BaseException) -> dict:
    return {"ok": False, "kind": kind, "type": type(exc).__name__, "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc))[-8000:]}


def _foreign_threads() -> list[str]:
    """Python threads alive now other than the worker's main thread and its input-drawing pool: the
    submission's. Such a thread can find freshly drawn inputs (through the garbage collector) and compute
    their outputs before the timed window opens, so none may run while calls are timed."""
    ours = generation_threads() | {threading.main_thread().ident}
    return sorted(t.name for t in threading.enumerate() if t.ident not in ours)


def _cuda_poisoned() -> str:
    """Non-empty if the CUDA context is unusable (a sticky error such as an illegal memory access)."""
    if not torch.cuda.is_available():
        return ""
    try:
        torch.cuda.synchronize()
        return ""
    except Exception as exc:  # noqa: BLE001 - any failure here means the context is gone
        return f"{type(exc).__name__}: {exc}"


class Worker:
    def __init__(self, writer: Writer, readline):
        self.send = writer.send
        self.readline = readline
        self.kernel = None
        self.device = default_device()
        self.flush = timing.L2Flush(self.device) if self.device.type == "cuda" else None
        self.watch = timing.StreamWatch(self.device) if self.device.type == "cuda" else None

    def load(self, req: dict) -> None:
        path = req["path"]
        sys.path.insert(0, os.path.dirname(path))
        try:
            spec = importlib.util.spec_from_file_location("submission", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["submission"] = module
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - report whatever the import raised
            self.send(_error("import", exc))
            return
        kernel = getattr(module, "custom_kernel", None)
        if not callable(kernel):
            found = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
            self.send({"ok": False, "kind": "entry", "type": "MissingEntryPoint",
                       "message": f"{path} defines no callable custom_kernel(data) (callables found: "
                                  f"{', '.join(found) or 'none'})", "traceback": ""})
            return
        self.kernel = kernel
        self.send({"ok": True, "device": str(self.device)})

    def _report(self, exc: BaseException) -> None:
        """Send the submission's exception as the reply; exit (code 110) if it left the CUDA context unusable."""
        poisoned = _cuda_poisoned()
        self.send(_error("cuda" if poisoned else "exception", exc))
        if poisoned:
            os._exit(EXIT_CUDA)

    def _draw(self, c: dict, seeds: list[int], data: str) -> list:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the draws run on a thread pool; a CPU thread team each would oversubscribe
        try:
            inputs = generate_many(c["m"], c["n"], c["k"], c["g"], seeds, data, self.device)
        finally:
            torch.set_num_threads(threads)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return inputs

    def run(self, req: dict, tampered=lambda: []) -> None:
        """Draw the inputs, say ready, wait for go, time the calls, send times and outputs."""
        inputs = self._draw(req["case"], req["seeds"], req["data"])
        self.send({"ok": True, "ready": True})
        if json.loads(self.readline()).get("op") != "go":
            raise SystemExit("protocol error: expected go")
        profile_table = ""
        foreign = _foreign_threads()
        try:
            if req.get("profile"):
                outputs, elapsed_ns, complaint, profile_table = self._profile(inputs)
            elif self.flush is not None:
                elapsed_ns, outputs, complaint = timing.time_calls_cuda(self.kernel, inputs, self.flush, self.watch)
            else:
                elapsed_ns, outputs, complaint = timing.time_calls_cpu(self.kernel, inputs)
        except BaseException as exc:  # noqa: BLE001 - the submission's exception is the case's result
            self._report(exc)
            return
        foreign = sorted(set(foreign) | set(_foreign_threads()))  # also one started by a call, alive after it
        if foreign:
            complaint = (f"the submission runs {len(foreign)} background Python thread(s) ({', '.join(foreign)}); "
                         f"work done outside custom_kernel calls cannot be timed, so every thread a submission "
                         f"starts must have ended before its call returns")
        containers, metas, chunks, offsets, pos = [], [], [], [], 0
        for out in outputs:
            containers.append(describe(out).type_name)
            items = list(out) if isinstance(out, (list, tuple)) else []
            call_metas = []
            for o in items:
                meta = describe(o)
                call_metas.append(meta.__dict__)
                if meta.plain_tensor and o.dtype == torch.float16:
                    raw = o.detach().contiguous().cpu().numpy()
                    offsets.append([pos, raw.nbytes])
                    chunks.append(raw)
                    pos += raw.nbytes
                else:
                    offsets.append(None)
            metas.append(call_metas)
        self.send({"ok": True, "elapsed_ns": elapsed_ns, "calls": len(inputs), "complaint": complaint,
                   "containers": containers, "metas": metas, "offsets": offsets,
                   "guard": timing.guard_report(), "tampered": tampered(),
                   "profile": profile_table}, chunks)

    def _profile(self, inputs):
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            outputs = [self.kernel(x) for x in inputs]
            if self.device.type == "cuda":
                torch.cuda.synchronize()
        sort = "cuda_time_total" if self.device.type == "cuda" else "cpu_time_total"
        return outputs, 0.0, "", prof.key_averages().table(sort_by=sort, row_limit=15)


def _measurement_objects(worker: Worker) -> dict:
    """Everything the measurement depends on, by name: timing's globals, the worker's and the L2 flush's
    attributes, and the code of the timing functions. Compared by identity after every request."""
    objects = {f"harness.worker.timing.{k}": v for k, v in vars(timing).items() if not k.startswith("__")}
    objects.update({f"worker.{k}": v for k, v in vars(worker).items()})
    if worker.flush is not None:
        objects.update({f"L2Flush.{k}": v for k, v in vars(worker.flush).items()})
    for fn in (timing.time_calls_cuda, timing.time_calls_cpu, timing.fingerprint, timing._fingerprint_async,
               timing.L2Flush.__call__, timing.StreamWatch.mark_pending, timing.StreamWatch.late,
               Worker.run, Worker._draw, Worker._report, Writer.send):
        objects[f"{fn.__qualname__}.__code__"] = fn.__code__
    return objects


def main() -> None:
    stdin = sys.stdin.buffer
    key = bytes.fromhex(stdin.readline().decode().strip())
    fd = int(os.environ.pop("FP4BENCH_RESULT_FD"))
    readline = stdin.readline
    worker = Worker(Writer(fd, key), readline)
    snapshot = _measurement_objects(worker)  # before any submission code runs, import included

    def tampered() -> list[str]:
        now = _measurement_objects(worker)
        return sorted(k for k in snapshot.keys() | now.keys() if snapshot.get(k) is not now.get(k))

    while True:
        line = readline()
        if not line:
            return
        req = json.loads(line)
        if req["op"] == "exit":
            return
        if req["op"] == "load":
            worker.load(req)
            snapshot["worker.kernel"] = worker.kernel
        else:
            worker.run(req, tampered)


if __name__ == "__main__":
    main()
