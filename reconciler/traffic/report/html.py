"""The impact report and the ``analyze`` document as one self-contained HTML file each (a CI
artefact that opens anywhere, offline), from one template: the routing-health section (its chart,
topics, unrouted groups, examples and findings with their evidence) is the same in both.

Rendered with a jinja2 template (``templates/report.html.j2``, autoescaped) into plain HTML, CSS
and an inline SVG chart: no script, no font, no image, nothing fetched (the page's
Content-Security-Policy forbids it). The chart is drawn here from the report's numbers rather than
by a plotting library: every library that can inline its assets ships a megabyte-scale JavaScript
runtime, where horizontal bars need a few rectangles.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, StrictUndefined

from reconciler.model import Rule, rule_to_doc
from reconciler.rulefiles.render import dump_rule_file
from reconciler.traffic.report.model import UNROUTED_MEANS, ImpactReport, SubscriptionImpact
from reconciler.traffic.report.parts import ExampleMessage
from reconciler.traffic.report.routing import Analysis, RoutingHealth

#: Changed subscriptions drawn in the chart; the table below it lists every subscription.
CHART_ROWS = 50

# Chart geometry (SVG user units, 1 unit = 1 CSS px at 100 %).
LABEL_WIDTH = 300
PLOT_WIDTH = 480
NUMBER_WIDTH = 150
BAR_HEIGHT = 13
GROUP_HEIGHT = 2 * BAR_HEIGHT + 14
TOP = 34


@dataclass(frozen=True)
class Bar:
    """One rectangle: a ``kind`` (kept, lost, gained) of one side (before, after) of a subscription."""

    subscription: str
    side: str
    kind: str
    value: int
    x: float
    y: float
    width: float


@dataclass(frozen=True)
class ChartRow:
    path: str
    anchor: str
    y: float
    before_text: str
    after_text: str
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Chart:
    rows: tuple[ChartRow, ...]
    ticks: tuple[tuple[float, str], ...]
    width: int
    height: int
    plot_left: int
    plot_bottom: float
    not_drawn: tuple[SubscriptionImpact, ...]


@dataclass(frozen=True)
class TopicBar:
    """One topic of the routing-health chart: its received and unrouted messages, drawn at one scale."""

    topic: str
    y: float
    received: int
    unrouted: int
    received_width: float
    unrouted_width: float


@dataclass(frozen=True)
class HealthBars:
    rows: tuple[TopicBar, ...]
    width: int
    height: int
    plot_left: int


def render_html(report: ImpactReport) -> str:
    """The whole report as one HTML document."""
    subs = report.ranked()
    anchors = {(s.topic, s.subscription): f"sub-{i}" for i, s in enumerate(subs, 1)}
    return _render(
        report=report,
        analysis=None,
        subscriptions=subs,
        anchors=anchors,
        chart=_chart(report.changed(), anchors),
        unchanged=sum(1 for s in subs if not s.changes_traffic),
        health=report.routing_health,
        examples=report.example_messages,
    )


def render_analysis_html(doc: Analysis) -> str:
    """The ``sbrules analyze`` document as one HTML document: the routing-health section of the impact report."""
    return _render(report=None, analysis=doc, health=doc.health, examples=doc.example_messages)


def _render(health: RoutingHealth | None, **context: object) -> str:
    template = _environment().get_template("report.html.j2")
    return template.render(
        health=health, health_bars=_health_bars(health), unrouted_means=UNROUTED_MEANS, **context
    )


def _health_bars(health: RoutingHealth | None) -> HealthBars:
    """Received and unrouted messages per topic, every bar at one scale."""
    topics = health.topics if health is not None else ()
    top = max((t.messages for t in topics), default=1) or 1
    scale = PLOT_WIDTH / top
    rows = tuple(
        TopicBar(t.topic, TOP + i * (BAR_HEIGHT + 10), t.messages - t.unrouted.count, t.unrouted.count,
                 (t.messages - t.unrouted.count) * scale, t.unrouted.count * scale)
        for i, t in enumerate(topics)
    )
    height = int(TOP + len(rows) * (BAR_HEIGHT + 10) + 8)
    return HealthBars(rows, LABEL_WIDTH + PLOT_WIDTH + NUMBER_WIDTH, height, LABEL_WIDTH)


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reconciler.traffic.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["rule_yaml"] = _rule_yaml
    env.filters["properties"] = _properties
    env.filters["num"] = lambda n: f"{n:,}"
    return env


def _rule_yaml(rule: Rule | None) -> str:
    """A rule as it reads in a rule file (without its name, shown beside it)."""
    if rule is None:
        return ""
    body = {k: v for k, v in rule_to_doc(rule).items() if k != "name"}
    return dump_rule_file(body, width=100).rstrip()  # multi-line SQL as a literal block: plain SQL


def _properties(example: ExampleMessage) -> list[tuple[str, str, str, str]]:
    """(kind, name, type, value) rows of an example message's system and application properties."""
    rows = []
    for kind, properties in (("system", example.message.sys), ("application", example.message.user)):
        for name, value in properties.items():
            raw = value.to_typed_form()
            inner = next(iter(raw.values())) if isinstance(raw, dict) else raw
            text = inner if isinstance(inner, str) else json.dumps(inner)
            rows.append((kind, name, value.type.value, text))
    return rows


def _chart(moves: list[SubscriptionImpact], anchors: dict[tuple[str, str], str]) -> Chart:
    shown = moves[:CHART_ROWS]
    top = max((max(m.delivered_before, m.delivered) for m in shown), default=1) or 1
    step = _tick_step(top)
    scale = PLOT_WIDTH / (step * math.ceil(top / step))
    rows = []
    for i, m in enumerate(shown):
        y = TOP + i * GROUP_HEIGHT
        kept = m.kept * scale
        bars = (
            Bar(m.path, "before", "kept", m.kept, LABEL_WIDTH, y, kept),
            Bar(m.path, "before", "lost", m.lost, LABEL_WIDTH + kept, y, m.lost * scale),
            Bar(m.path, "after", "kept", m.kept, LABEL_WIDTH, y + BAR_HEIGHT + 2, kept),
            Bar(m.path, "after", "gained", m.gained, LABEL_WIDTH + kept, y + BAR_HEIGHT + 2, m.gained * scale),
        )
        change = " ".join(part for part in (f"+{m.gained:,}" if m.gained else "", f"−{m.lost:,}" if m.lost else "") if part)
        before, after = f"{m.delivered_before:,} before", f"{m.delivered:,} after ({change})"
        rows.append(ChartRow(m.path, anchors[(m.topic, m.subscription)], y, before, after, bars))
    ticks = []
    value = 0
    while value * scale <= PLOT_WIDTH + 0.01:
        ticks.append((LABEL_WIDTH + value * scale, f"{value:,}"))
        value += step
    bottom = TOP + len(shown) * GROUP_HEIGHT
    return Chart(
        rows=tuple(rows),
        ticks=tuple(ticks),
        width=LABEL_WIDTH + PLOT_WIDTH + NUMBER_WIDTH,
        height=int(bottom + 8),
        plot_left=LABEL_WIDTH,
        plot_bottom=bottom,
        not_drawn=tuple(moves[CHART_ROWS:]),
    )


def _tick_step(top: int) -> int:
    """A round step (1, 2 or 5 times a power of ten) giving at most five ticks up to ``top``."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if top / (step * factor) <= 5:
                return step * factor
        step *= 10
