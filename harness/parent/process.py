"""The parent's handle on one worker process: start, request, receive with a time limit, kill."""
from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from harness.buffers import send_fds
from harness.channel import ChannelClosed, ChannelTimeout, Reader
from harness.parent.capture import Capture
from harness.parent import proc_cleanup
from harness.parent.registry import ROOT
from harness.parent.sandbox import Plan
from harness.parent.sandbox_command import Launch
from harness.protocol import Exit, ExitCode, encode
from harness.worker import native

#: Removed from the worker's environment: the secret seed and the official result pipe.
_HIDDEN_ENV = ("POPCORN_SEED", "POPCORN_FD")
#: How much of a worker's output (stdout and stderr) the parent keeps, in memory only (harness.parent.capture): its
#: first LOG_HEAD_BYTES and its last LOG_BYTES (fd_flood.py writes 700 KB a call); --worker-log gets both.
LOG_HEAD_BYTES = 64 << 10
LOG_BYTES = 1 << 20
#: Set in the worker's environment: Inductor compiles in the worker's own process instead of a pool of compile
#: processes that outlives the compile (a process left running fails the case: harness.parent.proc_cleanup); the
#: OpenMP pool (libgomp) spins 30,000 rounds before it sleeps, not 300,000: its default spun 6-8 ms per thread
#: after each call, into the wait the idle rule judges (harness.parent.watch.idle_verdict). Sleeping at once
#: (OMP_WAIT_POLICY=PASSIVE) cost torch_reference 30-65 % on this project's CPU host; 30,000 rounds cost nothing
#: measurable (geomean 1,160 against 1,077-1,396 us with the default, 2026-12-05) and left no idle CPU.
_FIXED_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "GOMP_SPINCOUNT": "30000"}


class WorkerTimeout(Exception):
    """The worker gave no answer in time (it has been killed)."""


class WorkerDied(Exception):
    """The worker process ended mid-request; the message says how (signal, exit code, last stderr lines) and
    ``code`` is its exit status (negative: the signal; None: unknown)."""

    def __init__(self, message: str, code: int | None):
        super().__init__(message)
        self.code = code


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (signal {-code})"
    if code == ExitCode.CUDA_FAILURE:
        return "exited after a CUDA error (exit code 110)"
    return f"exited with code {code}"


def _launcher_names(command: list[str], argv: list[str]) -> frozenset[str]:
    """The names (comm) of the programs that ``command``, the confined form of starting ``argv``, runs before the
    worker: its first word and each program after a ``--`` (unshare's ``/bin/sh``), never the worker's Python;
    none when ``command`` is ``argv`` itself."""
    if command[:len(argv)] == argv:
        return frozenset()
    programs = {command[0]} | {command[i + 1] for i, word in enumerate(command[:-1]) if word == "--"}
    return frozenset(os.path.basename(p)[:15] for p in programs if p != argv[0])


@functools.lru_cache(maxsize=None)
def native_window() -> str:
    """Build the worker's C window once per process (harness.worker.native); "" when built, else the reason the
    worker will hold its window in Python."""
    ok, why = native.available()
    return "" if ok else why


#: How long a worker asked to exit may take before it is killed (WorkerProcess.close); 0 after Ctrl-C.
EXIT_WAIT_S = 10.0


