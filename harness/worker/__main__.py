"""Worker process: ``python -m harness.worker``, the only code that imports a submission (UNTRUSTED side).

Requests (harness.protocol, one JSON line each) arrive on stdin, read by the window guard, which removes any
trace/profile/monitoring hook or signal handler a thread planted before our Python code runs. Replies go out as
frames on FP4BENCH_RESULT_FD; memory-file descriptors of the sample buffers arrive on the Unix socket
FP4BENCH_FD_SOCKET. Once the submission is imported, everything here is the submission's to rewrite: the worker
times its window the way the official loop does and reports what came back, but every reply is a claim the parent
checks against its own bracket (harness.parent.bracket) or uses only to word a failure. Exit code 110 after a CUDA
error that poisons the context (the parent then starts a fresh worker).
"""
from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
import traceback

from harness.worker import timing  # first: captures the measurement functions before any submission import
from harness.worker import native, threads  # noqa: E402 - after timing
from harness.worker import copy_back  # noqa: E402 - after timing
from harness.worker.task_alias import alias_task
from harness import plan as plan_mod
from harness import plugs
from harness import protocol as P
from harness.buffers import MappedBuffer, SharedBuffer, recv_fds
from harness.channel import Writer
from harness.problem import DEFAULT_PROBLEM, OutputMeta, SampleBuffers
from harness.hardware import default_device

import torch

