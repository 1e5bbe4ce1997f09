"""A worker's stdout and stderr are kept bounded (harness.parent.capture): a 50 MiB print flood leaves its first
64 KiB and last 1 MiB in the parent's memory, nothing on disk, and --worker-log and a crash message say what was
cut and keep the last words."""
from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from tests.conftest import SHARED_CASES

from harness.cli.commands import main
from harness.parent.capture import Capture
from harness.parent.process import LOG_BYTES, LOG_HEAD_BYTES
from harness.parent.registry import read_variant
from harness.parent.runner import RunOptions, run
from harness.parent.sandbox import Sandbox
from harness.parent.settings import Settings
from harness.results.record import Status
from problems.nvfp4_group_gemm.spec import Case, ShapeSet

#: 50 MiB of numbered 10-byte lines.
LINES = 5 << 20
FLOOD = f"""
import sys
for start in range(0, {LINES}, 1 << 16):
    sys.stdout.buffer.write(b"".join(b"%09d\\n" % i for i in range(start, min({LINES}, start + (1 << 16)))))
sys.stdout.flush()
"""
ONE = ShapeSet("one", (Case((64,), (128,), (256,), 1, 1),))


def _numbered(first: int, last: int) -> bytes:
    return b"".join(b"%09d\n" % i for i in range(first, last))


def test_a_50_mib_flood_keeps_its_first_64_kib_and_last_mib_and_counts_the_rest():
    assert (LOG_HEAD_BYTES, LOG_BYTES) == (65536, 1048576)
    capture = Capture(LOG_HEAD_BYTES, LOG_BYTES)
    try:
        assert stat.S_ISFIFO(Path(f"/proc/self/fd/{capture.write_fd}").stat().st_mode)  # a pipe, no file
        proc = subprocess.Popen([sys.executable, "-c", FLOOD + "sys.stderr.buffer.write(b'the end\\n')\n"],
                                stdout=capture.write_fd, stderr=capture.write_fd)
        capture.started()
        assert proc.wait(timeout=300) == 0  # never blocked for good on a full pipe
        head, dropped, tail = capture.snapshot()
        assert (len(head), len(tail)) == (65536, 1048576)
        assert len(capture._head) + len(capture._tail) == 65536 + 1048576  # all the parent holds of 50 MiB
        assert dropped == 10 * LINES + len(b"the end\n") - 65536 - 1048576 == 51_314_696
        assert head == _numbered(0, 6554)[:65536]
        assert tail == (_numbered(LINES - 104857, LINES) + b"the end\n")[-1048576:]
    finally:
        capture.close()
    assert capture.snapshot() == (head, dropped, tail)  # kept after close


def test_a_short_output_is_kept_whole_in_order():
    capture = Capture(8, 16)
    try:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; print('abcdefghij'); print('xyz', file=sys.stderr)"],
                                stdout=capture.write_fd, stderr=capture.write_fd)
        capture.started()
        proc.wait(timeout=60)
        head, dropped, tail = capture.snapshot()
        assert (head, dropped, tail) == (b"abcdefgh", 0, b"ij\nxyz\n")
    finally:
        capture.close()


def test_worker_log_of_a_flood_says_how_many_bytes_were_cut(tmp_path):
    sub = tmp_path / "floods.py"
    sub.write_text(f"import sys\nprint('first words', flush=True)\n{FLOOD}\nprint('last words', file=sys.stderr)\n"
                   f"from honest_torch import custom_kernel\n")
    (tmp_path / "honest_torch.py").write_text((SHARED_CASES / "honest_torch.py").read_text())
    log = tmp_path / "worker.log"
    result = CliRunner().invoke(main, ["run", "--submission", str(sub), "--shapes", "m: [64]; n: [128]; k: [256]; "
                                       "g: 1; seed: 1", "--no-store", "--worker-log", str(log), "--timeout", "300"])
    assert result.exit_code == 0, result.output
    data = log.read_bytes()
    header, _, kept = data.partition(b"\n")
    match = re.fullmatch(rb"=== floods: worker pid \d+, exit 0, ended \S+, (\d+) bytes of output, (\d+) bytes "
                         rb"between its first 65536 and its last 1048576 left out ===", header)
    assert match, header
    size, dropped = int(match[1]), int(match[2])
    assert size == 65536 + dropped + 1048576 and size >= 10 * LINES + len(b"first words\nlast words\n")
    head, rest = kept[:65536], kept[65536:]
    assert head.startswith(b"first words\n000000000\n") and not head.endswith(b"\n")
    marker, _, tail = rest.removeprefix(b"\n").partition(b"\n")  # the head ends mid-line: the marker's own line
    assert marker == f"[... {dropped} bytes left out ...]".encode()
    assert len(tail) == 1048576 and tail.endswith(b"%09d\nlast words\n" % (LINES - 1))
    assert len(data) == len(header) + 1 + 65536 + 1 + len(marker) + 1 + 1048576  # all the log got of 50 MiB


def test_a_worker_killed_after_a_flood_names_its_last_words(tmp_path):
    sub = tmp_path / "dies.py"
    sub.write_text(f"import os, signal, sys\n{FLOOD}\n"
                   "def custom_kernel(data):\n"
                   "    sys.stdout.buffer.write(b'x' * (3 << 20))\n"
                   "    sys.stdout.flush()\n"
                   "    print('\\ndying words', file=sys.stderr, flush=True)\n"
                   "    os.kill(os.getpid(), signal.SIGKILL)\n")
    settings = Settings(import_s=300, first_call_s=300, call_s=300)
    # unconfined: a sandbox's launcher may add its own line ("Killed") after the worker's
    result = run(read_variant(sub), ONE, RunOptions("test", settings=settings, sandbox=Sandbox("off"))).cases[0]
    assert result.status is Status.CRASH
    assert result.message.startswith("the worker process was killed by SIGKILL (signal 9); last output: ")
    assert result.message.endswith(" | dying words")  # the pipe is read to its end once the worker is gone
