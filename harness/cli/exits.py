"""How an fp4bench command ends when it does not simply finish: its own exit codes (beside the official ones in
harness.protocol.ExitCode), the one-line refusal of a user mistake, and standard output closed early.
"""
from __future__ import annotations

import os
import sys
from typing import NoReturn

import click
from rich.console import Console

#: Exit code after Ctrl-C: 128 + SIGINT, what a shell reports for a program SIGINT ended.
EXIT_INTERRUPTED = 130
#: Exit code after the reader of standard output went away (``fp4bench run ... | head``): 128 + SIGPIPE, what
#: a shell reports for a program SIGPIPE ended. What was measured is already in the store and the --json file.
EXIT_BROKEN_PIPE = 141
#: Exit code when an output cannot be written: the results store, the --json file, the POPCORN_FD stream, a
#: report's --out file (click's code for its errors).
EXIT_OUTPUT = 1


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
    (rich's own handling exits 1, the code of a failed command)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        broken_pipe()