class WorkerProcess:
    """``python -m harness.worker`` in its own session, talking JSON on stdin and frames back (claims: the parent
    checks them, harness.parent.bracket)."""

    def __init__(self, env: dict | None = None, sandbox: Plan | None = None, log: Path | None = None,
                 label: str = "worker"):
        """``sandbox``: the confinement to start the worker under (harness.parent.sandbox.plan_for); None: none.
        ``log``: a file that ``close`` appends the worker's stdout and stderr to (what was kept of them), under a
        line naming ``label`` (the parent writes it: the worker gets no right to)."""
        native_window()
        self._log, self._label = log, label
        read_fd, write_fd = os.pipe()
        self._fd_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child_env = {k: v for k, v in (env or os.environ).items() if k not in _HIDDEN_ENV} | _FIXED_ENV
        child_env["FP4BENCH_RESULT_FD"] = str(write_fd)
        child_env["FP4BENCH_FD_SOCKET"] = str(child_sock.fileno())
        child_env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [child_env.get("PYTHONPATH")] if p])
        self._stderr = Capture(LOG_HEAD_BYTES, LOG_BYTES)  # stdout and stderr, bounded in memory
        argv = [sys.executable, "-m", "harness.worker"]
        self._launch = sandbox.launch(argv, child_env, ROOT) if sandbox else Launch(argv, child_env, ROOT)
        proc_cleanup.become_subreaper()  # before the first worker: its orphans come to this process, not to init
        try:
            self.proc = subprocess.Popen(
                self._launch.argv, stdin=subprocess.PIPE, stdout=self._stderr.write_fd, stderr=self._stderr.write_fd,
                cwd=self._launch.cwd, env=self._launch.env, pass_fds=(write_fd, child_sock.fileno()),
                start_new_session=True)
        except BaseException:
            self._stderr.close()
            raise
        finally:
            self._stderr.started()
        # Which processes are the launcher's and which is the worker, found before any request is sent (no
        # submission code has run yet); everything else below the root is the submission's.
        self.tree = proc_cleanup.watch(self.proc.pid, _launcher_names(self._launch.argv, argv))
        os.close(write_fd)
        child_sock.close()
        self._reader = Reader(read_fd)
        self._read_fd = read_fd

    @property
    def stray_bytes(self) -> int:
        """Bytes on the result channel that were not frames (a submission writing to descriptors)."""
        return self._reader.stray_bytes

    def _send_line(self, text: str) -> None:
        try:
            self.proc.stdin.write(text.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reply read reports how the worker ended

    def send(self, msg, fds: list[int] = ()) -> None:
        """Send one request (a harness.protocol message) and, first, the descriptors it refers to; its reply
        comes from ``receive``."""
        if fds:
            try:
                send_fds(self._fd_sock, list(fds))
            except OSError:
                pass  # the reply read reports how the worker ended
        self._send_line(encode(msg))

    def receive(self, timeout_s: float) -> tuple[dict, bytes]:
        """The next reply. Raises WorkerTimeout (worker killed) or WorkerDied."""
        try:
            return self._reader.receive(timeout_s)
        except ChannelTimeout:
            self.kill()
            raise WorkerTimeout(f"timeout after {timeout_s:g} s") from None
        except ChannelClosed:
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
                code = self.proc.returncode
            code = self._launch.exit_code(code)
            raise WorkerDied(f"the worker process {_how_it_ended(code)}{self._stderr_tail()}", code) from None

    def _stderr_tail(self, lines: int = 6) -> str:
        head, dropped, tail = self._stderr.snapshot()
        kept = tail if dropped else head + tail
        last = kept.decode(errors="replace").strip().splitlines()[-lines:]
        return ("; last output: " + " | ".join(last)) if last else ""

    def _append_log(self) -> None:
        """The worker's output to ``log`` under a header: all of it, or its first LOG_HEAD_BYTES and last LOG_BYTES
        around a line saying how many bytes between were left out (the header says so too). A failed write is
        reported once on stderr and measures nothing less."""
        if self._log is None:
            return
        try:
            head, dropped, tail = self._stderr.snapshot()
            size = len(head) + dropped + len(tail)
            if dropped:
                text = (head + (b"" if head.endswith(b"\n") else b"\n")
                        + f"[... {dropped} bytes left out ...]\n".encode() + tail)
                cut = f", {dropped} bytes between its first {len(head)} and its last {len(tail)} left out"
            else:
                text, cut = head + tail, ""
            ended = datetime.now(timezone.utc).isoformat(timespec="seconds")
            with open(self._log, "ab") as f:
                f.write(f"=== {self._label}: worker pid {self.proc.pid}, exit {self.proc.returncode}, ended {ended}"
                        f", {size} bytes of output{cut} ===\n".encode() + text + (b"" if text.endswith(b"\n") or not
                                                                               text else b"\n"))
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"fp4bench: cannot append the worker's output to {self._log}: {exc}\n")
            self._log = None

    def kill(self) -> None:
        """Kill the worker and everything below it: its session, every process below the launcher (a daemon in
        a session of its own too) and the orphans adopted while they die (harness.parent.proc_cleanup)."""
        self.tree.ending = True
        members = self.tree.members()
        killed = proc_cleanup.kill(members)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        proc_cleanup.unwatch(self.tree)
        proc_cleanup.reap_gone([p for p in [*members, *killed] if p.pid != self.proc.pid])

    def close(self, wait_s: float = EXIT_WAIT_S) -> None:
        """Ask the worker to exit, wait up to ``wait_s`` for it, then make sure it has (0: kill it at once, as
        after Ctrl-C, when the worker may be stuck in the submission)."""
        if self.proc.poll() is None and wait_s > 0:
            self._send_line(encode(Exit()))
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self._append_log()
        for closer in (lambda: os.close(self._read_fd), self._stderr.close, self.proc.stdin.close, self._fd_sock.close,
                       self._launch.close):
            try:
                closer()
            except OSError:
                pass
