"""The worker's timed window: guard.c built into a cached extension module, or a pure-Python stand-in.

The TRUSTED parent calls ``build()`` (or ``available()``) before it spawns a worker; the worker calls ``load()``,
which only imports the cached file and never compiles. When no C build is possible, ``PythonWindow(reason)`` has
the same API with its marks held in Python, so a submission can rewrite them; ``caveat`` says so for the record.

The window's API (the C module and ``PythonWindow`` alike; every function raises RuntimeError when called before
``arm()``, from a thread other than the one that armed, or from inside a kernel while ``run_calls`` runs):

- ``arm()``: once, in the main thread, BEFORE the submission is imported. Takes the baseline (sys.monitoring tool
  ids in use, every signal's handler, armed interval timers, the trace/profile hooks, gc callbacks,
  sys.unraisablehook, whether gc is enabled), captures the callables it uses later, and from then on refuses new
  audit hooks (they cannot be removed, and clearing a trace hook raises an audit event). A second call raises.
- ``read_line(fd) -> bytes``: one ``\\n``-terminated line from ``fd`` (GIL released while waiting; partial reads
  joined; the unterminated rest, or b"", at EOF), then gc disabled and ``scrub()``, so nothing a thread planted
  between requests runs in our code. Bytes read past the line are kept for the next call: read ``fd`` only through
  this. Raises OSError naming fd on a read error.
- ``run_calls(kernel, inputs, stream) -> list``: the timed window. ``inputs`` a sequence (copied first, so the
  kernel cannot change it); ``stream`` a CUstream handle as int (``torch.cuda.current_stream().cuda_stream``;
  0 = legacy default stream; it must belong to the calling thread's current context) or None for the CPU's
  CLOCK_MONOTONIC. Disables gc (and leaves it off until ``release()``), scrubs, records the start mark, calls
  ``kernel(x)`` for each x in order with nothing in between, records the end mark, scrubs again, returns the
  outputs in order. If a call raises, the end mark is recorded, the scrub done, the exception re-raised and the
  outputs so far dropped. Re-entry raises RuntimeError; a bad argument raises TypeError; a CUDA failure (no
  libcuda, no current context, a failed record) raises RuntimeError naming the driver call and its CUresult.
- ``elapsed_ns() -> float``: the last window's end minus start in ns (CUDA: waits for the end event). Raises
  RuntimeError if no window completed.
- ``ms_after_start(event: int) -> float``: ms from the last window's start event to ``event`` (a CUevent handle,
  e.g. ``torch.cuda.Event(enable_timing=True).cuda_event`` once recorded); waits for it. CUDA windows only.
- ``scrub()``: removes, back to the baseline, what lets Python code run at arbitrary points in this thread:
  trace and profile hooks, sys.monitoring callbacks and events of tools not in use at ``arm()`` (3.12+), Python
  signal handlers that differ from the baseline (and interval timers armed since, whose signal would otherwise
  reach a default handler), added gc callbacks, a replaced sys.unraisablehook. What it
  removes is kept alive until ``release()``, so no finalizer runs now.
- ``cleared() -> list[str]``: what scrub found (and what was refused) since the last call, e.g.
  "sys.settrace hook (evil)", "sys.monitoring tool 3 ('evil')", "interval timer ITIMER_REAL",
  "signal handler for SIGALRM (on_alarm)", "sys.addaudithook refused"; resets.
- ``release()``: after the reply is sent: re-enables gc if it was enabled at ``arm()`` and drops what scrub and
  run_calls kept (their finalizers may run now).

Both also carry ``HELD_IN``: "C" or "python".
"""
from __future__ import annotations

import ctypes
import gc
import hashlib
import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from types import FunctionType, MethodType, ModuleType

SOURCE = Path(__file__).with_name("guard.c")
#: The extension's module name (guard.c's PyInit__fp4bench_guard).
MODULE = "_fp4bench_guard"
FLAGS = ("-O2", "-shared", "-fPIC", "-Wall")
LIBS = ("-ldl",)
_TIMERS = ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")  # signal's interval timers, scrubbed like guard.c's


class NativeUnavailable(RuntimeError):
    """The C window cannot be built or loaded here; the message is the one-line reason."""


