"""The parts of routing health that need no sample: who counts as receiving, what a rule costs,
correlation suggestions typed from the sample's property types, costly LIKEs."""

from __future__ import annotations

import pytest

from reconciler.model import CorrelationFilter, Rule, SqlFilter, SqlRuleAction, TrueFilter, TypedValue, ValueType
from reconciler.traffic.analysis.health import Health, Subscriber, _costly_like, _credits, _quota

pytestmark = pytest.mark.unit

EU = Rule("eu", SqlFilter("region = 'eu'"))
US = Rule("us", SqlFilter("region = 'us' AND sys.Label = 'order' AND tier = 3"))
TAP = Subscriber("shop", "tap", (Rule("all", TrueFilter()),), sampling_tap=True)


def test_the_sampling_tap_and_unknown_subscriptions_do_not_count_as_receiving() -> None:
    health = Health([Subscriber("shop", "eu", (EU,)), TAP, Subscriber("shop", "legacy", None)], "desired", {})
    filters = {flt: i for i, flt in enumerate(dict.fromkeys(health.filters()))}
    assert health.receiving(filters) == {"shop": frozenset({filters[EU.filter]})}


def test_every_rule_of_every_subscription_costs_a_credit_per_message() -> None:
    here = [Subscriber("shop", "eu", (EU, US)), TAP]
    assert _credits(here, messages=1000, span_seconds=100, complete=True).to_json() == {
        "per_message": 4, "filters": 3, "exact": True, "estimated_per_second": 40.0, "share_of_namespace": 0.04,
        "span_seconds": 100, "burst": False,
    }
    assert _credits([*here, Subscriber("shop", "legacy", None)], 100, None, complete=True).exact is False
    # Offline, the files may not name every subscription of the topic: at least this many.
    offline = _credits(here, 1000, 100)
    assert (offline.exact, offline.amount) == (False, "at least 4 credits")
    assert offline.rate.startswith("at least about 40.0 credits/s")
    assert _quota([*here, Subscriber("shop", "c", (Rule("c", CorrelationFilter(subject="x")),))]).to_json() == {
        "sql_filters": 3, "sql_limit": 2000, "correlation_filters": 1, "correlation_limit": 100000,
    }


def test_a_sample_enqueued_within_a_minute_is_a_burst_with_no_rate() -> None:
    """4,918 % of a Standard namespace's budget, from 500 messages sent at once, was no rate at all."""
    burst = _credits([Subscriber("shop", "eu", (EU,))], messages=500, span_seconds=0.6, complete=True)
    assert (burst.burst, burst.estimated_per_second, burst.share_of_namespace) == (True, None, None)
    assert burst.rate.startswith("rate not measurable from this sample")
    assert "%" not in burst.rate


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        ({"region": {"string"}, "tier": {"int"}}, CorrelationFilter(
            subject="order", properties=(("region", TypedValue(ValueType.STRING, "us")), ("tier", TypedValue(ValueType.INT, 3))))),
        ({"region": {"string", "symbol"}, "tier": {"long"}}, CorrelationFilter(
            subject="order", properties=(("region", TypedValue(ValueType.STRING, "us")), ("tier", TypedValue(ValueType.LONG, 3))))),
        ({"region": {"string"}, "tier": {"double"}}, CorrelationFilter(
            subject="order", properties=(("region", TypedValue(ValueType.STRING, "us")), ("tier", TypedValue(ValueType.DOUBLE, 3.0))))),
        ({"region": {"string"}, "tier": {"int", "long"}}, None),  # two types: no one correlation value matches both
        ({"region": {"string"}}, None),  # never sampled: no type to give it
        ({"region": {"string"}, "tier": {"string"}}, None),  # 3 never equals a string (an evaluation error)
    ],
)
def test_a_correlation_suggestion_takes_each_property_type_from_the_sample(types, expected) -> None:
    health = Health([Subscriber("shop", "us", (US,))], "desired", {k: frozenset(v) for k, v in types.items()})
    (candidate,) = health.candidates
    assert candidate.suggested == expected
    if expected is None:
        assert "tier" in (candidate.reason or "")


def test_only_action_less_conjunctions_of_equalities_are_candidates() -> None:
    rules = (
        Rule("or", SqlFilter("region = 'eu' OR region = 'us'")),
        Rule("range", SqlFilter("amount > 3")),
        Rule("copy", SqlFilter("region = 'eu'"), SqlRuleAction("SET x = 1")),
        Rule("null", SqlFilter("region = NULL")),
        Rule("size", SqlFilter("sys.Size = 3")),
    )
    health = Health([Subscriber("shop", "s", rules)], "desired", {"region": frozenset({"string"})})
    assert [(c.rule.name, c.suggested) for c in health.candidates] == [("size", None)]


def test_costly_likes() -> None:
    where = {"topic": "t", "subscription": "s", "rule": "r"}
    leading = _costly_like(where, Rule("r", SqlFilter("sys.Label LIKE '%.test' AND region LIKE 'eu%'")))
    assert [f.evidence for f in leading] == [{"kind": "static", "patterns": ["%.test"]}]
    ored = _costly_like(where, Rule("r", SqlFilter("region LIKE 'eu%' OR region LIKE 'us%' OR x = 1")))
    assert [f.evidence for f in ored] == [{"kind": "static", "property": "region", "likes": 2}]
    assert _costly_like(where, Rule("r", SqlFilter("region LIKE 'eu%'"))) == []


def test_the_impact_report_shows_routing_health_in_every_format() -> None:
    """The section the report's pass adds (here the shop's, from the golden analysis) in text,
    Markdown and HTML; JSON carries it as is (schemas/analyze.schema.json#/$defs/section)."""
    import json
    from dataclasses import replace
    from pathlib import Path

    from reconciler.traffic.report.render import render_report

    from .conftest import Traffic, build_report, routing_health

    golden = json.loads((Path(__file__).parent / "golden" / "analyze.json").read_text(encoding="utf-8"))
    report = replace(build_report([Traffic(kept=3)]), routing_health=routing_health(golden))
    text = render_report(report, "text")
    assert "Routing health of the declared rules" in text and "by sys.Label: 'order.uk' 5" in text
    markdown = render_report(report, "markdown")
    assert "#### Routing health" in markdown and "**unsatisfiable** `shop/eu-orders/impossible`" in markdown
    html = render_report(report, "html")
    assert '<section id="routing-health">' in html and "warehouse-uk" in html
    assert json.loads(render_report(report, "json"))["routing_health"]["findings"] == golden["findings"]
