"""Parameter types the commands share: paths and names that may not be empty (click's Path turns '' into '.', so
``--db ''`` read as "the current folder")."""
from __future__ import annotations

from pathlib import Path

import click


class FilePath(click.Path):
    """A file path (not a folder), as a pathlib.Path; the empty string is refused ("expected a path, got an empty
    string") instead of read as the current folder."""

    def __init__(self, **kw) -> None:
        super().__init__(dir_okay=False, path_type=Path, **kw)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail(f"expected a path, got {value!r}", param, ctx)
        return super().convert(value, param, ctx)


def nonempty(ctx, param, value):
    """A click callback: ``value`` unless it is an empty or blank string (then a usage error naming it)."""
    if isinstance(value, str) and not value.strip():
        raise click.BadParameter(f"expected a value, got {value!r}", ctx, param)
    return value
