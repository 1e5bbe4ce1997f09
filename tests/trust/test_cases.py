"""Every shared case (tests/cases/shared, from shared/cases) and every adversarial case (tests/cases/adversarial)
run through the harness on this machine, with its expected outcome asserted. GPU-only behaviours are in
test_gpu.py."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from tests.conftest import ADVERSARIAL, ROOT, SHARED_CASES

from harness.parent.registry import read_variant
from harness.parent.runner import RunOptions, run
from harness.parent.sandbox import Sandbox
from harness.parent.settings import Settings
from harness.results.record import Status
from harness.results.store import ResultStore, StoreRecorder
from problems.nvfp4_group_gemm.spec import Case, ShapeSet

TWO_GROUPS = ShapeSet("t", (Case((64, 40), (128, 256), (256, 512), 2, 7),))
TWO_CASES = ShapeSet("t2", (Case((64, 40), (128, 256), (256, 512), 2, 7), Case((32,), (128,), (128,), 1, 8)))
#: Benchmark mode kept short on a CPU: few samples, small time limits.
FAST = Settings(import_s=60, first_call_s=60, call_s=60, calls_per_sample=15, warmup_samples=1, warmup_max=1,
                min_runs=3, min_time_ms=1, max_runs=4)


def _run(path, mode="test", shapes=TWO_GROUPS, settings=FAST, observer=None, **kw):
    return run(read_variant(path), shapes, RunOptions(mode, settings=settings, **kw), observer)


def _only(record):
    assert len(record.cases) == 1
    return record.cases[0]


@pytest.mark.parametrize("mode", ["test", "benchmark"])
def test_honest_passes_every_mode(mode):
    rec = _run(SHARED_CASES / "honest_torch.py", mode, TWO_CASES)
    assert [c.status for c in rec.cases] == [Status.PASS, Status.PASS]
    if mode == "benchmark":
        for c in rec.cases:
            assert c.stats.runs == len(c.samples_ns) >= 3 and c.stats.mean_ns > 0
            # every output checked: the correctness call, the warm-up, every timed sample (+ the kernel-time pass)
            assert c.calls_checked == 1 + 15 + 15 * c.stats.runs + (15 if torch.cuda.is_available() else 0)
        assert rec.geomean_ns > 0
        assert rec.environment.timer == ("cuda-events" if torch.cuda.is_available() else "cpu-monotonic")


def test_empty_list():
    r = _only(_run(SHARED_CASES / "empty_list.py"))
    assert (r.status, r.message) == (Status.FAIL, "expected 2 outputs (one per group), got 0")


@pytest.mark.parametrize("name", ["untouched_c.py", "nibble_swap.py"])
def test_wrong_values_get_a_mismatch_report(name):
    r = _only(_run(SHARED_CASES / name))
    assert r.status is Status.FAIL
    assert r.message.startswith("output 0: ") and " elements differ (rtol=0.001, atol=0.001); first: [0, " in r.message
    assert " got " in r.message and " expected " in r.message


@pytest.mark.parametrize("mode,message", [
    ("fp32", "output 0: dtype torch.float32 (expected torch.float16)"),
    ("squeezed", "output 0: shape [64, 128] (expected [64, 128, 1])"),
    ("tuple", "expected a list of 2 tensors (output_t), got builtins.tuple"),
    ("numpy", "output 0: expected torch.Tensor, got numpy.ndarray (not a tensor)"),
])
def test_wrong_containers(monkeypatch, mode, message):
    monkeypatch.setenv("WRONG_OUTPUT", mode)
    r = _only(_run(SHARED_CASES / "wrong_outputs.py"))
    assert (r.status, r.message) == (Status.FAIL, message)


def test_raises_reports_type_message_traceback_and_goes_on():
    rec = _run(SHARED_CASES / "raises.py", shapes=TWO_CASES)
    for r in rec.cases:
        assert r.status is Status.ERROR
        assert r.message.startswith("raised: ValueError: kernel refused the problem: K must be a multiple of 512")
        assert "Traceback" in r.message and "raises.py" in r.message


def test_import_error_fails_before_data():
    r = _only(_run(SHARED_CASES / "import_error.py"))
    assert r.status is Status.ERROR
    assert r.message.startswith("import failed: ModuleNotFoundError: No module named 'a_module_that_does_not_exist'")


def test_a_syntax_error_is_reported_once(tmp_path):
    """A submission that cannot be imported fails every shape, but its traceback appears on the first only."""
    bad = tmp_path / "syntax.py"
    bad.write_text("def custom_kernel(data):\n    return [\n")
    rec = _run(bad, shapes=TWO_CASES)
    first, second = rec.cases
    assert first.status is second.status is Status.ERROR
    assert first.message.startswith("import failed: SyntaxError: ") and "Traceback" in first.message
    assert second.message.startswith("not run: the submission could not be loaded (import failed: SyntaxError: ")
    assert second.message.endswith("; the whole message is on shape 1)") and "Traceback" not in second.message


def test_no_entry_point():
    r = _only(_run(SHARED_CASES / "no_entry_point.py"))
    assert r.status is Status.ERROR
    assert "defines no callable custom_kernel(data) (callables found: kernel)" in r.message


def test_hard_crash_is_reported_and_the_run_goes_on():
    rec = _run(SHARED_CASES / "hard_crash.py", shapes=TWO_CASES)
    assert [c.status for c in rec.cases] == [Status.CRASH, Status.CRASH]
    assert "killed by SIGABRT (signal 6)" in rec.cases[0].message


def test_hang_times_out_then_the_next_case_runs():
    short = Settings(import_s=60, first_call_s=3, call_s=3)
    rec = _run(SHARED_CASES / "hang.py", shapes=TWO_CASES, settings=short)
    assert [(c.status, c.message) for c in rec.cases] == [(Status.TIMEOUT, "timeout after 3 s")] * 2


_FD_WRITER_RUN = """
import json
from tests.conftest import SHARED_CASES
from tests.trust.test_cases import _only, _run
rec = _run(SHARED_CASES / "fd_writer.py", "benchmark")
r = _only(rec)
print(json.dumps({"status": r.status.value, "runs": r.stats.runs, "message": r.message, "notes": list(rec.notes)}))
"""


def test_fd_writer_has_no_effect():
    """Run by a fresh interpreter, whose result channel gets a low descriptor number, within the 3-31 the case
    sprays (a long test session's open descriptors push it past them)."""
    proc = subprocess.run([sys.executable, "-c", _FD_WRITER_RUN], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["status"] == "pass" and got["runs"] >= 3
    if not torch.cuda.is_available():  # on a GPU the channel's descriptor number may lie beyond the ones it sprays
        assert any("stray bytes the submission wrote to the result channel" in n for n in got["notes"])
        assert got["message"] == ""  # a run-wide note, not the case's


def test_a_descriptor_flood_neither_blocks_the_worker_nor_changes_the_result():
    """fd_flood.py writes about 700 KB to every descriptor per call: the fd socket refuses writes (EPIPE) and the
    result channel drops what is not an authentic frame, so every call returns and the case passes."""
    rec = _run(ADVERSARIAL / "fd_flood.py", "benchmark", settings=replace(FAST, call_s=20.0, first_call_s=30.0))
    r = _only(rec)
    assert (r.status, r.message) == (Status.PASS, "") and r.stats.runs >= 3


def test_timer_patch_cannot_reach_the_timer(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    rec = _run(SHARED_CASES / "timer_patch.py", "benchmark", observer=StoreRecorder(store))
    r = _only(rec)
    assert r.status is Status.PASS
    assert any("replaced torch.cuda.Event.elapsed_time" in n for n in rec.notes)  # the harness used its own copy
    assert store.load(rec.run_id).notes == rec.notes  # the run-wide note reaches the store too
    assert store.load(rec.run_id).cases[0].message == r.message == ""


def test_pointer_cache_never_passes_a_replay(tmp_path, monkeypatch):
    """Fresh contents every call: a replay by pointer either never happens (honest work) or fails the check."""
    r = _only(_run(SHARED_CASES / "pointer_cache.py", "benchmark"))
    assert r.status is Status.PASS or (r.status is Status.FAIL and " elements differ " in r.message)
    log = tmp_path / "hits"
    monkeypatch.setenv("REPLAY_LOG", str(log))
    r = _only(_run(ADVERSARIAL / "pointer_replay_logged.py", "benchmark", sandbox=Sandbox(writable=(tmp_path,))))
    hits = int(log.read_text())
    assert (r.status is Status.PASS and hits == 0) or (r.status is Status.FAIL and hits > 0), (r.status, hits)


def test_side_stream_errors_on_cpu():
    """No streams without a GPU: torch.cuda.Stream() raises in the submission, and that is its case's error
    (a CPU build of torch says "requires CUDA support", a CUDA build on a machine without a GPU names the
    driver). The GPU test asserts it is caught."""
    if torch.cuda.is_available():
        pytest.skip("GPU behaviour is asserted in test_gpu.py")
    r = _only(_run(SHARED_CASES / "side_stream.py"))
    assert r.status is Status.ERROR
    assert r.message.startswith("raised: ") and "CUDA" in r.message.splitlines()[0]
    assert "torch.cuda.Stream()" in r.message  # the traceback points at the submission's line


# --- adversarial cases written for fp4bench -------------------------------------------------------------


def test_late_side_write_is_honest_on_the_cpu():
    """No streams on the CPU: the GPU-only cheat computes honestly and passes (on the GPU it fails, test_gpu)."""
    if torch.cuda.is_available():
        pytest.skip("GPU behaviour is asserted in test_gpu.py")
    r = _only(_run(ADVERSARIAL / "late_side_write.py", "benchmark"))
    assert r.status is Status.PASS, r.message


def test_samples_measured_before_a_failure_are_kept():
    r = _only(_run(ADVERSARIAL / "wrong_after_two_samples.py", "benchmark"))
    assert r.status is Status.FAIL
    assert r.message.startswith("call 1 of 15: output 0: ")
    assert len(r.samples_ns) == 2 and r.stats.runs == 2
    assert r.calls_checked == 1 + 15 + 2 * 15


@pytest.mark.parametrize("name", ["background_precompute.py", "thread_per_sample.py"])
def test_background_threads_fail_the_case(name):
    """A thread can find freshly drawn inputs through the garbage collector and compute them before the timed
    window: alive when timing starts (started at import) or when a call returns (started by the call)."""
    r = _only(_run(ADVERSARIAL / name, "benchmark"))
    # The thread races the worker: on a loaded 2-core machine libtorch_cpu segfaulted in that thread twice in about
    # twenty runs (dmesg, 2026-12-02), and once the references gc.get_objects() handed it made CPython's resize of a
    # tuple the worker was building raise SystemError (_PyTuple_Resize needs the only reference). A worker that
    # dies fails the case as a crash.
    if r.status is Status.CRASH:
        assert "was killed by SIGSEGV" in r.message or "SystemError: " in r.message, r.message
        return
    assert r.status is Status.FAIL, r.message
    # a live thread is named with its tid; one that already exited shows as the process clock's residue; a thread
    # that keyed its precomputed outputs by pointer (the inputs sit at the same addresses every sample) may return
    # stale ones first, and then the values fail
    assert " elements differ " in r.message or re.match(
        r"work outside the timed window: (thread '[^']+' \(pid \d+, tid \d+\)|threads that have since exited) "
        r"used (\d+\.\d ms|\d+ us)", r.message), r.message


def test_joined_side_stream_control_passes():
    r = _only(_run(ADVERSARIAL / "joined_side_stream.py", "benchmark"))
    assert r.status is Status.PASS, r.message
    assert r.calls_checked == 1 + 15 + 15 * r.stats.runs + (15 if torch.cuda.is_available() else 0)


def test_lazy_tensor_subclass_rejected():
    r = _only(_run(ADVERSARIAL / "lazy_output.py"))
    assert r.status is Status.FAIL
    assert r.message.startswith("output 0: expected torch.Tensor, got submission.LazyTensor (a tensor subclass)")


@pytest.mark.parametrize("name", ["module_tamper.py", "gc_flush.py"])
def test_tampering_with_the_workers_objects_gains_nothing(name):
    """Rewriting the worker's timing module or its objects changes nothing the parent judges: every sample's
    window agreed with the parent's bracket (a pass is that), and the run records the margin it was held to."""
    rec = _run(ADVERSARIAL / name, "benchmark")
    assert _only(rec).status is Status.PASS, _only(rec).message
    assert rec.bracket.startswith("time bracket: the worker's window is accepted when"), rec.bracket


def test_content_replay_gets_no_hits(tmp_path, monkeypatch):
    log = tmp_path / "replay.log"
    monkeypatch.setenv("REPLAY_LOG", str(log))
    r = _only(_run(ADVERSARIAL / "content_replay.py", "benchmark", sandbox=Sandbox(writable=(tmp_path,))))
    hits, distinct = map(int, log.read_text().split())
    assert r.status is Status.PASS and hits == 0
    assert distinct == 1 + 15 + 15 * r.stats.runs  # every input it ever saw was new


def test_deferred_work_fails():
    r = _only(_run(ADVERSARIAL / "deferred.py", "benchmark"))
    assert r.status is Status.FAIL and " elements differ " in r.message


def test_only_first_calls_correct_fails_in_timed_samples():
    r = _only(_run(ADVERSARIAL / "first_calls_correct.py", "benchmark"))
    assert r.status is Status.FAIL
    # right for the correctness call and the first two warm-up calls: warm-up outputs are checked too
    assert r.message.startswith("call 3 of 15: output 0: ")
    assert r.samples_ns == ()


def test_out_of_memory_fails_only_its_case():
    rec = _run(ADVERSARIAL / "oom.py", shapes=TWO_CASES)
    for r in rec.cases:
        assert r.status is Status.ERROR and "raised: " in r.message


def test_leaderboard_stops_at_first_failing_shape():
    rec = _run(ADVERSARIAL / "first_calls_correct.py", "leaderboard", TWO_CASES)
    assert rec.cases[0].status is Status.FAIL
    assert rec.cases[1].status is Status.SKIPPED and "an earlier shape did not pass" in rec.cases[1].message


def test_secret_seed_changes_every_input(tmp_path, monkeypatch):
    log = tmp_path / "replay.log"
    monkeypatch.setenv("REPLAY_LOG", str(log))
    monkeypatch.setenv("POPCORN_SEED", "should-not-be-seen")  # the worker never sees it
    rec = _run(ADVERSARIAL / "content_replay.py", secret=12345, sandbox=Sandbox(writable=(tmp_path,)))
    assert _only(rec).status is Status.PASS and rec.secret_seed == 12345


def test_unmet_requirement_is_skipped_with_reason(tmp_path):
    f = tmp_path / "needs_b200.py"
    f.write_text("#!FP4BENCH requires sm_100a\nraise SystemExit('must never be imported')\n")
    r = _only(_run(f))
    assert r.status is Status.SKIPPED and r.message.startswith("needs sm_100a; this ")


def _reply(elapsed_ns: float):
    from harness.protocol import Container, RunReply
    return RunReply(elapsed_ns, 15, (Container("builtins.list", True),) * 15, ((),) * 15, ((),) * 15)


def test_time_below_the_physical_floor_fails_with_both_numbers(monkeypatch):
    """A reported time below max(FLOPs at the fastest MMA, bytes at HBM bandwidth) of the GPU is impossible:
    the case fails naming the time, the floor and the peaks it came from (here the H200's, a benchmark shape)."""
    from harness.parent.runner import CaseFailed, CaseRunner, Observer, Session
    from problems.nvfp4_group_gemm.cost import peaks_for, sol_ns
    from problems.nvfp4_group_gemm.spec import load_shapes

    case = load_shapes("benchmarks").cases[3]  # g2_n4096_k1536
    runner = CaseRunner(Session(read_variant(SHARED_CASES / "honest_torch.py"), FAST),
                        RunOptions("benchmark", settings=FAST), Observer(), torch.device("cpu"))
    runner.peaks = peaks_for("NVIDIA H200")
    floor = sol_ns(case, runner.peaks, floor=True)
    assert 2_000 < floor < 4_000  # 2.09e10 FLOP at 1979 TFLOP/s, or its bytes at 4.8 TB/s
    def answer(ns: float):  # what _call leaves: the reply, and the sample's time the bracket lets it keep
        def call(case, seeds, kind, then=None):
            runner.charged_ns = ns
            return _reply(ns)
        return call

    monkeypatch.setattr(runner, "_call", answer(15 * 1000.0))
    with pytest.raises(CaseFailed) as failed:
        runner.sample(0, case, case.seed, 0)
    assert failed.value.status is Status.FAIL
    assert failed.value.message == (f"impossible time: 1000 ns per call is below this GPU's physical floor of "
                                    f"{floor:.0f} ns (H200: FLOPs at 1978.9 TFLOP/s, bytes at 4.8 TB/s)")
    monkeypatch.setattr(runner, "_call", answer(15 * (floor + 1)))
    assert runner.sample(0, case, case.seed, 0) == pytest.approx(floor + 1)


@pytest.mark.parametrize("times, runs", [([9e6, 5e6, 1.02e6, 1e6, 1e6], 4), ([5e6] * 5, 2), ([9e6, 1e6] * 8, 6)])
def test_warmup_runs_until_two_samples_agree(monkeypatch, times, runs):
    """CPU timings start 10-100x slow: warm-up goes on until two samples in a row are within warmup_settle (10 %),
    at most warmup_max (6 here) samples, each on its own fresh seeds."""
    from harness.parent.runner import CaseRunner, Observer, Session
    from harness.protocol import RunReply

    settings = Settings(warmup_samples=1, warmup_max=6, warmup_settle=0.1)
    runner = CaseRunner(Session(read_variant(SHARED_CASES / "honest_torch.py"), settings),
                        RunOptions("benchmark", settings=settings), Observer(), torch.device("cpu"))
    seen, it = [], iter(times)
    monkeypatch.setattr(runner, "_call", lambda case, seeds, kind, then=None: seen.append(seeds[0]) or RunReply(
        next(it), 15, (), (), ()))
    assert runner.warmup(TWO_GROUPS.cases[0], 7) == runs
    assert len(set(seen)) == runs


def test_bom_header_is_skipped_exactly_as_without_the_mark(tmp_path):
    """bom_header.py: a B200-only file saved with a UTF-8 byte-order mark before its `#!` headers. The mark must
    not hide them: same headers, same skip and reason as the same file without it (its kernel never runs)."""
    with_bom = SHARED_CASES / "bom_header.py"
    assert with_bom.read_bytes().startswith(b"\xef\xbb\xbf#!POPCORN")
    without = tmp_path / "bom_header.py"
    without.write_bytes(with_bom.read_bytes()[3:])
    read = read_variant(with_bom)
    assert (read.requires.text, read.popcorn) == ("sm_100a", {"leaderboard": "nvfp4_group_gemm", "gpu": "B200"})
    assert (read.requires, read.popcorn) == (read_variant(without).requires, read_variant(without).popcorn)
    rec, plain = _run(with_bom, shapes=TWO_CASES), _run(without, shapes=TWO_CASES)
    assert [c.status for c in rec.cases] == [Status.SKIPPED, Status.SKIPPED]
    assert [c.message for c in rec.cases] == [c.message for c in plain.cases]
    assert rec.cases[0].message.startswith("needs sm_100a; this ")


def test_subnormal_ftz_passes_official_data_and_fails_full_range():
    """subnormal_ftz.py flushes subnormal e4m3fn scales to zero. The official scales are 1 or 2, so it passes;
    full-range data draws subnormal scales (one in 16), so its outputs differ and the check names them."""
    if torch.cuda.is_available():
        pytest.skip("the case indexes its CPU decode table with the inputs' device tensors: it runs on the CPU only")
    official = _run(SHARED_CASES / "subnormal_ftz.py", shapes=TWO_CASES)
    assert [c.status for c in official.cases] == [Status.PASS, Status.PASS]
    full = _run(SHARED_CASES / "subnormal_ftz.py", shapes=TWO_CASES, data="full-range")
    assert [c.status for c in full.cases] == [Status.FAIL, Status.FAIL]
    for r in full.cases:
        assert r.message.startswith("output ") and " elements differ (rtol=0.001, atol=0.001); first: [" in r.message
    honest = _run(SHARED_CASES / "honest_torch.py", shapes=TWO_CASES, data="full-range")  # the control passes
    assert [c.status for c in honest.cases] == [Status.PASS, Status.PASS]


def test_a_kernel_time_outside_the_floor_or_far_above_the_mean_is_not_kept(monkeypatch):
    """The kernel-time pass's figure is the worker's claim: kept between the GPU's floor and 1.5x the measured
    mean, else dropped with a note (y_kernel_time_forged scales it by 1/1000)."""
    from dataclasses import replace as with_

    from harness.parent.runner import CaseRunner, Observer, Session
    from problems.nvfp4_group_gemm.cost import peaks_for, sol_ns
    from problems.nvfp4_group_gemm.spec import load_shapes

    case = load_shapes("benchmarks").cases[3]
    runner = CaseRunner(Session(read_variant(SHARED_CASES / "honest_torch.py"), FAST),
                        RunOptions("benchmark", settings=FAST), Observer(), torch.device("cpu"))
    runner.device, runner.peaks = torch.device("cuda"), peaks_for("NVIDIA H200")  # judged as on an H200
    floor = sol_ns(case, runner.peaks, floor=True)
    for claimed, kept in ((20_000.0, True), (floor / 1000, False), (31_000.0, False)):
        monkeypatch.setattr(runner, "_call", lambda *a, ns=claimed, **k: with_(_reply(0.0), kernel_ns=ns))
        assert (runner.kernel_time(case, case.seed, 3, mean_ns=20_000.0) == claimed) is kept
    assert [n for n in runner.notes if n.startswith("a kernel time the worker reported")] == [
        f"a kernel time the worker reported ({floor / 1000:.0f} ns per call) lies outside this GPU's floor "
        f"({floor:.0f} ns) to 1.5 x the measured mean: not kept",
        "a kernel time the worker reported (31000 ns per call) lies outside this GPU's floor "
        f"({floor:.0f} ns) to 1.5 x the measured mean: not kept"]
