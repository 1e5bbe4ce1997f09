"""The document model every Markdown and HTML report is built from: sections of paragraphs, tables, pictures and
folded details. Builders (harness.report.sections, .tables) fill it; renderers (.render_md, .render_html) only
pour it into their template. Text is plain: each renderer escapes it for its format."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass
class Cell:
    """A table cell with an optional style class (html: ``pass``/``fail``/``warn``/``muted``/``strong``/``id``)."""

    text: str
    cls: str = ""


CellLike = Union[str, Cell]


def cell_text(cell: CellLike) -> str:
    """The text of a cell given as a Cell or a plain string."""
    return cell.text if isinstance(cell, Cell) else cell


@dataclass
class Table:
    """Columns, rows of cells (one per column), the right-aligned (numeric) column indices and a caption."""

    columns: list[str]
    rows: list[list[CellLike]]
    numeric: set[int] = field(default_factory=set)
    caption: str = ""


@dataclass
class Image:
    """A PNG picture (its bytes) and its alternative text; Markdown shows only the text."""

    png: bytes
    alt: str


@dataclass
class Para:
    """A paragraph; ``cls`` ``warn`` or ``strong`` makes it stand out (bold in Markdown)."""

    text: str
    cls: str = ""


@dataclass
class Details:
    """Folded text: a one-line summary that opens to a preformatted body (a failure's whole message)."""

    summary: str
    body: str


@dataclass
class Section:
    """A heading of ``level`` (1 or 2) and the items under it, in order."""

    title: str
    level: int
    items: list = field(default_factory=list)