_type_name = type.__dict__["__name__"].__get__
_type_module = type.__dict__["__module__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_Tensor, _list, _tuple = torch.Tensor, list, tuple
#: The longest exception text and traceback a reply carries (characters): together below the parent's own cap
#: (harness.results.record.MESSAGE_CHARS), so the one cut marker a user sees counts what was cut.
_MESSAGE_CHARS, _TRACEBACK_CHARS = 48 << 10, 8000
#: How the window guard names a hook it refused to install (native.cleared()): the hook never ran.
_REFUSED = " refused"


def _failed(kind: str, exc: BaseException) -> P.Failed:
    """The exception as facts: its type, its text (or what turning it into text raised), its traceback."""
    message, raised, nonstring = "", "", False
    try:
        text = str(exc)
        if type(text) is str and not text.strip():
            text = _detail(exc)
        if type(text) is str:
            message = text if len(text) <= _MESSAGE_CHARS else (
                f"{text[:_MESSAGE_CHARS // 2]}\n[... {len(text) - _MESSAGE_CHARS} characters cut ...]\n"
                f"{text[-_MESSAGE_CHARS // 2:]}")
        else:
            nonstring = True
    except BaseException as inner:  # noqa: BLE001 - its __str__ is submission code
        raised = _type_name(type(inner))
    try:
        tb = "".join(traceback.format_tb(exc.__traceback__))[-_TRACEBACK_CHARS:]
        tb = f"Traceback (most recent call last):\n{tb}{_type_name(type(exc))}: {message[-_TRACEBACK_CHARS:]}"
    except BaseException:  # noqa: BLE001 - formatting may call submission code
        tb = ""
    return P.Failed(kind, _type_name(type(exc)), message, tb, raised, nonstring)


def _detail(exc: BaseException) -> str:
    """Text for an exception whose str() is blank: its ``message`` attribute (the CuTe DSL's DSLBaseError keeps
    its own words there), else its cause's str(); "" when neither has any."""
    for get in (lambda: exc.message, lambda: str(exc.__cause__) if exc.__cause__ is not None else ""):
        try:
            text = get()
        except BaseException:  # noqa: BLE001 - attributes may be submission code
            continue
        if type(text) is str and text.strip():
            return text
    return ""


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
        self.own_device: SharedBuffer | None = None  # the device inputs in our own memory (CUDA)
        self.flags: MappedBuffer | None = None        # the parent's flag words (CUDA)
        self.profiler_started = False
        self._views: dict[tuple, tuple] = {}          # (layout key, host offset) -> (views, inputs)
        self.problem = DEFAULT_PROBLEM                # the submission's problem (P.Load)
        self._buffers: SampleBuffers | None = None    # its plug's sample buffers, once a Run needs them
        threads.prestart_torch_pool()

    # -- requests
    def load(self, req: P.Load) -> None:
        """Import the submission, ``task`` being its problem's package; the problem's sample buffers (if any) are
        imported first, before any submission code runs."""
        path = req.path
        sys.path.insert(0, os.path.dirname(path))
        try:
            self.problem, self._buffers = req.problem, None
            alias_task(req.problem)
            self._sample_buffers()
            spec = importlib.util.spec_from_file_location("submission", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["submission"] = module
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - report whatever the import raised
            self.send(P.to_dict(_failed("import", exc)))
            return
        self._views = {}
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
        self.buffers, self._views = {}, {}
        refs = {"device": req.device, "host": req.host, "output": req.output}
        fds = recv_fds(self.fd_sock, sum(r.kind == "memfd" for r in refs.values()))
        mine = P.NO_BUFFER
        for name, ref in refs.items():
            if ref.kind == "alloc":
                if self.own_device is not None:
                    self.own_device.close()
                self.own_device = SharedBuffer(ref.nbytes, self.device)
                self.buffers[name] = self.own_device
                mine = self.own_device.ref()
            else:
                self.buffers[name] = MappedBuffer(ref, fds.pop(0) if ref.kind == "memfd" else None)
        self.send(P.to_dict(P.Mapped(mine)))

    def calibrate(self, req: P.Calibrate) -> None:
        """An empty window through the bracket protocol, before any submission code has run (P.Calibrate)."""
        cuda = self.device.type == "cuda"
        if cuda and req.flags.kind != "none" and self.flags is None:
            self.flags = MappedBuffer(req.flags)
        if req.profiler and cuda and not self.profiler_started:
            self.start_profiler()
            self.profiler_started = True
        gate = timing.Gate(self.flags.ptr, req.seq) if cuda and self.flags is not None and req.seq > 0 else None
        if req.idle and gate is not None:
            result = timing.run_window(self.window, _until_started, [None], _nothing, cuda, gate=gate)
        else:
            result = timing.run_window(self.window, _nothing, [], _nothing, cuda, gate=gate)
        self.send(P.to_dict(P.Closed(result.elapsed_ns)))
        self.window.cleared()
        self.window.release()

    def run(self, req: P.Run) -> None:
        if req.plan:
            views, (inputs, copied, copy_out) = None, self._plain(req)
        else:
            views, inputs, copied, copy_out = self._arena(req)
        profiled = req.kind in ("profile", "kernels")
        timed = req.kind == "time"
        cuda = self.device.type == "cuda"
        try:
            if profiled:
                result, table, kernel_ns = self._profile(inputs, copy_out, table=req.kind == "profile")
            else:
                gate = timing.Gate(self.flags.ptr, req.seq) if timed and cuda and self.flags is not None else None
                result = timing.run_window(self.window, self.kernel, inputs, copy_out, cuda, None,
                                           self.watch if timed else None, gate)
                if timed:
                    self.send(P.to_dict(P.Closed(result.elapsed_ns)))
                table, kernel_ns = "", None
        except BaseException as exc:  # noqa: BLE001 - the submission's exception is the case's result
            self._report(exc)
            return
        found = self.window.cleared()
        hooks = tuple(h for h in found if not h.endswith(_REFUSED))
        refused = tuple(h[:-len(_REFUSED)] for h in found if h.endswith(_REFUSED))
        outputs = result.outputs
        containers = tuple(_container(o) for o in outputs)
        metas = tuple(tuple(_meta(x) for x in o) if type(o) is _list else
                      (_meta(o),) if req.plan and isinstance(o, _Tensor) else () for o in outputs)
        reply = P.RunReply(
            result.elapsed_ns if timed else 0.0, len(inputs), containers, metas,
            tuple(tuple(c) for c in copied), result.late_streams, hooks if req.watch else (), refused,
            tuple(_torch_modes()), tuple(timing.guard_report()), kernel_ns, table)
        self.send(P.to_dict(reply))
        del outputs, result
        self.window.release()

    def _sample_buffers(self) -> SampleBuffers | None:
        """The problem's own sample buffers (harness.problem.SampleBuffers), or None for a problem without."""
        if self._buffers is None:
            self._buffers = plugs.get(self.problem).sample_buffers
        return self._buffers

    def _arena(self, req: P.Run):
        """The views of the problem's own sample buffers (its layout of the request's groups), inputs, the record
        of what was copied back, and the copy."""
        kit = self._sample_buffers()
        if kit is None:
            raise P.ProtocolError(f"Run.plan: expected a plan for {self.problem} (it has no sample buffers of its "
                                  f"own), got none")
        try:
            layout = kit.layout_of_sizes(req.sizes, req.calls)
        except ValueError as exc:
            raise P.ProtocolError(f"Run.sizes: {exc}") from None
        host = self.buffers["host"].tensor
        if req.host_offset < 0 or req.host_offset + layout.host_bytes > host.numel() or req.host_offset % 4096:
            raise P.ProtocolError(f"Run.host_offset: expected a 4096-byte multiple with {layout.host_bytes} bytes "
                                  f"after it in the {host.numel()}-byte host buffer, got {req.host_offset}")
        key = (req.sizes, req.calls, req.host_offset)
        if key not in self._views:  # the views' Python objects cost ms; the buffers stay until the next Map
            views = kit.views(layout, self.buffers["device"].tensor, host[req.host_offset:],
                              self.buffers["output"].tensor)
            self._views[key] = (views, views.inputs())
        views, inputs = self._views[key]
        copied = [[False] * len(layout.output_shapes) for _ in range(req.calls)]
        return views, inputs, copied, copy_back.sample_buffers(layout, views, copied, self.device)

    def _plain(self, req: P.Run):
        """Another problem's inputs, as views the request's harness.plan.Plan describes, the record of what was
        copied back, and the copy (outputs of the plan's dtypes and shapes on our device)."""
        key = (req.plan, req.host_offset)
        if key not in self._views:
            try:
                plan = plan_mod.Plan.from_json(req.plan)
            except (ValueError, KeyError, TypeError) as exc:
                raise P.ProtocolError(f"Run.plan: {exc}") from None
            host = self.buffers["host"].tensor
            if req.host_offset < 0 or req.host_offset + plan.host_slot_bytes > host.numel():
                raise P.ProtocolError(f"Run.host_offset: {req.host_offset} with {plan.host_slot_bytes} bytes after "
                                      f"it is outside the {host.numel()}-byte host buffer")
            device, out = self.buffers["device"].tensor, self.buffers["output"].tensor
            inputs = [plan_mod.build(plan, plan.tree, j, device, host[req.host_offset:]) for j in range(plan.calls)]
            self._views[key] = (plan, inputs, [plan_mod.output_views(plan, j, out) for j in range(plan.calls)])
        plan, inputs, out_views = self._views[key]
        copied = [[False] * len(plan.outputs) for _ in range(plan.calls)]
        return inputs, copied, copy_back.plain(plan, out_views, copied, self.device)

    def start_profiler(self) -> None:
        """One empty pass of the profiler: CUPTI's start-up (5-8 s on an H200 host, however the profiler is
        driven; docs/journal.md). Runs before the submission is imported, so every thread born here is
        born before the parent takes the worker's trusted threads (harness.parent.watch)."""
        import warnings

        from torch.profiler import ProfilerActivity, profile

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Profiler clears events at the end of each cycle": none kept
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):  # as _profile's passes
                    torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - only a head start: the first pass starts it up (and reports)
            print(f"fp4bench worker: the profiler did not start up at load ({type(exc).__name__}: {exc}); the "
                  f"first kernel-time pass starts it", file=sys.stderr, flush=True)

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
        # Only the calls are profiled; the copies come after.
        prof = profile(activities=acts)
        prof.__enter__()
        try:
            outputs = self.window.run_calls(self.kernel, inputs, torch.cuda.current_stream().cuda_stream
                                            if cuda else None)
            if cuda:
                torch.cuda.synchronize()
        finally:
            prof.__exit__(None, None, None)
        copy_out(outputs)
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


def _nothing(*_args):
    """The calibration window's kernel and copy: nothing at all."""
    return None


def _until_started(_x, limit_s: float = 1.0):
    """An idle calibration window's one call: returns once the current stream has drained (the parent's go
    written, the start mark passed), or after ``limit_s``."""
    stream, deadline = torch.cuda.current_stream(), time.monotonic() + limit_s
    while not stream.query() and time.monotonic() < deadline:
        pass


def main() -> None:
    try:
        window = native.load()
    except native.NativeUnavailable as exc:
        window = native.PythonWindow(str(exc))
    window.arm()
    fd = int(os.environ.pop("FP4BENCH_RESULT_FD"))
    sock_fd = os.environ.pop("FP4BENCH_FD_SOCKET", None)
    fd_sock = socket.socket(fileno=int(sock_fd)) if sock_fd else None
    if fd_sock is not None:
        # Descriptors only come in: a submission writing to this socket gets EPIPE instead of filling a buffer
        # nobody reads and blocking the worker (fd_writer.py hung benchmark runs that way).
        fd_sock.shutdown(socket.SHUT_WR)
    worker = Worker(Writer(fd), window, fd_sock)

    while True:
        line = window.read_line(0)
        if not line:
            return
        try:
            req = P.decode(line, (P.Calibrate, P.Load, P.Map, P.Run, P.Exit))
        except P.ProtocolError as exc:
            worker.send(P.to_dict(P.Failed("protocol", "ProtocolError", str(exc))))
            continue
        if isinstance(req, P.Exit):
            return
        if isinstance(req, P.Calibrate):
            worker.calibrate(req)
        elif isinstance(req, P.Load):
            worker.load(req)
        elif isinstance(req, P.Map):
            try:
                worker.map(req)
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which ends the case
                worker.send(P.to_dict(_failed("map", exc)))
        else:
            try:
                worker.run(req)
            except P.ProtocolError as exc:
                worker.send(P.to_dict(P.Failed("protocol", "ProtocolError", str(exc))))


if __name__ == "__main__":
    main()
