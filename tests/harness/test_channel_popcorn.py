"""The result channel frames claims and skips stray bytes; the POPCORN key stream and exit codes."""
import os

import pytest

from harness.channel import MAGIC, MAX_HEADER, ChannelClosed, ChannelTimeout, Reader, Writer, encode
from harness.protocol import ExitCode
from harness.report.popcorn import lines, write_stream
from harness.results.record import CaseResult, Environment, RunRecord, Stats, Status, SubmissionInfo, exit_code
from problems.nvfp4_group_gemm.spec import Case


def test_channel_skips_strays_and_delivers_any_frame_as_a_claim():
    """No key: a frame is a claim whoever wrote it (the parent checks what decides a verdict itself); bytes that are
    not a frame, and a header that is not a JSON object, are skipped and counted."""
    r, w = os.pipe()
    writer = Writer(w)
    os.write(w, b"check: pass\nbenchmark.0.mean: 1.0\n")
    writer.send({"ok": True, "n": 1}, b"\x01\x02")
    os.write(w, MAGIC + (3).to_bytes(8, "little") + (0).to_bytes(8, "little") + b"[1]")  # a frame, not an object
    os.write(w, encode({"ok": True, "forged": True}))
    writer.send({"ok": True, "n": 2})
    os.close(w)
    reader = Reader(r)
    assert reader.receive(2) == ({"ok": True, "n": 1}, b"\x01\x02")
    assert reader.receive(2) == ({"ok": True, "forged": True}, b"")
    assert reader.receive(2) == ({"ok": True, "n": 2}, b"")
    assert reader.stray_bytes >= len(b"check: pass\nbenchmark.0.mean: 1.0\n") + 1
    with pytest.raises(ChannelClosed):
        reader.receive(2)


def test_channel_large_frames_whole_and_an_oversized_header_cut():
    """Payloads larger than the pipe and the read size arrive whole; a header over MAX_HEADER (a 17 MB exception
    message) is read through and reported by its size, and the frame after it is still found."""
    import threading

    r, w = os.pipe()
    big = os.urandom(1 << 20) * 9
    huge = {"msg": "Failed", "message": "x" * (MAX_HEADER + 10)}

    def write():
        writer = Writer(w)
        writer.send({"n": 1}, [big[:5 << 20], big[5 << 20:]])
        writer.send(huge)
        writer.send({"n": 2}, big)
        os.close(w)

    thread = threading.Thread(target=write)
    thread.start()
    reader = Reader(r)
    header, payload = reader.receive(30)
    assert header == {"n": 1} and payload == big
    header, payload = reader.receive(30)
    assert header["msg"] == "Oversized" and header["bytes"] > MAX_HEADER and payload == b""
    header, payload = reader.receive(30)
    assert header == {"n": 2} and payload == big
    thread.join()
    with pytest.raises(ChannelClosed):
        reader.receive(2)


def test_channel_timeout():
    r, w = os.pipe()
    with pytest.raises(ChannelTimeout):
        Reader(r).receive(0.2)
    os.close(w)


def _record(mode, statuses):
    env = Environment("cpu", "none", "none", "t", "t", "c", "3", "h", "cpu-monotonic")
    case = Case((64,), (128,), (256,), 1, 1)
    cases = tuple(CaseResult(case, s, "boom\nmore" if s is not Status.PASS else "",
                             (1.0, 3.0), Stats(2, 2.0, 1.4, 1.0, 1.0, 3.0)) for s in statuses)
    return RunRecord("r", "t", mode, "official", "x", None, SubmissionInfo("s", "p", "h"), env, cases, True)


def test_error_line_names_a_timeout_or_crash_once():
    """A failure's or an error's message says its own kind ("raised: ..."); a timeout's and a crash's get the
    word, which their message may leave out."""
    out = lines(_record("test", [Status.ERROR, Status.TIMEOUT, Status.CRASH]))
    assert [x for x in out if ".error: " in x] == ["test.0.error: boom", "test.1.error: timeout: boom",
                                                   "test.2.error: crash: boom"]


def test_stream_keys():
    out = lines(_record("benchmark", [Status.PASS, Status.FAIL]))
    assert out[0] == "benchmark-count: 2"
    assert "benchmark.0.spec: m: [64]; n: [128]; k: [256]; g: 1; seed: 1" in out
    assert "benchmark.0.mean: 2.0" in out and "benchmark.0.runs: 2" in out
    assert "benchmark.0.status: pass" in out and "benchmark.1.status: fail" in out
    assert "benchmark.1.error: boom" in out and out[-1] == "check: fail"
    test_out = lines(_record("test", [Status.PASS]))
    assert test_out == ["test-count: 1", "test.0.spec: m: [64]; n: [128]; k: [256]; g: 1; seed: 1",
                        "test.0.status: pass", "check: pass"]


def test_exit_codes():
    assert exit_code(_record("test", [Status.PASS, Status.SKIPPED])) is ExitCode.OK
    assert exit_code(_record("test", [Status.PASS, Status.FAIL])) == 112
    assert exit_code(_record("test", [Status.FAIL, Status.TIMEOUT])) == 114


def test_write_stream_to_fd():
    r, w = os.pipe()
    assert write_stream(_record("test", [Status.PASS]), {"POPCORN_FD": str(w)})
    os.close(w)
    assert os.read(r, 1000).decode().endswith("check: pass\n")
    assert not write_stream(_record("test", [Status.PASS]), {})
