"""harness.worker.timing.measure on the CPU: a sample per pass over the inputs, the stopping rule asked with the
per-call times so far, per-call times only when asked, and one-line errors for an empty loop."""
from __future__ import annotations

import pytest
import torch

from harness.results.stats import StoppingRule
from harness.worker import timing
from harness.worker.timing import Sample, measure

#: These assert the CPU clock's figures; with CUDA, measure takes the event path (run by the benchmark scripts).
cpu_path = pytest.mark.skipif(torch.cuda.is_available(), reason="measure takes the CUDA path here")


@cpu_path
def test_count_runs_every_input_once_per_sample_in_order():
    seen = []
    samples = measure(seen.append, ["a", "b", "c"], 4)
    assert seen == ["a", "b", "c"] * 4
    assert [s.calls for s in samples] == [3, 3, 3, 3]
    assert all(s.elapsed_ns > 0 and s.host_ns == s.elapsed_ns and s.call_ns == () for s in samples)


@cpu_path
def test_per_call_times_add_up_to_the_window():
    (s,) = measure(lambda x: sum(range(x)), [1000, 2000], 1, per_call=True)
    assert len(s.call_ns) == 2 and all(t > 0 for t in s.call_ns)
    assert sum(s.call_ns) == s.elapsed_ns


def test_stopping_rule_sees_per_call_times_and_stops_at_max_runs():
    asked = []

    class Rule:
        def is_finished(self, samples_ns, wall_ns):
            asked.append((list(samples_ns), wall_ns))
            return len(samples_ns) == 3

    samples = measure(lambda x: None, [1, 2], Rule())
    assert len(samples) == 3 and [len(a) for a, _ in asked] == [1, 2, 3]
    assert asked[-1][0] == [s.per_call_ns for s in samples] and asked[-1][1] > 0
    assert len(measure(lambda x: None, [1], StoppingRule(min_runs=1, min_time_ns=0, max_rel_err=0.0,
                                                         budget_ns=1e12, max_wall_ns=1e12, max_runs=5))) == 5


def test_per_call_ns_is_the_window_over_the_calls():
    assert Sample(calls=4, elapsed_ns=1000.0, host_ns=900.0, call_ns=()).per_call_ns == 250.0


@pytest.mark.parametrize(("inputs", "stop", "message"), [([], 1, "no inputs"), ([1], 0, "at least 1 sample")])
def test_empty_loops_are_refused(inputs, stop, message):
    with pytest.raises(ValueError, match=message):
        measure(lambda x: None, inputs, stop)


@pytest.mark.parametrize("intervals, busy", [
    ([], 0.0),
    ([(0.0, 10.0)], 10.0),
    ([(0.0, 10.0), (20.0, 25.0)], 15.0),              # apart: the sum
    ([(0.0, 10.0), (4.0, 12.0)], 12.0),               # the next kernel resident before the last ends (PDL)
    ([(4.0, 12.0), (0.0, 10.0), (1.0, 2.0)], 12.0),   # any order; one inside another counts once
    ([(0.0, 10.0), (10.0, 15.0)], 15.0),              # touching
    ([(5.0, 5.0), (7.0, 6.0)], 0.0),                  # empty and reversed intervals add nothing
])
def test_busy_time_is_the_union_of_the_intervals(intervals, busy):
    assert timing.busy_us(intervals) == busy


def test_run_window_orders_the_gate_around_the_marks():
    """The bracket's flags on the worker's stream: ``ready`` and the wait for ``go`` before the start mark,
    ``end_calls`` right behind the end mark (before any host work of the worker), ``end_copy`` after the copy of
    the outputs; the stream watch's queries come last, outside the bracket."""
    order = []

    class Window:
        def run_calls(self, kernel, inputs, stream):
            order.append("start mark")
            outputs = [kernel(x) for x in inputs]
            order.append("end mark")
            return outputs

        def elapsed_ns(self):
            return 5.0

    class Gate:
        def open(self, stream):
            order.append("ready, wait go")

        def calls_done(self, stream):
            order.append("end_calls")

        def copied(self, stream):
            order.append("end_copy")

    class Watch:
        def mark_pending(self):
            order.append("watch")
            return []

        def late(self, marks, window, elapsed):
            return 0

    result = timing.run_window(Window(), lambda x: order.append(f"call {x}") or x, [1, 2],
                               lambda outputs: order.append("copy"), cuda=False, flush=lambda: order.append("flush"),
                               watch=Watch(), gate=Gate())
    assert order == ["flush", "ready, wait go", "start mark", "call 1", "call 2", "end mark", "end_calls", "copy",
                     "end_copy", "watch"]
    assert result.outputs == [1, 2] and result.elapsed_ns == 5.0 and result.late_streams == 0


def test_a_stream_is_late_only_when_its_work_outlasts_both_the_end_mark_and_its_clock():
    """StreamWatch.late with stamped times (ms after the start mark; window end 2.0): a joined stream whose mark
    was taken in after a context switch (mark = clock = 2.3) is not late; one whose work ran 1 ms past its clock is;
    one that finished inside the window (mark 1.5, clock 0.4: the GPU behind the host) is not."""
    class Stamp:
        def __init__(self, ms):
            self.cuda_event = ms

    class Window:
        @staticmethod
        def ms_after_start(event):
            return event

    watch = timing.StreamWatch.__new__(timing.StreamWatch)
    pairs = {"joined, switched": (2.3, 2.3), "late write": (2.3, 3.3), "inside": (0.4, 1.5)}
    got = {k: watch.late([(Stamp(c), Stamp(m))], Window(), 2.0e6) for k, (c, m) in pairs.items()}
    assert got == {"joined, switched": 0, "late write": 1, "inside": 0}


@pytest.mark.gpu
def test_l2_flush_writes_what_the_official_clear_writes():
    """reference-kernels' clear_l2_cache fills 256 MiB; the flush writes that much, and at least the whole L2."""
    flush = timing.L2Flush(torch.device("cuda", 0), limit=False, lines=False)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert flush.bytes == max(l2, 256 * 2**20) == flush._buf.numel()
    flush()
    torch.cuda.synchronize()
    assert int(flush._buf[-1]) == 0
