"""An impact report or an ``analyze`` document in the format asked for: the one place that knows every renderer.

``text`` for a terminal (:mod:`~reconciler.traffic.report.text`), ``markdown`` for a pull-request
comment (:mod:`~reconciler.traffic.report.markdown`), ``html`` for one self-contained file
(:mod:`~reconciler.traffic.report.html`), ``json`` for machines
(:meth:`~reconciler.traffic.report.model.ImpactReport.to_json`, written as every sbrules document is:
:func:`~reconciler.json_text.json_text`). Every format comes without its final newline, which the
command adds when it prints or writes it.
"""

from __future__ import annotations

from reconciler.json_text import json_text
from reconciler.traffic.report.model import ImpactReport
from reconciler.traffic.report.routing import Analysis

FORMATS = ("text", "markdown", "json", "html")


def render_report(report: ImpactReport, fmt: str = "text") -> str:
    """The report as ``text``, ``markdown``, ``json`` or ``html``."""
    if fmt == "json":
        return json_text(report.to_json()).removesuffix("\n")
    if fmt == "markdown":
        from reconciler.traffic.report.markdown import render_markdown

        return render_markdown(report)
    if fmt == "text":
        from reconciler.traffic.report.text import render_text

        return render_text(report)
    if fmt == "html":
        from reconciler.traffic.report.html import render_html  # jinja2: only for a page

        return render_html(report)
    raise ValueError(f"unknown report format {fmt!r} ({', '.join(FORMATS)})")


def render_analysis(doc: Analysis, fmt: str = "text") -> str:
    """The ``sbrules analyze`` document as ``text``, ``markdown``, ``json`` or ``html``."""
    if fmt == "json":
        return json_text(doc.to_json()).removesuffix("\n")
    if fmt == "html":
        from reconciler.traffic.report.html import render_analysis_html  # jinja2: only for a page

        return render_analysis_html(doc)
    from reconciler.traffic.report.health import analysis_markdown, analysis_text

    if fmt == "markdown":
        return analysis_markdown(doc)
    if fmt == "text":
        return analysis_text(doc)
    raise ValueError(f"unknown format {fmt!r} ({', '.join(FORMATS)})")