def cache_dir() -> Path:
    """``$FP4BENCH_NATIVE`` (a sandboxed worker's: the parent's build, read-only), else ``$FP4BENCH_CACHE/native``,
    else ``~/.cache/fp4bench/native``."""
    if os.environ.get("FP4BENCH_NATIVE"):
        return Path(os.environ["FP4BENCH_NATIVE"])
    base = os.environ.get("FP4BENCH_CACHE") or Path.home() / ".cache" / "fp4bench"
    return Path(base) / "native"


def artefact() -> Path:
    """Where the built module lies: named by the sha256 of guard.c, the Python ABI and the compiler flags."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = hashlib.sha256(SOURCE.read_bytes() + "\0".join((suffix, *FLAGS, *LIBS)).encode()).hexdigest()
    return cache_dir() / f"guard-{key[:16]}{suffix}"


def _compiler() -> list[str]:
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    found = next((shutil.which(c) for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if found is None:
        raise NativeUnavailable("no C compiler (none of cc, gcc, clang on PATH, and $CC unset)")
    return [found]


def build() -> Path:
    """Compile guard.c into the cache unless it is there already; returns the module's path.

    The parent's job, before it starts a worker. Written under a temporary name and renamed, so concurrent builds
    and a build killed halfway never leave a broken file. Raises NativeUnavailable (no compiler, no Python.h, an
    unwritable cache, a compile error with its first lines).
    """
    path = artefact()
    if path.exists():
        return path
    cc = _compiler()
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        raise NativeUnavailable(f"no Python.h in {include} (install the Python development headers)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".guard-", suffix=path.suffix)
        os.close(fd)
    except OSError as exc:
        raise NativeUnavailable(f"cannot write the build cache {path.parent}: {exc.strerror}") from None
    try:
        try:
            proc = subprocess.run([*cc, *FLAGS, f"-I{include}", str(SOURCE), "-o", tmp, *LIBS],
                                  capture_output=True, text=True)
        except FileNotFoundError:
            raise NativeUnavailable(f"no C compiler: {cc[0]} not found") from None
        if proc.returncode != 0:
            first = " | ".join(line.strip() for line in proc.stderr.splitlines()[:3])
            raise NativeUnavailable(f"compiling {SOURCE.name} failed ({cc[0]} exit {proc.returncode}): {first}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def available() -> tuple[bool, str]:
    """(True, where the C window lies) after building it if needed, else (False, the reason)."""
    try:
        return True, f"window held in C ({build()})"
    except NativeUnavailable as exc:
        return False, str(exc)


def load() -> ModuleType:
    """The C window, imported from the cache; never compiles. Call once, before the submission is imported, and
    keep the module (a second load shares the same C state). Raises NativeUnavailable if it was not built for
    this interpreter (the parent and the worker must run the same Python and see the same $FP4BENCH_CACHE)."""
    path = artefact()
    if not path.exists():
        raise NativeUnavailable(f"the C window is not built ({path} missing): the parent calls native.build() first")
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise NativeUnavailable(f"cannot load {path}: {exc}") from None
    return module


class _Driver:
    """The CUDA driver functions the Python window uses, through ctypes (guard.c declares the same ones)."""

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise RuntimeError(f"cannot time on a CUDA stream: libcuda.so.1 not loadable ({exc})") from None
        elapsed = getattr(lib, "cuEventElapsedTime_v2", None) or lib.cuEventElapsedTime
        elapsed.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
        lib.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.cuEventSynchronize.argtypes = [ctypes.c_void_p]
        self.lib, self.elapsed = lib, elapsed

    def check(self, what: str, rc: int) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {(name.value or b'unknown error').decode()} (CUresult {rc})")

    def current_context(self) -> int:
        ctx = ctypes.c_void_p()
        self.check("cuCtxGetCurrent", self.lib.cuCtxGetCurrent(ctypes.byref(ctx)))
        if not ctx.value:
            raise RuntimeError("no current CUDA context on this thread: initialise CUDA (torch) first")
        return ctx.value

    def new_event(self) -> int:
        ev = ctypes.c_void_p()
        self.check("cuEventCreate", self.lib.cuEventCreate(ctypes.byref(ev), 0))
        return ev.value

    def ms_between(self, start: int, end: int) -> float:
        for ev in (end, start):
            self.check("cuEventSynchronize", self.lib.cuEventSynchronize(ev))
        ms = ctypes.c_float()
        self.check("cuEventElapsedTime", self.elapsed(ctypes.byref(ms), start, end))
        return ms.value


class PythonWindow:
    """The window's API (module docstring) in Python, for when guard.c cannot be built. The marks are attributes
    of this object and the scrub runs bytecode, so a submission can find and rewrite the marks (gc, frames) and
    its hooks run while being removed: ``caveat`` is the line to record."""

    HELD_IN = "python"

    def __init__(self, reason: str):
        self.caveat = f"window held in Python ({reason}): frame-level tampering not excluded"
        self._armed = self._in_run = False
        self._marks = None
        self._notes: list[str] = []
        self._graveyard: list = []
        self._pending, self._pending_fd = b"", -1
        self._cuda = None

    def _check(self, fn: str) -> None:
        if not self._armed:
            raise RuntimeError(f"{fn}(): arm() has not been called")
        if threading.get_ident() != self._thread:
            raise RuntimeError(f"{fn}(): called from thread {threading.get_ident()}; only the thread that called "
                               f"arm() ({self._thread}) may use the guard")
        if self._in_run:
            raise RuntimeError(f"{fn}(): not allowed while run_calls is timing calls (called from a kernel)")

    def arm(self) -> None:
        if self._armed:
            raise RuntimeError("arm(): already armed (once per process, before the submission is imported)")
        if threading.get_ident() != threading.main_thread().ident:
            raise RuntimeError("arm(): must be called from the main thread (signal handlers are reset there)")
        self._thread = threading.get_ident()
        self._gc_was_enabled = gc.isenabled()
        self._trace, self._profile = sys.gettrace(), sys.getprofile()
        self._gc_callbacks, self._gc_base = gc.callbacks, tuple(gc.callbacks)
        self._unraisablehook = sys.unraisablehook
        self._mon = getattr(sys, "monitoring", None)
        self._mon_base = {t for t in range(6) if self._mon and self._mon.get_tool(t) is not None}
        self._events = [v for v in vars(self._mon.events).values()
                        if isinstance(v, int) and v > 0 and not v & (v - 1)] if self._mon else []
        self._timers = {n: signal.getitimer(getattr(signal, n))[0] > 0 for n in _TIMERS}
        numbers = sorted(signal.valid_signals())
        names = {s.value: s.name for s in signal.Signals}
        self._signals = {n: (names.get(n, f"signal {n}"), signal.getsignal(n)) for n in numbers}
        self._getsignal, self._setsignal, self._settrace, self._setprofile = (
            signal.getsignal, signal.signal, sys.settrace, sys.setprofile)
        sys.addaudithook(self._audit)
        self._armed = True

    def _audit(self, event: str, args) -> None:
        if self._armed and event == "sys.addaudithook":
            self._notes.append("sys.addaudithook refused")
            raise RuntimeError("fp4bench: no audit hook may be added while the guard is armed")

    def _scrub(self) -> None:
        for cb in [c for c in self._gc_callbacks if not any(c is b for b in self._gc_base)]:
            self._notes.append(f"gc callback ({_name(cb)})")
            self._graveyard.append(cb)
        self._gc_callbacks[:] = self._gc_base
        if sys.unraisablehook is not self._unraisablehook:
            self._notes.append(f"sys.unraisablehook ({_name(sys.unraisablehook)})")
            self._graveyard.append(sys.unraisablehook)
            sys.unraisablehook = self._unraisablehook
        for now, base, kind, setter in ((sys.gettrace(), self._trace, "settrace", self._settrace),
                                        (sys.getprofile(), self._profile, "setprofile", self._setprofile)):
            if now is not base:
                self._notes.append(f"sys.{kind} hook ({_name(now)})")
                self._graveyard.append(now)
                setter(base)
        for tool in (t for t in range(6) if self._mon and t not in self._mon_base):
            olds = [self._mon.register_callback(tool, e, None) for e in self._events]
            self._graveyard += [o for o in olds if o is not None]
            name = self._mon.get_tool(tool)
            if name is not None:
                self._mon.set_events(tool, 0)
                self._mon.free_tool_id(tool)
            if name is not None or any(o is not None for o in olds):
                self._notes.append(f"sys.monitoring tool {tool} ('{name or 'unnamed'}')")
        for name, armed in self._timers.items():
            if not armed and signal.getitimer(getattr(signal, name))[0] > 0:
                signal.setitimer(getattr(signal, name), 0)
                self._notes.append(f"interval timer {name}")
        for n, (sig_name, base) in self._signals.items():
            now = self._getsignal(n)
            if now is not base and callable(now):
                self._notes.append(f"signal handler for {sig_name} ({_name(now)})")
                self._graveyard.append(now)
                self._setsignal(n, signal.SIG_DFL if base is None else base)

    def scrub(self) -> None:
        self._check("scrub")
        self._scrub()

    def cleared(self) -> list[str]:
        self._check("cleared")
        found, self._notes = self._notes, []
        return found

    def release(self) -> None:
        self._check("release")
        if self._gc_was_enabled:
            gc.enable()
        self._graveyard = []

    def read_line(self, fd: int) -> bytes:
        self._check("read_line")
        if self._pending and fd != self._pending_fd:
            raise RuntimeError(f"read_line({fd}): {len(self._pending)} bytes read from fd {self._pending_fd} are "
                               f"still unreturned")
        self._pending_fd = fd
        while b"\n" not in self._pending:
            try:
                got = os.read(fd, 65536)
            except OSError as exc:
                raise OSError(exc.errno, f"read_line({fd}): {exc.strerror}") from None
            if not got:
                break
            self._pending += got
        cut = self._pending.find(b"\n") + 1 or len(self._pending)
        line, self._pending = self._pending[:cut], self._pending[cut:]
        gc.disable()
        self._scrub()
        return line

    def run_calls(self, kernel, inputs, stream: int | None) -> list:
        self._check("run_calls")
        if not callable(kernel):
            raise TypeError(f"run_calls(): kernel must be callable, got {type(kernel).__name__}")
        if stream is not None and not isinstance(stream, int):
            raise TypeError(f"run_calls(): stream must be an int (a CUstream handle, 0 = legacy default) or None "
                            f"(CPU clock), got {type(stream).__name__}")
        if stream is not None:
            self._cuda_ready()
        try:
            items = tuple(inputs)
        except TypeError:
            raise TypeError(f"run_calls(): inputs must be a sequence, got {type(inputs).__name__}") from None
        gc.disable()
        self._marks = None
        self._scrub()
        self._in_run = True
        outputs = []
        try:
            start = self._record(stream, 0)
            try:
                for x in items:
                    outputs.append(kernel(x))
            finally:
                end = self._record(stream, 1)
                gc.disable()
                self._graveyard.append(items)
                self._scrub()
        except BaseException:
            self._graveyard += outputs
            raise
        finally:
            self._in_run = False
        self._marks = ("cuda" if stream is not None else "cpu", start, end)
        return outputs

    def _cuda_ready(self) -> None:
        if self._cuda is None:
            self._cuda = _Driver()
        ctx = self._cuda.current_context()
        if not hasattr(self, "_events_ctx"):
            self._ev = (self._cuda.new_event(), self._cuda.new_event())
            self._events_ctx = ctx
        elif ctx != self._events_ctx:
            raise RuntimeError("the current CUDA context changed since the guard's events were made")

    def _record(self, stream: int | None, which: int):
        """The start (which=0) or end (1) mark: CLOCK_MONOTONIC ns, or our event recorded on ``stream``."""
        if stream is None:
            return time.monotonic_ns()
        self._cuda.check("cuEventRecord", self._cuda.lib.cuEventRecord(self._ev[which], stream))
        return self._ev[which]

    def elapsed_ns(self) -> float:
        self._check("elapsed_ns")
        if self._marks is None:
            raise RuntimeError("elapsed_ns(): no run_calls has completed a timed window yet")
        kind, start, end = self._marks
        return float(end - start) if kind == "cpu" else self._cuda.ms_between(start, end) * 1e6

    def ms_after_start(self, event: int) -> float:
        self._check("ms_after_start")
        if self._marks is None or self._marks[0] != "cuda":
            raise RuntimeError("ms_after_start(): the last run_calls was not timed on a CUDA stream")
        if not event:
            raise ValueError("ms_after_start(): expected a CUevent handle, got 0")
        return self._cuda.ms_between(self._marks[1], event)


def _name(obj) -> str:
    fn = obj.__func__ if type(obj) is MethodType else obj
    return fn.__qualname__ if type(fn) is FunctionType else type(obj).__name__
