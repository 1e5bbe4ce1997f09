"""How an fp4bench command ends when it does not simply finish: its own exit codes (beside the official ones in
harness.protocol.ExitCode), the one-line refusal of a user mistake, and standard output closed early.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

import click
from rich.console import Console

from harness.results.record import RunRecord, Status, exit_code

#: Exit code after Ctrl-C: 128 + SIGINT, what a shell reports for a program SIGINT ended.
EXIT_INTERRUPTED = 130
#: Exit code after SIGTERM (``kill``, a CI job's cancel): 128 + SIGTERM. It stops a run as Ctrl-C does.
EXIT_TERMINATED = 143
#: Exit code after the reader of standard output went away (``fp4bench run ... | head``): 128 + SIGPIPE, what
#: a shell reports for a program SIGPIPE ended. What was measured is already in the store and the --json file.
EXIT_BROKEN_PIPE = 141
#: Exit code when an output cannot be written: the results store, the --json file, the POPCORN_FD stream, a
#: report's --out file (click's code for its errors).
EXIT_OUTPUT = 1
#: Exit code of a run or compare in which every case of every submission was skipped (each needs another GPU):
#: nothing was measured, so a script must not read it as a pass.
EXIT_NOTHING_RAN = 3


def runs_exit(records: list[RunRecord]) -> int:
    """The exit status of a command that ran ``records`` (run, compare): EXIT_NOTHING_RAN when every case of
    every record was skipped, else the worst record's official code (harness.results.record.exit_code)."""
    if records and all(c.status is Status.SKIPPED for r in records for c in r.cases):
        return EXIT_NOTHING_RAN
    return max((int(exit_code(r)) for r in records), default=0)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised where the command is, so it unwinds as after Ctrl-C (what was measured is kept)."""


def stop_on_sigterm() -> None:
    """From now on SIGTERM raises Terminated in the main thread (the default would end the process at once,
    leaving the run's --json unwritten and its worker to be reaped by nobody)."""
    def _raise(signum, frame):
        raise Terminated()
    signal.signal(signal.SIGTERM, _raise)


def interrupted_exit() -> NoReturn:
    """Exit after an interruption, from inside its ``except KeyboardInterrupt`` block: 143 after SIGTERM, else
    130."""
    sys.exit(EXIT_TERMINATED if isinstance(sys.exc_info()[1], Terminated) else EXIT_INTERRUPTED)


class Refused(click.ClickException):
    """A user mistake or an output that cannot be written: click prints ``Error: <message>`` on one line of
    stderr, as for its own usage errors, and exits with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = int(code)


def fail(message: str, code: int) -> NoReturn:
    """Stop the command: ``Error: <message>`` on one line of stderr, exit status ``code``."""
    raise Refused(message, code)


def broken_pipe() -> NoReturn:
    """Standard output's reader went away: point it at /dev/null, so that Python's flush at exit does not fail
    on the closed pipe again (the recipe in the Python docs' "Note on SIGPIPE"), and exit 141 without a word."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None  # not a real descriptor (a test runner's buffer)
    if fd is not None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    sys.exit(EXIT_BROKEN_PIPE)


class Stdout(Console):
    """A rich console on standard output that exits 141 through ``broken_pipe`` when its reader goes away
    (rich's own handling exits 1, the code of a failed command), and that crops no line when it writes to a file
    or a pipe (a table's notes are then one line each: ``harness.report.stacked``)."""

    def print(self, *objects, **kwargs) -> None:
        if not self.is_terminal:
            kwargs.setdefault("crop", False)
        super().print(*objects, **kwargs)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        broken_pipe()
