"""Worker process: ``python -m harness.worker``, the only code that imports a submission (UNTRUSTED side).

Requests (harness.protocol, one JSON line each) arrive on stdin, read by the window guard, which removes any
trace/profile/monitoring hook or signal handler a thread planted before our Python code runs; the first line is
the channel key. Replies go out as authenticated frames on FP4BENCH_RESULT_FD; memory-file descriptors of the
sample buffers arrive on the Unix socket FP4BENCH_FD_SOCKET. The worker reports facts, never verdicts: the parent
judges. Exit code 110 after a CUDA error that poisons the context (the parent then starts a fresh worker).
"""
from __future__ import annotations

import importlib.util
import os
import select
import socket
import sys
import time
import traceback

from harness.worker import timing  # first: captures the measurement functions before any submission import
from harness.worker import native, threads  # noqa: E402 - after timing
from harness import protocol as P
from harness.buffers import MappedBuffer, recv_fds
from harness.channel import Writer
from task.arena import Layout, Views
from task.returned import OutputMeta
from task.inputs import default_device
from task.spec import Case

import torch

_type_name = type.__dict__["__name__"].__get__
_type_module = type.__dict__["__module__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_Tensor, _list, _tuple = torch.Tensor, list, tuple
_f16 = torch.float16
_foreach_copy = torch._foreach_copy_
_equal = torch.equal
#: How the window guard names a hook it refused to install (native.cleared()): the hook never ran.
_REFUSED = " refused"


def _failed(kind: str, exc: BaseException) -> P.Failed:
    """The exception as facts: its type, its text (or what turning it into text raised), its traceback."""
    message, raised, nonstring = "", "", False
    try:
        text = str(exc)
        if type(text) is str:
            message = text
        else:
            nonstring = True
    except BaseException as inner:  # noqa: BLE001 - its __str__ is submission code
        raised = _type_name(type(inner))
    try:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]
    except BaseException:  # noqa: BLE001 - formatting calls the exception's __str__
        tb = "".join(traceback.format_tb(exc.__traceback__))[-8000:]
    return P.Failed(kind, _type_name(type(exc)), message, tb, raised, nonstring)


def _container(obj) -> P.Container:
    """The true type of ``obj``: exact (list, tuple, Tensor by identity, not name) or which of them it derives
    from."""
    t = type(obj)
    name = f"{_type_module(t)}.{_type_qualname(t)}"
    if t is _list or t is _tuple or t is _Tensor:
        return P.Container(name, True)
    mro = type.__dict__["__mro__"].__get__(t)
    base = next((label for cls, label in ((_list, "list"), (_tuple, "tuple"), (_Tensor, "torch.Tensor"))
                 if cls in mro), "")
    return P.Container(name, False, base)


def _meta(obj) -> OutputMeta:
    t = type(obj)
    name = f"{_type_module(t)}.{_type_qualname(t)}"
    if t is _Tensor:
        return OutputMeta(name, True, str(obj.dtype), tuple(obj.shape), str(obj.device))
    return OutputMeta(name, False, tensor_subclass=_Tensor in type.__dict__["__mro__"].__get__(t))


def _cuda_poisoned() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return True


def _torch_modes() -> list[str]:
    """Torch function/dispatch modes left on the stacks: they would run submission code inside our own ops."""
    found = []
    if torch._C._len_torch_function_stack():
        found.append(f"{torch._C._len_torch_function_stack()} torch function mode(s)")
    if torch._C._len_torch_dispatch_stack():
        found.append(f"{torch._C._len_torch_dispatch_stack()} torch dispatch mode(s)")
    return found


