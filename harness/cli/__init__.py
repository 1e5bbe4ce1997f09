"""The ``fp4bench`` command line (click)."""
from harness.cli.commands import main

__all__ = ["main"]
