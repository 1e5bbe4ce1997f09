"""Markdown from the document model, through templates/report.md.j2 (no autoescape: table cells go through the
``md_cell`` filter, a folded message's summary through jinja's ``e``)."""
from __future__ import annotations

from typing import Sequence

from harness.report.document import Section
from harness.report.templating import environment


def render_md(sections: Sequence[Section]) -> str:
    """The sections as one Markdown document ending in a single newline. Pictures appear as a note naming them."""
    return environment(autoescape=False).get_template("report.md.j2").render(sections=sections).rstrip() + "\n"
