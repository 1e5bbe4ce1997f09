"""A rich table that fits any console width by stacking, never by cutting.

``StackedTable`` holds one key column (``#``, a run id, a variant name) and any number of value columns. At
render time it measures every column; when they do not all fit the console's width, the value columns are
split, in order, over several tables printed one under the other, each repeating the key column. So no column
is ever hidden, no number is cut, and a column added later (say a kernel time per call) only adds a table when
the terminal is narrow. Only columns marked ``wrap`` (free text: messages, lists of names) break, between
words; a single value wider than the whole console is the one thing that folds.

The title, the caption and any notes are printed as full-width text above and below the tables, not inside
them (a narrow first table would squeeze them into a thin column).

Every cell, header, title and note is shown verbatim: plain strings become ``rich.text.Text`` and are never
parsed as console markup, so text from a submission (``[/]``, ``[bold]``) cannot break the output. Style
comes only from ``Text`` objects built by the caller.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Sequence, Union

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

Cell = Union[str, Text]

#: Columns marked ``wrap`` get at least this many cells of width (or their longest word, if longer) before
#: they move to a table of their own.
WRAP_MIN_WIDTH = 24
#: Cells a column adds to a table's width besides its content: one space of padding each side and one rule.
COLUMN_OVERHEAD = 3


@dataclass(frozen=True)
class Col:
    """A column: ``header`` (``\\n`` starts a second header line), ``justify`` (``left`` | ``right`` |
    ``center``), ``wrap`` (free text that may break between words), a rich ``style`` for every cell, and a
    ``group``: consecutive columns of one group (e.g. every variant's mean time) go to a new table together
    when they would fit one but not what is left of the current one."""

    header: str
    justify: str = "right"
    wrap: bool = False
    style: str = ""
    group: str = ""


def plain(value: Cell) -> Text:
    """``value`` as a Text shown exactly as written (a str is never read as markup)."""
    return value.copy() if isinstance(value, Text) else Text(str(value))


def _lines_width(text: Text) -> int:
    return max((Text(line).cell_len for line in text.plain.split("\n")), default=0)


def _longest_word(text: Text) -> int:
    return max((Text(word).cell_len for word in text.plain.split()), default=0)


class StackedTable:
    """A table of rows (a key cell and one cell per value column) that renders as one or more rich tables
    stacked vertically, each at most the console's width (module docstring).

    ``title``: printed bold above the tables; ``caption``: printed dim below them; ``add_note``: further lines
    below (e.g. each failed shape's message). Raises ValueError when a row has the wrong number of cells."""

    def __init__(self, title: Cell, key: Col, columns: Sequence[Col], caption: Cell = ""):
        self.title, self.key, self.columns, self.caption = plain(title), key, tuple(columns), plain(caption)
        self.rows: list[tuple[Text, list[Text], bool]] = []
        self.notes: list[Text] = []

    def add_row(self, key: Cell, *cells: Cell, end_section: bool = False) -> None:
        """One row: the key cell and exactly one cell per value column; ``end_section`` draws a rule under it."""
        if len(cells) != len(self.columns):
            raise ValueError(f"expected {len(self.columns)} value cells (columns "
                             f"{', '.join(c.header for c in self.columns)!r}), got {len(cells)}")
        self.rows.append((plain(key), [plain(c) for c in cells], end_section))

    def add_note(self, note: Cell) -> None:
        """A line printed under the tables, verbatim: wrapped at the console's width on a terminal, one line
        however long elsewhere (a log or a pipe, where a wrapped message breaks grep; print with ``crop=False``,
        as ``harness.cli.exits.Stdout`` does)."""
        self.notes.append(plain(note))

    # ---------------------------------------------------------------------------------------- layout
    def _natural(self, index: int | None) -> tuple[int, int]:
        """(natural width, narrowest acceptable width) of the key (``None``) or value column ``index``."""
        col = self.key if index is None else self.columns[index]
        cells = [key if index is None else cells[index] for key, cells, _ in self.rows]
        header = Text(col.header)
        natural = max([_lines_width(header)] + [_lines_width(c) for c in cells])
        if not col.wrap:
            return natural, natural
        words = max([_longest_word(header)] + [_longest_word(c) for c in cells])
        return natural, max(words, min(natural, WRAP_MIN_WIDTH))

    def panels(self, width: int) -> list[list[tuple[int, int]]]:
        """The value columns split into tables for a console ``width`` cells wide: per table, the (column
        index, width) pairs it shows, in order. Each table also shows the key column."""
        key_width, _ = self._natural(None)
        room = width - 1 - (key_width + COLUMN_OVERHEAD)  # the left border, then the key column
        panels: list[list[tuple[int, int]]] = []
        current: list[tuple[int, int]] = []
        left = room
        for i in range(len(self.columns)):
            natural, narrowest = self._natural(i)
            group = self.columns[i].group
            if current and group and self.columns[i - 1].group != group:  # a group starts here
                need = self._group_width(i)
                if left < need <= room:
                    panels.append(current)
                    current, left = [], room
            if natural + COLUMN_OVERHEAD <= left:
                current.append((i, natural))
                left -= natural + COLUMN_OVERHEAD
                continue
            if self.columns[i].wrap and narrowest + COLUMN_OVERHEAD <= left:
                current.append((i, left - COLUMN_OVERHEAD))
                left = 0
                continue
            if current:
                panels.append(current)
                current, left = [], room
            fitted = max(1, min(natural, left - COLUMN_OVERHEAD))  # wider than the console alone: folds
            current.append((i, fitted))
            left -= fitted + COLUMN_OVERHEAD
        if current or not panels:
            panels.append(current)
        return panels

    def _group_width(self, start: int) -> int:
        """Cells the run of columns of ``start``'s group, beginning at ``start``, needs at natural width."""
        width = 0
        for i in range(start, len(self.columns)):
            if self.columns[i].group != self.columns[start].group:
                break
            width += self._natural(i)[0] + COLUMN_OVERHEAD
        return width

    def _table(self, panel: list[tuple[int, int]]) -> Table:
        key_width, _ = self._natural(None)
        table = Table(show_edge=True, expand=False)
        for index, width in [(None, key_width)] + panel:
            col = self.key if index is None else self.columns[index]
            folds = col.wrap or width < self._natural(index)[0]
            table.add_column(Text(col.header), justify=col.justify, style=col.style or None, min_width=width,
                             max_width=width, no_wrap=not folds, overflow="fold")
        for key, cells, end_section in self.rows:
            table.add_row(key, *(cells[i] for i, _ in panel), end_section=end_section)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.title.plain:
            yield Text.assemble(self.title, style="bold")
        for panel in self.panels(options.max_width):
            yield self._table(panel)
        if self.caption.plain:
            yield Text.assemble(self.caption, style="dim")
        if options.is_terminal:
            yield from self.notes
            return
        for note in self.notes:
            yield from note.render(console)
            yield Segment.line()


def render_text(renderable, width: int) -> str:
    """``renderable`` as plain text (no colour codes) laid out as on a terminal ``width`` cells wide: every line
    fits, notes wrapped."""
    console = Console(width=width, record=True, color_system=None, force_terminal=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()
