"""The jinja2 environments the Markdown and HTML renderers fill their templates (harness/report/templates/) with.

Templates test an item's kind with ``item is table`` (para, table, details, image), read a cell with the
``cell_text`` filter and escape a Markdown table cell with ``md_cell``; ``strict`` undefined makes a misspelt name
an error, not an empty string."""
from __future__ import annotations

import base64
import functools

import jinja2

from harness.report.document import Cell, CellLike, Details, Image, Para, Table, cell_text


def cell_class(cell: CellLike, numeric: bool) -> str:
    """The HTML class of a table cell: ``num`` for a right-aligned column, then the cell's own class."""
    return " ".join(x for x in ("num" if numeric else "", cell.cls if isinstance(cell, Cell) else "") if x)


def md_cell(text: str) -> str:
    """Text made safe for one Markdown table cell: backslashes and pipes escaped, newlines as spaces."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


@functools.lru_cache(maxsize=None)
def environment(autoescape: bool) -> jinja2.Environment:
    """The environment for one kind of output: ``autoescape`` on for HTML, off for Markdown (whose templates
    escape with their own filter). Made once per kind."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("harness.report", "templates"), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.tests.update(para=lambda x: isinstance(x, Para), table=lambda x: isinstance(x, Table),
                     details=lambda x: isinstance(x, Details), image=lambda x: isinstance(x, Image))
    env.filters.update(cell_text=cell_text, cell_class=cell_class, md_cell=md_cell,
                       base64=lambda data: base64.b64encode(data).decode("ascii"))
    return env
