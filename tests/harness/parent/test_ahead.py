"""The next sample prepared ahead (harness.parent.case_runner): while the worker finishes a timed request (after its
``Closed``), the parent prepares the next sample in the other host slot; every output is still checked against
expected outputs computed from the parent's own copy."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tests.conftest import SHARED_CASES

from harness import protocol as P
from harness.parent.bracket import CALIBRATION_WINDOWS
from harness.parent.case_runner import CaseRunner, Observer, RunOptions
from harness.parent.judge import CaseFailed
from harness.parent.registry import read_variant
from harness.parent.runner import run
from harness.parent.samples import ArenaSample
from harness.parent.session import Session
from harness.parent.settings import Settings
from harness.results.record import Status
from problems.nvfp4_group_gemm.sample_buffers import Layout
from problems.nvfp4_group_gemm.spec import Case, ShapeSet

CASE = Case((64, 40), (128, 256), (256, 512), 2, 7)
SETTINGS = Settings(import_s=60, first_call_s=60, call_s=60, calls_per_sample=15, warmup_samples=1, warmup_max=1,
                    min_runs=5, min_time_ms=1, max_runs=5)
HONEST = SHARED_CASES / "honest_torch.py"


def test_timed_samples_are_prepared_ahead_in_alternating_host_slots(monkeypatch):
    """Five timed samples: each timed request asks for ``Closed`` and has the next sample prepared ahead (the last
    one's goes unused on a CPU, where there is no kernel-time pass); requests alternate between the two host
    slots; only the correctness call, the warm-up and the first timed sample are prepared between requests. All
    outputs pass the check."""
    requests, ahead, between = [], [], []
    session_run, prepare_ahead, ready = Session.run, CaseRunner._prepare_ahead, CaseRunner._ready

    def record_run(self, req, sample, on_closed=None):
        requests.append(req)
        return session_run(self, req, sample, on_closed)

    monkeypatch.setattr(Session, "run", record_run)
    monkeypatch.setattr(CaseRunner, "_prepare_ahead", lambda self, *a: ahead.append(a[1]) or prepare_ahead(self, *a))
    monkeypatch.setattr(CaseRunner, "_ready", lambda self, case, seeds, official: between.append(
        self._ahead is None or self._ahead[0][1] != tuple(seeds)) or ready(self, case, seeds, official))
    rec = run(read_variant(HONEST), ShapeSet("t", (CASE,)), RunOptions("benchmark", settings=SETTINGS))
    result = rec.cases[0]
    assert result.status is Status.PASS and len(result.samples_ns) == 5
    assert [r.kind for r in requests] == ["check", "time"] + ["time"] * 5
    timed = requests[2:]
    slot = Layout.of(CASE, 15).host_slot_bytes
    assert [r.ahead for r in requests] == [False, False] + [True] * 5
    assert [r.host_offset for r in timed] == [0, slot, 0, slot, 0]
    assert len(ahead) == 5 and ahead[:4] == [list(r) for r in _seeds_of(requests[3:], rec.secret_seed)]
    assert between == [True, True, True, False, False, False, False]


def _seeds_of(reqs, secret):
    from harness.parent import seeds as seedlib
    case_seed = seedlib.case_seed(CASE.seed, secret)
    return [tuple(seedlib.sample_seeds(case_seed, i + 1, 15)) for i in range(len(reqs))]


def test_a_sample_prepared_ahead_serves_only_its_own_seeds(monkeypatch):
    """_ready takes the sample prepared ahead only for the same case, seeds and draw order; anything else is
    prepared afresh (and the one prepared ahead is dropped)."""
    runner = CaseRunner(Session(read_variant(HONEST), SETTINGS), RunOptions("benchmark", settings=SETTINGS),
                        Observer(), torch.device("cpu"))
    prepared = []
    monkeypatch.setattr(runner.session, "buffers_for", lambda layout: runner.session.shared)
    monkeypatch.setattr(ArenaSample, "prepare", lambda self, seeds, official, publish=True: prepared.append(tuple(seeds)))
    sentinel = object()
    for key, seeds, official in [((CASE, (1, 2), False), [1, 2], True), ((CASE, (1, 2), False), [1, 3], False),
                                 ((replace(CASE, seed=8), (1, 2), False), [1, 2], False)]:
        runner._ahead = (key, sentinel)
        assert runner._ready(CASE, seeds, official) is not sentinel and runner._ahead is None
    runner._ahead = ((CASE, (1, 2), False), sentinel)
    assert runner._ready(CASE, [1, 2], False) is sentinel
    assert prepared == [(1, 2), (1, 3), (1, 2)]


@pytest.fixture()
def session():
    s = Session(read_variant(HONEST), SETTINGS)
    s.buffers_for(Layout.of(CASE, 15))
    s.sample = ArenaSample(CASE, 15, "official", s.device, s.shared)
    s.sample.prepare(list(range(15)), False)
    yield s
    s.release()


def _run_req(**kw) -> P.Run:
    return P.Run(tuple(zip(CASE.m, CASE.n, CASE.k)), 15, **{"kind": "time", "watch": False, **kw})


def test_the_worker_refuses_a_host_offset_outside_its_buffer(session):
    """A host offset that is not 4096-aligned, or leaves too few bytes, is refused in one line naming both."""
    need = Layout.of(CASE, 15).host_bytes
    total = session.shared.buffers["host"].nbytes
    for offset in (100, total):
        with pytest.raises(CaseFailed) as failed:
            session.run(_run_req(host_offset=offset), session.sample)
        assert failed.value.message.splitlines()[0] == (
            f"harness error: the worker refused the request: Run.host_offset: expected a 4096-byte multiple with {need} bytes after it in "
            f"the {total}-byte host buffer, got {offset}")


def test_what_the_closed_callback_raises_comes_after_the_reply(session):
    """on_closed runs once, after the window and before the reply; what it raises is raised once the reply is
    read, so the next request finds the channel in order."""
    seen = []

    def boom():
        seen.append("closed")
        raise RuntimeError("no memory for the next sample")

    with pytest.raises(RuntimeError, match="^no memory for the next sample$"):
        session.run(_run_req(ahead=True), session.sample, boom)
    assert seen == ["closed"]
    reply, measured, outside = session.run(_run_req(ahead=True), session.sample, lambda: seen.append("again"))
    assert isinstance(reply, P.RunReply) and reply.calls == 15 and seen == ["closed", "again"]
    assert measured.bracket_ns >= reply.elapsed_ns > 0 and outside is None
    assert session.run(_run_req(kind="check"), session.sample)[0].calls == 15 and seen == ["closed", "again"]


def test_an_untimed_request_gets_no_closed_and_no_bracket(session):
    """Only a timed request runs inside the parent's bracket and is answered ``Closed``: on_closed never runs."""
    reply, measured, outside = session.run(_run_req(kind="check"), session.sample,
                                           lambda: pytest.fail("Closed for an untimed request"))
    assert reply.calls == 15 and measured is None and outside is None


def test_start_calibrates_then_load_sends_load_and_waits_for_its_reply(monkeypatch):
    """Session.start spawns the worker and sends its first empty window without reading a reply; load() reads it,
    runs the other calibration windows, then sends Load and reads its reply (once); a second start or load while
    the worker is up sends nothing. The profiler flag travels only on CUDA."""
    s = Session(read_variant(HONEST), SETTINGS, profiler=True)
    assert s.profiler is False  # this machine's default device is the CPU: no kernel-time passes
    try:
        sent, received = [], []
        s.start()
        real_send, real_receive = s.proc.send, s._receive
        monkeypatch.setattr(s.proc, "send", lambda msg, fds=(): (sent.append(msg), real_send(msg, fds)))
        monkeypatch.setattr(s, "_receive", lambda t, expect: (received.append(expect), real_receive(t, expect))[1])
        assert s._loading is not None and received == []
        s.load()
        s.start()
        s.load()
        assert [type(m).__name__ for m in sent] == ["Calibrate"] * CALIBRATION_WINDOWS + ["Load"]
        assert received == [(P.Closed,)] * (CALIBRATION_WINDOWS + 1) + [(P.Loaded, P.Failed)] and s._loading is None
        assert s.bracket.margin is not None and s.bracket.margin.windows == CALIBRATION_WINDOWS - 1
    finally:
        s.release()


@pytest.mark.parametrize("mode, counts", [("test", [1]), ("leaderboard", [1, 15])])
def test_the_reference_is_warmed_for_every_sample_size_while_the_worker_starts(monkeypatch, mode, counts):
    """run() hands the plug's reference warm_up (SampleBuffers.warm_up) every case's K with each sample size the
    mode checks (1 input for a correctness call, calls_per_sample for warm-up and timed samples) before it waits
    for the worker."""
    from harness import plugs
    from harness.parent import runner

    other = Case((128,), (256,), (1024,), 1, 3)
    seen = []
    plug = plugs.get("nvfp4_group_gemm")
    monkeypatch.setattr(plug, "sample_buffers", replace(
        plug.sample_buffers, warm_up=lambda cases, calls, device: seen.append(([(c.k, n) for c in cases
                                                                                for n in calls], device.type))))
    real_load = runner.load_failure
    monkeypatch.setattr(runner, "load_failure", lambda s: (seen.append("load"), real_load(s))[1])
    record = run(read_variant(HONEST), ShapeSet("two", (CASE, other)),
                 RunOptions(mode, settings=SETTINGS))
    assert all(c.status == Status.PASS for c in record.cases)
    kinds = [(c.k, n) for c in (CASE, other) for n in counts]
    assert seen == [(kinds, "cpu"), "load"]
