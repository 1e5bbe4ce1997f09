"""harness.worker.native and guard.c: the build, and the timed window a submission cannot reach.

Each window scenario runs in a fresh Python process (as the worker does): arm() changes process-wide state (gc,
signal handlers, an audit hook), which must not leak into the test session. Scenarios run against the C window
and, where the behaviour is the same, the pure-Python stand-in.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest

from harness.worker import native

ROOT = Path(__file__).resolve().parents[3]
BOTH = pytest.mark.parametrize("kind", ["C", "python"])
MONITORING = pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+")
GPU = pytest.mark.gpu

PRELUDE = """
import gc, json, os, signal, sys, threading, time
sys.path.insert(0, {root!r})
from harness.worker import native
w = native.load() if {kind!r} == "C" else native.PythonWindow("test")
{before_arm}
w.arm()
def report(**kw):
    print(json.dumps(kw))
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A fresh build cache with the C window built in it (the parent's step)."""
    path = tmp_path_factory.mktemp("fp4bench-cache")
    with mock.patch.dict(os.environ, {"FP4BENCH_CACHE": str(path)}):
        native.build()
    return path


def scenario(cache: Path, kind: str, body: str, before_arm: str = "", timeout: int = 60) -> dict:
    """Run ``body`` after arming a ``kind`` window in a new process; returns what its report(...) printed."""
    code = PRELUDE.format(root=str(ROOT), kind=kind, before_arm=before_arm) + textwrap.dedent(body)
    env = {**os.environ, "FP4BENCH_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the build ----

def test_build_names_the_module_by_source_abi_and_flags_and_reuses_it(cache):
    with mock.patch.dict(os.environ, {"FP4BENCH_CACHE": str(cache)}):
        path = native.build()
        mtime = path.stat().st_mtime_ns
        assert native.build() == path and path.stat().st_mtime_ns == mtime  # cached: not compiled again
        module = native.load()
    assert path.parent == cache / "native"
    assert path.name.startswith("guard-") and path.name.endswith(native.sysconfig.get_config_var("EXT_SUFFIX"))
    assert module.HELD_IN == "C"
    names = {"arm", "read_line", "run_calls", "elapsed_ns", "ms_after_start", "scrub", "cleared", "release"}
    assert names <= set(dir(module)) and names <= set(dir(native.PythonWindow))


def test_available_reports_the_built_module(cache):
    with mock.patch.dict(os.environ, {"FP4BENCH_CACHE": str(cache)}):
        assert native.available() == (True, f"window held in C ({native.artefact()})")


def test_load_never_compiles(tmp_path):
    with mock.patch.dict(os.environ, {"FP4BENCH_CACHE": str(tmp_path)}):
        with pytest.raises(native.NativeUnavailable, match=r"the C window is not built \(.*guard-.* missing\): "
                                                           r"the parent calls native.build\(\) first"):
            native.load()
    assert not (tmp_path / "native").exists()


def test_no_compiler_is_a_one_line_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("FP4BENCH_CACHE", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert native.available() == (False, "no C compiler (none of cc, gcc, clang on PATH, and $CC unset)")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(native.NativeUnavailable, match=r"^no C compiler: .*no-such-cc not found$"):
        native.build()


def test_a_compile_error_names_the_file_and_its_first_lines_and_leaves_nothing(tmp_path, monkeypatch):
    broken = tmp_path / "broken.c"
    broken.write_text("#include <Python.h>\nint f(void) { return undeclared_thing; }\n")
    monkeypatch.setenv("FP4BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "SOURCE", broken)
    with pytest.raises(native.NativeUnavailable) as err:
        native.build()
    message = str(err.value)
    assert message.startswith("compiling broken.c failed (") and "undeclared_thing" in message
    assert "\n" not in message
    assert os.listdir(tmp_path / "cache" / "native") == []


# ---- the window ----

@BOTH
def test_outputs_in_order_and_the_window_covers_the_calls(cache, kind):
    out = scenario(cache, kind, """
        def kernel(x):
            time.sleep(0.002)
            return x * 10
        outputs = w.run_calls(kernel, list(range(15)), None)
        report(outputs=outputs, elapsed=w.elapsed_ns(), gc_on=gc.isenabled())
    """)
    assert out["outputs"] == [x * 10 for x in range(15)]
    assert out["elapsed"] >= 15 * 2_000_000
    assert out["gc_on"] is False


_REWIND = """
    import ctypes
    def rewind():
        # frame_rewind.py, generalised: every local of every frame above that holds a time or an event is set to now
        f = sys._getframe(1)
        while f is not None:
            for name, value in list(f.f_locals.items()):
                if type(value) is int and abs(value - time.monotonic_ns()) < 10**10:
                    f.f_locals[name] = time.monotonic_ns()
                elif type(value) is int and abs(value - time.perf_counter_ns()) < 10**10:
                    f.f_locals[name] = time.perf_counter_ns()
                elif type(value) is float and abs(value - time.perf_counter()) < 10:
                    f.f_locals[name] = time.perf_counter()
                else:
                    continue
                if hasattr(ctypes.pythonapi, "PyFrame_LocalsToFast"):  # up to 3.12; 3.13 writes through
                    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(f), ctypes.c_int(0))
            f = f.f_back
    def kernel(x):
        time.sleep(0.002)
        rewind()
        return x
    w.run_calls(kernel, list(range(15)), None)
    report(elapsed=w.elapsed_ns())
"""


def test_frame_rewind_cannot_shorten_the_c_window(cache):
    assert scenario(cache, "C", _REWIND)["elapsed"] >= 15 * 2_000_000


def test_frame_rewind_does_shorten_the_python_window(cache):
    """The caveat PythonWindow records, shown: its start mark is a frame local the same trick rewrites."""
    assert scenario(cache, "python", _REWIND)["elapsed"] < 2_000_000


@BOTH
def test_reentry_raises_and_the_next_window_works(cache, kind):
    out = scenario(cache, kind, """
        try:
            w.run_calls(lambda x: w.run_calls(len, [x], None), [[1]], None)
        except RuntimeError as exc:
            error = str(exc)
        report(error=error, again=w.run_calls(len, [[1, 2]], None))
    """)
    assert out["error"] == "run_calls(): not allowed while run_calls is timing calls (called from a kernel)"
    assert out["again"] == [2]


@BOTH
def test_a_raising_kernel_propagates_and_its_dropped_outputs_are_finalized_only_at_release(cache, kind):
    out = scenario(cache, kind, """
        import weakref
        finalized = []
        class Out: pass
        def kernel(x):
            if x == 3:
                raise ValueError("boom at 3")
            o = Out()
            weakref.finalize(o, finalized.append, x)
            return o
        try:
            w.run_calls(kernel, [1, 2, 3, 4], None)
        except ValueError as exc:
            error = f"{type(exc).__name__}: {exc}"
        at_raise = list(finalized)
        w.release()
        report(error=error, at_raise=at_raise, at_release=sorted(finalized), again=w.run_calls(abs, [-5], None),
               elapsed=w.elapsed_ns())
    """)
    assert out["error"] == "ValueError: boom at 3"
    assert out["at_raise"] == [] and out["at_release"] == [1, 2]
    assert out["again"] == [5] and out["elapsed"] >= 0


_PLANT = """
    hits = {"trace": 0, "profile": 0, "alarm": 0, "gc": 0, "unraisable": 0, "audit": 0}
    def evil_trace(frame, event, arg):
        hits["trace"] += 1
        return evil_trace
    def evil_profile(frame, event, arg):
        hits["profile"] += 1
    def on_alarm(signum, frame):
        hits["alarm"] += 1
    def gc_spy(phase, info):
        hits["gc"] += 1
    def unraisable_spy(info):
        hits["unraisable"] += 1
    def audit_spy(event, args):
        hits["audit"] += 1
    def kernel(x):
        sys.settrace(evil_trace)
        sys.setprofile(evil_profile)
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, 30.0, 30.0)
        gc.callbacks.append(gc_spy)
        sys.unraisablehook = unraisable_spy
        sys.addaudithook(audit_spy)
        return x
"""


@BOTH
def test_hooks_planted_by_a_kernel_are_gone_when_run_calls_returns_and_never_run_again(cache, kind):
    out = scenario(cache, kind, textwrap.dedent(_PLANT) + textwrap.dedent("""
        w.run_calls(kernel, [1], None)
        at_return = dict(hits)
        def work(n):
            return n if n < 1 else work(n - 1)
        work(50)
        gc.collect()
        sys._getframe()         # an audited event
        signal.raise_signal(signal.SIGALRM)
        class Bad:
            def __del__(self):
                raise RuntimeError("unraisable")
        Bad()
        report(cleared=w.cleared(), again=w.cleared(), at_return=at_return, after=hits, calm=calm,
               alarm=signal.getsignal(signal.SIGALRM) is on_base_alarm, trace=sys.gettrace(),
               profile=sys.getprofile(), gc_callbacks=len(gc.callbacks),
               timer=signal.getitimer(signal.ITIMER_REAL))
    """), before_arm="""
calm = []
def on_base_alarm(signum, frame):
    calm.append(signum)
signal.signal(signal.SIGALRM, on_base_alarm)
""")
    assert out["cleared"] == ["sys.addaudithook refused", "gc callback (gc_spy)", "sys.unraisablehook (unraisable_spy)",
                              "sys.settrace hook (evil_trace)", "sys.setprofile hook (evil_profile)",
                              "interval timer ITIMER_REAL", "signal handler for SIGALRM (on_alarm)"]
    assert out["again"] == []
    assert out["after"] == out["at_return"]  # not one call after run_calls returned
    assert out["after"]["audit"] == 0
    assert out["alarm"] is True and out["calm"] == [14]
    assert out["trace"] is None and out["profile"] is None and out["gc_callbacks"] == 0
    assert out["timer"] == [0.0, 0.0]


@MONITORING
@BOTH
def test_sys_monitoring_tools_planted_by_a_kernel_are_cleared(cache, kind):
    out = scenario(cache, kind, """
        m = sys.monitoring
        hits = []
        def kernel(x):
            m.use_tool_id(3, "evil")
            m.register_callback(3, m.events.PY_START, lambda *a: hits.append("start"))
            m.set_events(3, m.events.PY_START | m.events.CALL)
            m.use_tool_id(4, "freed")       # 3.12's free_tool_id leaves the events on
            m.register_callback(4, m.events.CALL, lambda *a: hits.append("call"))
            m.set_events(4, m.events.CALL)
            m.free_tool_id(4)
            return x
        w.run_calls(kernel, [1], None)
        n = len(hits)
        def f(): return 1
        for _ in range(10): f()
        report(cleared=w.cleared(), new_hits=len(hits) - n, tools=[m.get_tool(t) for t in range(6)],
               events=m.get_events(3))
    """)
    assert out["cleared"] == ["sys.monitoring tool 3 ('evil')", "sys.monitoring tool 4 ('unnamed')"]
    assert out["new_hits"] == 0
    assert out["tools"] == [None] * 6 and out["events"] == 0


_THREAD_PLANTS = """
    seen = []
    r, wfd = os.pipe()
    def plant_then_write():
        gc.callbacks.append(lambda phase, info: seen.append("gc"))
        sys.unraisablehook = lambda info: seen.append("unraisable")
        if hasattr(threading, "settrace_all_threads"):         # 3.12+: reaches the main thread
            threading.settrace_all_threads(lambda *a: seen.append("trace"))
            sys.monitoring.use_tool_id(2, "spy")
            sys.monitoring.register_callback(2, sys.monitoring.events.PY_START, lambda *a: seen.append("mon"))
            sys.monitoring.set_events(2, sys.monitoring.events.PY_START)
        os.write(wfd, b"hel")
        time.sleep(0.05)
        os.write(wfd, b'lo {"op": "go"}\\nsecond')
        time.sleep(0.05)
        os.write(wfd, b" line\\ntail")
        os.close(wfd)
    t = threading.Thread(target=plant_then_write)
    t.start()
    first = w.read_line(r)
    planted = w.cleared()
    n = len(seen)
    gc.collect()
    def f(): return 1
    for _ in range(10): f()
    quiet = len(seen) - n
    t.join()
    lines = [first.decode(), w.read_line(r).decode(), w.read_line(r).decode(), w.read_line(r).decode()]
    report(lines=lines, planted=planted, quiet=quiet, gc_on=gc.isenabled())
"""


@BOTH
def test_read_line_joins_partial_reads_and_scrubs_what_a_thread_planted(cache, kind):
    out = scenario(cache, kind, _THREAD_PLANTS)
    assert out["lines"] == ['hello {"op": "go"}\n', "second line\n", "tail", ""]
    expected = ["gc callback (plant_then_write.<locals>.<lambda>)", "sys.unraisablehook (plant_then_write.<locals>.<lambda>)"]
    if sys.version_info >= (3, 12):
        expected += ["sys.settrace hook (plant_then_write.<locals>.<lambda>)", "sys.monitoring tool 2 ('spy')"]
    assert sorted(out["planted"]) == sorted(expected)
    assert out["quiet"] == 0
    assert out["gc_on"] is False


@BOTH
def test_gc_stays_off_after_the_window_until_release(cache, kind):
    out = scenario(cache, kind, """
        def kernel(x):
            gc.enable()
            return x
        w.run_calls(kernel, [1, 2], None)
        after = gc.isenabled()
        w.release()
        report(after=after, released=gc.isenabled())
    """)
    assert out == {"after": False, "released": True}


@BOTH
def test_release_keeps_gc_off_when_it_was_off_at_arm(cache, kind):
    out = scenario(cache, kind, """
        w.run_calls(abs, [1], None)
        w.release()
        report(released=gc.isenabled())
    """, before_arm="gc.disable()")
    assert out == {"released": False}


@BOTH
def test_the_guard_refuses_callers_it_does_not_trust(cache, kind):
    out = scenario(cache, kind, """
        errors = {}
        def attempt(name, fn, *args):
            try:
                fn(*args)
            except (RuntimeError, TypeError, ValueError) as exc:
                errors[name] = str(exc)
        attempt("before_any", w.elapsed_ns)
        attempt("arm_again", w.arm)
        attempt("cleared_in_kernel", w.run_calls, lambda x: w.cleared(), [1], None)
        attempt("release_in_kernel", w.run_calls, lambda x: w.release(), [1], None)
        t = threading.Thread(target=attempt, args=("other_thread", w.scrub))
        t.start(); t.join()
        attempt("not_a_sequence", w.run_calls, abs, 5, None)
        attempt("bad_stream", w.run_calls, abs, [1], "0")
        attempt("not_callable", w.run_calls, 3, [1], None)
        attempt("cpu_ms_after_start", w.ms_after_start, 1)
        errors["other_thread"] = errors["other_thread"].split(" from thread ")[0]
        report(**errors)
    """)
    assert out == {
        "before_any": "elapsed_ns(): no run_calls has completed a timed window yet",
        "arm_again": "arm(): already armed (once per process, before the submission is imported)",
        "cleared_in_kernel": "cleared(): not allowed while run_calls is timing calls (called from a kernel)",
        "release_in_kernel": "release(): not allowed while run_calls is timing calls (called from a kernel)",
        "other_thread": "scrub(): called",
        "not_a_sequence": "run_calls(): inputs must be a sequence, got int",
        "bad_stream": "run_calls(): stream must be an int (a CUstream handle, 0 = legacy default) or None "
                      "(CPU clock), got str",
        "not_callable": "run_calls(): kernel must be callable, got int",
        "cpu_ms_after_start": "ms_after_start(): the last run_calls was not timed on a CUDA stream",
    }


@BOTH
def test_a_thread_cannot_use_the_guard(cache, kind):
    out = scenario(cache, kind, """
        got = {}
        def meddle():
            try:
                w.run_calls(abs, [1], None)
            except RuntimeError as exc:
                got["error"] = str(exc)
        t = threading.Thread(target=meddle); t.start(); t.join()
        report(error=got["error"].replace(str(t.ident), "T").replace(str(threading.main_thread().ident), "M"))
    """)
    assert out["error"] == "run_calls(): called from thread T; only the thread that called arm() (M) may use the guard"


@BOTH
def test_arm_must_run_in_the_main_thread(cache, kind):
    code = PRELUDE.split("w.arm()")[0].format(root=str(ROOT), kind=kind, before_arm="") + textwrap.dedent("""
        got = []
        def arm():
            try:
                w.arm()
            except RuntimeError as exc:
                got.append(str(exc))
        t = threading.Thread(target=arm); t.start(); t.join()
        print(json.dumps(got))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FP4BENCH_CACHE": str(cache)})
    assert json.loads(proc.stdout) == ["arm(): must be called from the main thread (signal handlers are reset there)"]


@BOTH
def test_a_stream_without_a_cuda_driver_is_a_clear_error(cache, kind):
    out = scenario(cache, kind, """
        import ctypes
        try:
            ctypes.CDLL("libcuda.so.1")
            report(skip=True)
        except OSError:
            try:
                w.run_calls(abs, [1], 0)
            except RuntimeError as exc:
                report(error=str(exc))
    """)
    if out.get("skip"):
        pytest.skip("this machine has a CUDA driver")
    assert out["error"].startswith("cannot time on a CUDA stream: libcuda.so.1 not loadable (")


# ---- CUDA (run on the H200) ----

_CUDA = """
    import torch
    torch.cuda.init()
    stream = torch.cuda.current_stream().cuda_stream
    CYCLES = 2_000_000           # torch.cuda._sleep spins this many SM cycles; no GPU clocks above 3 GHz
"""


@GPU
@BOTH
def test_cuda_window_times_the_calls_on_the_stream(cache, kind):
    out = scenario(cache, kind, textwrap.dedent(_CUDA) + textwrap.dedent("""
        outputs = w.run_calls(lambda x: (torch.cuda._sleep(CYCLES), x)[1], list(range(15)), stream)
        elapsed = w.elapsed_ns()
        after = torch.cuda.Event(enable_timing=True)
        after.record()
        report(outputs=outputs, elapsed=elapsed, after_ms=w.ms_after_start(after.cuda_event))
    """))
    assert out["outputs"] == list(range(15))
    assert out["elapsed"] >= 15 * 2_000_000 / 3
    assert out["after_ms"] * 1e6 >= out["elapsed"]


@GPU
@BOTH
def test_cuda_side_stream_work_past_the_end_shows_in_ms_after_start(cache, kind):
    """The worker's side-stream check: an event behind unjoined side-stream work lands after the window's end."""
    out = scenario(cache, kind, textwrap.dedent(_CUDA) + textwrap.dedent("""
        side = torch.cuda.Stream()
        def kernel(x):
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(20 * CYCLES)   # never joined
            return x
        w.run_calls(kernel, [0], stream)
        mark = torch.cuda.Event(enable_timing=True)
        mark.record(side)
        report(elapsed=w.elapsed_ns(), side_ms=w.ms_after_start(mark.cuda_event))
    """))
    assert out["side_ms"] * 1e6 >= 20 * 2_000_000 / 3 > out["elapsed"]


@GPU
def test_cuda_events_found_through_gc_and_frames_do_not_move_the_c_window(cache):
    out = scenario(cache, "C", textwrap.dedent(_CUDA) + textwrap.dedent("""
        def kernel(x):
            torch.cuda._sleep(CYCLES)
            for o in gc.get_objects():          # every torch event there is, re-recorded now
                if isinstance(o, torch.cuda.Event):
                    o.record()
            f = sys._getframe(1)
            while f is not None:
                for v in list(f.f_locals.values()):
                    if isinstance(v, torch.cuda.Event):
                        v.record()
                f = f.f_back
            return x
        w.run_calls(kernel, list(range(15)), stream)
        report(elapsed=w.elapsed_ns())
    """))
    assert out["elapsed"] >= 15 * 2_000_000 / 3


@GPU
def test_cuda_without_a_current_context_is_a_clear_error(cache):
    out = scenario(cache, "C", """
        try:
            w.run_calls(abs, [1], 0)
        except RuntimeError as exc:
            report(error=str(exc))
    """)
    assert out["error"] in ("cuCtxGetCurrent failed: CUDA_ERROR_NOT_INITIALIZED (CUresult 3)",
                            "no current CUDA context on this thread: initialise CUDA (torch) first")