class Worker:
    def __init__(self, writer: Writer, window, fd_sock: socket.socket | None):
        self.send = writer.send
        self.window = window
        self.fd_sock = fd_sock
        self.kernel = None
        self.device = default_device()
        cuda = self.device.type == "cuda"
        if cuda:
            torch.empty(1, device=self.device)  # the CUDA context and its threads exist before the import
        self.flush = timing.L2Flush(self.device) if cuda else None
        self.watch = timing.StreamWatch(self.device) if cuda else None
        self.buffers: dict[str, MappedBuffer] = {}
        self.scratch: torch.Tensor | None = None
        self.private: torch.Tensor | None = None
        # Diagnostics (FP4BENCH_PER_CALL_LOG, read before any submission code runs): an event after every timed
        # call, the calls' times printed to the worker log (benchmarks/per_call_probe.py reads them).
        self.per_call_log = cuda and bool(os.environ.get("FP4BENCH_PER_CALL_LOG"))
        threads.prestart_torch_pool()
        self.trusted = frozenset(threads.snapshot().threads)
        self.profiler_threads: frozenset[int] = frozenset()
        self.last = threads.snapshot()

    # -- requests
    def load(self, req: P.Load) -> None:
        path = req.path
        sys.path.insert(0, os.path.dirname(path))
        try:
            spec = importlib.util.spec_from_file_location("submission", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["submission"] = module
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - report whatever the import raised
            self.send(P.to_dict(_failed("import", exc)))
            return
        kernel = getattr(module, "custom_kernel", None)
        if not callable(kernel):
            found = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
            self.send(P.to_dict(P.Failed("entry", "MissingEntryPoint", "", callables=tuple(found))))
            return
        self.kernel = kernel
        held = "native" if self.window.HELD_IN == "C" else f"python: {getattr(self.window, 'caveat', '')}"
        self.send(P.to_dict(P.Loaded(str(self.device), held)))

    def map(self, req: P.Map) -> None:
        for b in self.buffers.values():
            b.close()
        self.buffers = {}
        refs = {"device": req.device, "host": req.host, "output": req.output}
        fds = recv_fds(self.fd_sock, sum(r.kind == "memfd" for r in refs.values()))
        for name, ref in refs.items():
            self.buffers[name] = MappedBuffer(ref, fds.pop(0) if ref.kind == "memfd" else None)
        self.scratch = None
        self.send(P.to_dict(P.Mapped()))

    def run(self, req: P.Run, tampered) -> None:
        case = Case(req.m, req.n, req.k, len(req.m), 0)
        layout = Layout.of(case, req.calls)
        host = self.buffers["host"].tensor
        if req.host_offset < 0 or req.host_offset + layout.host_bytes > host.numel() or req.host_offset % 4096:
            raise P.ProtocolError(f"Run.host_offset: expected a 4096-byte multiple with {layout.host_bytes} bytes "
                                  f"after it in the {host.numel()}-byte host buffer, got {req.host_offset}")
        host = host[req.host_offset:]
        views = Views(layout, self._inputs(layout.device_bytes), host, self.buffers["output"].tensor)
        if self.scratch is None or self.scratch.numel() < layout.output_bytes:
            self.scratch = torch.empty(layout.output_bytes, dtype=torch.uint8, device=self.device)
        scratch = Views(layout, self.buffers["device"].tensor, host, self.scratch)
        inputs = views.inputs()
        copied = [[False] * len(req.m) for _ in range(req.calls)]
        copy_out = self._copier(layout, views, scratch, copied)
        profiled = req.kind in ("profile", "kernels")
        before = threads.snapshot() if profiled else None  # run_window takes its own, right before its flush
        try:
            if profiled:
                result, table, kernel_ns = self._profile(inputs, copy_out, table=req.kind == "profile")
            else:
                timed = req.kind == "time"
                closed = (lambda: self.send(P.to_dict(P.Closed()))) if timed and req.ahead else None
                kernel, marks = self.kernel, []
                if timed and self.per_call_log:
                    kernel = timing.marking(self.kernel, marks)
                result = timing.run_window(self.window, kernel, inputs, copy_out, self.flush is not None,
                                           self.flush if timed else None, self.watch, threads.snapshot, closed)
                if marks:
                    print(timing.per_call_line(self.window, marks, req.n[0], req.k[0]), file=sys.stderr, flush=True)
                table, kernel_ns = "", None
        except BaseException as exc:  # noqa: BLE001 - the submission's exception is the case's result
            self._report(exc)
            return
        before, after = result.before or before, result.after or threads.snapshot()
        found = self.window.cleared()
        hooks = tuple(h for h in found if not h.endswith(_REFUSED))
        refused = tuple(h[:-len(_REFUSED)] for h in found if h.endswith(_REFUSED))
        outputs = result.outputs
        containers = tuple(_container(o) for o in outputs)
        metas = tuple(tuple(_meta(x) for x in o) if type(o) is _list else () for o in outputs)
        end = threads.snapshot()
        used = []
        if req.watch:
            used = threads.merged(threads.foreign_cpu(self.last, before, self.trusted)
                                  + threads.foreign_cpu(after, end, self.trusted))
        reply = P.RunReply(
            result.elapsed_ns if req.kind == "time" else 0.0, len(inputs), containers, metas,
            tuple(tuple(c) for c in copied), result.late_streams, result.changed,
            tuple(P.ThreadUse(f.name, f.tid or 0, f.cpu_ns) for f in used), hooks, refused,
            tuple(_torch_modes()), tuple(timing.guard_report()), tuple(tampered()), kernel_ns, table)
        self.send(P.to_dict(reply))
        del outputs, result
        self.window.release()
        self.trusted, self.profiler_threads = self.trusted | self.profiler_threads, frozenset()
        self.last = threads.snapshot()

    def _inputs(self, nbytes: int) -> torch.Tensor:
        """The device inputs in the worker's own memory: on a GPU the shared buffer is copied first, because
        kernels read memory mapped through CUDA IPC more slowly (H200: 180 against 151 us per call on
        g8_n4096_k7168, benchmarks/prepare_probe.py). The copy happens before the L2 flush, outside the window."""
        shared = self.buffers["device"].tensor
        if self.device.type != "cuda":
            return shared
        if self.private is None or self.private.numel() < nbytes:
            self.private = None
            self.private = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        self.private[:nbytes].copy_(shared[:nbytes])
        return self.private

    def _copier(self, layout: Layout, views: Views, scratch: Views, copied: list[list[bool]]):
        """``copy_out(outputs, into_scratch)`` for run_window: the plain fp16 [M, N, 1] tensors on our device
        that each call returned go to the output buffer (or the scratch buffer); returns the 1-based calls whose
        scratch copy differs from the output buffer's."""
        expect = [(g.m, g.n, 1) for g in layout.groups]

        def pairs(outputs, target: Views):
            dst, src = [], []
            for j, out in enumerate(outputs):
                if type(out) is not _list or len(out) != len(expect):
                    continue
                for g, o in enumerate(out):
                    if (type(o) is _Tensor and o.dtype == _f16 and tuple(o.shape) == expect[g]
                            and o.device == self.device):
                        dst.append(target.out[g][j])
                        src.append(o)
                        copied[j][g] = True
            return dst, src

        def copy_out(outputs, into_scratch: bool):
            dst, src = pairs(outputs, scratch if into_scratch else views)
            if dst:
                _foreach_copy(dst, src)
            if not into_scratch:
                return ()
            n = layout.output_bytes
            if _equal(self.scratch[:n], self.buffers["output"].tensor[:n]):
                return ()
            return tuple(j + 1 for j in range(layout.calls)
                         if not all(_equal(scratch.out[g][j], views.out[g][j])
                                    for g in range(len(expect)) if copied[j][g]))

        return copy_out

    def start_profiler(self) -> None:
        """One empty pass of the profiler: CUPTI's start-up (5-8 s on an H200 host, however the profiler is
        driven; benchmarks/cupti_cost.py). Runs before the submission is imported, so every thread born here is
        ours and joins the trusted set (a kernel-time pass later trusts only the threads born while its own
        profiler starts and stops, a window of milliseconds once CUPTI is up)."""
        import warnings

        from torch.profiler import ProfilerActivity, profile

        ours = set(threads.snapshot().threads)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Profiler clears events at the end of each cycle": none kept
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):  # as _profile's passes
                    torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - only a head start: the first pass starts it up (and reports)
            print(f"fp4bench worker: the profiler did not start up at load ({type(exc).__name__}: {exc}); the "
                  f"first kernel-time pass starts it", file=sys.stderr, flush=True)
        self.trusted = self.trusted | (set(threads.snapshot().threads) - ours)

    def _profile(self, inputs, copy_out, table: bool = True):
        """The calls once under torch.profiler (CPU and CUDA activity): (Window, the profiler's table or "",
        kernel ns per call or None)."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        cuda = self.device.type == "cuda"
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        if cuda:
            torch.cuda.synchronize()
            self.flush()
        # The profiler starts threads of its own (CUPTI, Kineto) on entry and exit: those join the trusted set;
        # a thread born while the calls run does not. Only the calls are profiled; the copies come after.
        ours = set(threads.snapshot().threads)
        prof = profile(activities=acts)
        prof.__enter__()
        entered = set(threads.snapshot().threads)
        try:
            outputs = self.window.run_calls(self.kernel, inputs, torch.cuda.current_stream().cuda_stream
                                            if cuda else None)
            if cuda:
                torch.cuda.synchronize()
        finally:
            called = set(threads.snapshot().threads)
            prof.__exit__(None, None, None)
            self.profiler_threads = frozenset((entered - ours) | (set(threads.snapshot().threads) - called))
        copy_out(outputs, False)
        if cuda:
            torch.cuda.synchronize()
        result = timing.Window(0.0, outputs)
        kernel_ns = None
        if cuda:
            busy = timing.busy_us([(e.time_range.start, e.time_range.end) for e in prof.events()
                                   if e.device_type == DeviceType.CUDA])
            kernel_ns = busy * 1e3 / len(inputs)
        text = ""
        if table:
            sort = "cuda_time_total" if cuda else "cpu_time_total"
            text = prof.key_averages().table(sort_by=sort, row_limit=15)
        return result, text, kernel_ns

    def _report(self, exc: BaseException) -> None:
        """Send the submission's exception as the reply; exit (code 110) if it left the CUDA context unusable."""
        self.window.cleared()
        poisoned = _cuda_poisoned()
        self.send(P.to_dict(_failed("cuda" if poisoned else "exception", exc)))
        self.window.release()
        if poisoned:
            os._exit(P.ExitCode.CUDA_FAILURE)


