"""HTML from the document model, through templates/report.html.j2 with autoescape on: one self-contained page,
its style (templates/report.css) inline and its pictures embedded as base64 PNG, so it opens offline."""
from __future__ import annotations

from typing import Sequence

from harness.report.document import Section
from harness.report.templating import environment


def render_html(sections: Sequence[Section], title: str) -> str:
    """The sections as one HTML page titled ``title``, ending in a newline; every text is escaped."""
    return environment(autoescape=True).get_template("report.html.j2").render(sections=sections, title=title)
