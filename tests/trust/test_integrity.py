"""The timed window out of the submission's reach (issue "Integrity"): every shared case of the kind, and fixtures
that make each kind checkable, end to end through the harness on this machine. GPU forms are in test_gpu.py."""
from __future__ import annotations

import re

import pytest
from tests.conftest import ADVERSARIAL, SHARED_CASES
from tests.trust.test_cases import FAST, TWO_CASES, _only, _run

from harness.parent.sandbox import Sandbox
from harness.results.record import Status


def test_frame_rewind_cannot_shorten_the_window():
    rec = _run(SHARED_CASES / "frame_rewind.py", "benchmark")
    assert _only(rec).status is Status.PASS and rec.window == "native"


def test_rewriting_every_time_like_local_leaves_the_real_time():
    """Each call sleeps 3 ms then rewrites every frame local near "now": the reported time stays >= 3 ms."""
    r = _only(_run(ADVERSARIAL / "frame_rewind_sleep.py", "benchmark"))
    assert r.status is Status.PASS, r.message
    assert min(r.samples_ns) >= 3e6


def test_wrapping_the_generators_gains_nothing(tmp_path, monkeypatch):
    log = tmp_path / "wrap.log"
    monkeypatch.setenv("WRAP_LOG", str(log))
    r = _only(_run(ADVERSARIAL / "gen_wrap_logged.py", "benchmark", sandbox=Sandbox(writable=(tmp_path,))))
    assert r.status is Status.PASS and log.read_text() == "0"  # the worker never draws: nothing to precompute


def test_gen_precompute_passes_with_nothing_precomputed():
    assert _only(_run(SHARED_CASES / "gen_precompute.py", "benchmark")).status is Status.PASS


def test_lazy_list_is_not_a_list():
    r = _only(_run(SHARED_CASES / "lazy_list.py"))
    assert (r.status, r.message) == (
        Status.FAIL, "expected a list of 2 tensors (output_t), got a subclass of list named builtins.list")


@pytest.mark.parametrize("name", ["raw_thread.py", "raw_thread_idle.py"])
def test_threads_from_thread_module_are_seen_by_the_os(name):
    r = _only(_run(SHARED_CASES / name, "benchmark"))
    assert r.status is Status.FAIL
    assert r.message.startswith("work outside the timed window: thread '"), r.message
    assert " of CPU between samples (read by the parent from /proc)" in r.message
    # one clause per thread, in a unit that shows it
    tids = re.findall(r"\(pid \d+, tid (\d+)\) used", r.message)
    assert len(tids) == len(set(tids)) and " used 0.0 ms" not in r.message, r.message


@pytest.mark.parametrize("name, named", [("hook_precompute.py", "gc callback"),
                                         ("alarm_precompute.py", "signal handler for SIGALRM")])
def test_hooks_that_run_code_in_our_frames_fail_the_case(name, named):
    r = _only(_run(ADVERSARIAL / name, "benchmark"))
    assert r.status is Status.FAIL
    assert r.message.startswith("the submission left code that runs outside its calls: "), r.message
    assert named in r.message


def test_audit_hooks_are_refused_so_nothing_is_precomputed(tmp_path):
    """The guard refuses sys.addaudithook (armed before the import): the hook never runs, the case passes with a
    note (torch.compile adds one too, so refusing must not fail an honest submission)."""
    rec = _run(ADVERSARIAL / "audit_precompute.py", "benchmark")
    assert _only(rec).status is Status.PASS, _only(rec).message
    assert "sys.addaudithook refused (it never ran)" in rec.notes


@pytest.mark.slow
def test_compiled_honest_passes_with_a_cold_inductor_cache(tmp_path, monkeypatch):
    """torch.compile leaves idle compile-pool threads: idle threads are no finding (fresh cache: they compile)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    slow = FAST.with_timeout(600)
    r = _only(_run(SHARED_CASES / "compiled_honest.py", "benchmark", settings=slow))
    assert r.status is Status.PASS, r.message


def test_exception_whose_str_raises_is_reported_and_the_worker_survives():
    rec = _run(SHARED_CASES / "bad_str_exc.py", shapes=TWO_CASES)
    for r in rec.cases:
        assert r.status is Status.ERROR
        assert r.message.startswith("raised: KernelError: <str() of the exception raised UnicodeDecodeError>")


def test_broadcast_blowup_is_judged_by_its_shape():
    r = _only(_run(SHARED_CASES / "broadcast_blowup.py"))
    assert (r.status, r.message) == (Status.FAIL, "output 0: shape [64, 128, 128] (expected [64, 128, 1])")


def test_a_time_forged_on_the_reply_path_fails_on_the_parents_bracket():
    """The worker's reply is a claim: dividing every reported window by 8 (the encoder replaced through
    sys.modules) disagrees with the bracket the parent took itself, sample after sample."""
    r = _only(_run(ADVERSARIAL / "reply_forge.py", "benchmark"))
    assert r.status is Status.FAIL, r.message
    assert re.match(r"the time the worker reported disagrees with the parent's bracket in \d+ of \d+ samples "
                    r"\(the last: window ", r.message), r.message