def _measurement_objects(worker: Worker) -> dict:
    """Everything the measurement depends on, by name: timing's globals, the worker's and the L2 flush's
    attributes, and the code of the timing functions. Compared by identity after every request."""
    objects = {f"harness.worker.timing.{k}": v for k, v in vars(timing).items() if not k.startswith("__")}
    objects.update({f"worker.{k}": v for k, v in vars(worker).items()
                    if k not in ("buffers", "scratch", "private", "last", "profiler_threads")})
    if worker.flush is not None:
        objects.update({f"L2Flush.{k}": v for k, v in vars(worker.flush).items()})
    for fn in (timing.run_window, timing.L2Flush.__call__, timing.StreamWatch.mark_pending, timing.StreamWatch.late,
               Worker.run, Worker._copier, Worker._report, Writer.send, threads.snapshot, threads.foreign_cpu,
               threads.merged):
        objects[f"{fn.__qualname__}.__code__"] = fn.__code__
    return objects


def _spin_until_readable(fd: int, limit_s: float) -> None:
    """Poll ``fd`` without sleeping for at most ``limit_s`` (FP4BENCH_SPIN_WAIT_MS, an experiment: does a core
    kept busy through the pause make each sample's first call less cold?)."""
    end = time.monotonic() + limit_s
    while not select.select([fd], [], [], 0)[0] and time.monotonic() < end:
        pass


def main() -> None:
    try:
        window = native.load()
    except native.NativeUnavailable as exc:
        window = native.PythonWindow(str(exc))
    window.arm()
    key = bytes.fromhex(window.read_line(0).decode().strip())
    fd = int(os.environ.pop("FP4BENCH_RESULT_FD"))
    sock_fd = os.environ.pop("FP4BENCH_FD_SOCKET", None)
    fd_sock = socket.socket(fileno=int(sock_fd)) if sock_fd else None
    if fd_sock is not None:
        # Descriptors only come in: a submission writing to this socket gets EPIPE instead of filling a buffer
        # nobody reads and blocking the worker (fd_writer.py hung benchmark runs that way).
        fd_sock.shutdown(socket.SHUT_WR)
    worker = Worker(Writer(fd, key), window, fd_sock)
    snapshot = _measurement_objects(worker)  # before any submission code runs, import included

    def tampered() -> list[str]:
        now = _measurement_objects(worker)
        return sorted(k for k in snapshot.keys() | now.keys() if snapshot.get(k) is not now.get(k))

    spin_s = float(os.environ.get("FP4BENCH_SPIN_WAIT_MS", "0")) / 1e3
    while True:
        if spin_s > 0:  # experiment: keep this core busy until the next request, with our code only
            _spin_until_readable(0, spin_s)
        line = window.read_line(0)
        if not line:
            return
        try:
            req = P.decode(line, (P.Load, P.Map, P.Run, P.Exit))
        except P.ProtocolError as exc:
            worker.send(P.to_dict(P.Failed("protocol", "ProtocolError", str(exc))))
            continue
        if isinstance(req, P.Exit):
            return
        if isinstance(req, P.Load):
            if req.profiler and worker.device.type == "cuda":
                worker.start_profiler()
                snapshot["worker.trusted"] = worker.trusted  # its threads, taken before any submission code runs
            worker.load(req)
            snapshot["worker.kernel"] = worker.kernel
        elif isinstance(req, P.Map):
            try:
                worker.map(req)
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which ends the case
                worker.send(P.to_dict(_failed("map", exc)))
        else:
            try:
                worker.run(req, tampered)
            except P.ProtocolError as exc:
                worker.send(P.to_dict(P.Failed("protocol", "ProtocolError", str(exc))))
            snapshot["worker.trusted"] = worker.trusted  # grows after a profiler pass (its own threads)


if __name__ == "__main__":
    if os.environ.get("FP4BENCH_WORKER_PROFILE"):  # diagnostics: cProfile of the worker, written at exit
        import cProfile
        cProfile.run("main()", os.environ["FP4BENCH_WORKER_PROFILE"])
    else:
        main()
