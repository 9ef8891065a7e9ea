"""Routing health names the owner sbrules.yaml's ``owners:`` gives a subscription sbrules does not
manage, and counts it with the live rules a plan read: from the plan to the subscribers, and in
every format the report is written in (no Spark: the golden analysis document, relabelled)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.model import DesiredState, Rule, SqlFilter, Subscription, Topic, TrueFilter
from reconciler.owners import Owners
from reconciler.plan import compute_plan
from reconciler.traffic.analysis.impact import desired_subscribers
from reconciler.traffic.report.parts import TimeRange
from reconciler.traffic.report.render import render_analysis
from reconciler.traffic.report.routing import Analysis, Bystander

from .conftest import routing_health

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "analyze.json"
OWNERS = Owners({"nservicebus": ("orders/nsb-*", "orders/legacy")})
NSB = (Rule("Shop.Messages.OrderPlaced", SqlFilter("[NServiceBus.EnclosedMessageTypes] LIKE '%Shop.Messages.OrderPlaced%'")),)


def test_owned_subscriptions_carry_their_owner_and_the_rules_the_plan_read():
    desired = DesiredState(
        (Topic("orders", (Subscription("mine", (Rule("big", SqlFilter("amount > 1")),)), Subscription("legacy", None))),),
        owners=OWNERS,
    )
    plan = replace(
        compute_plan(desired, {("orders", "mine"): [Rule("big", SqlFilter("amount > 1"))]}),
        undeclared=(("orders", "nsb-sales"), ("orders", "stray")),
        bystanders={("orders", "nsb-sales"): NSB, ("orders", "legacy"): (Rule("$Default", TrueFilter()),)},
        claimed={("orders", "nsb-sales"): "nservicebus"},
    )
    by_name = {s.subscription: s for s in desired_subscribers(desired, plan)}
    assert (by_name["nsb-sales"].owner, by_name["nsb-sales"].rules) == ("nservicebus", NSB)
    assert by_name["legacy"].owner == "nservicebus" and by_name["legacy"].rules is not None  # unmanaged, read
    assert by_name["stray"].owner is None and by_name["stray"].rules is None  # nobody claims it; not read
    assert by_name["mine"].owner is None  # sbrules' own


def _analysis() -> Analysis:
    doc = json.loads(GOLDEN.read_text(encoding="utf-8"))
    health = routing_health(doc)
    topic = health.topics[0]
    labelled = replace(topic, undeclared=(Bystander("nsb-sales", 14, "nservicebus"), Bystander("stray", None)))
    health = replace(health, topics=(labelled, *health.topics[1:]))
    return Analysis(doc["dataset"], health, TimeRange(), (), {})


def test_every_format_shows_the_owner():
    analysis = _analysis()
    assert "not in the rule files: nsb-sales (owned by nservicebus, receives 14), stray (unknown)" in render_analysis(
        analysis, "text")
    assert "`shop/nsb-sales` (owned by nservicebus, receives 14)" in render_analysis(analysis, "markdown")
    assert "(owned by nservicebus, receives 14)" in render_analysis(analysis, "html")
    doc = json.loads(render_analysis(analysis, "json"))
    undeclared = doc["topics"][0]["undeclared_subscriptions"]
    assert undeclared == [{"subscription": "nsb-sales", "receives": 14, "owner": "nservicebus"},
                          {"subscription": "stray", "receives": None}]


def test_the_json_with_owners_is_valid(output_schema):
    output_schema("analyze").validate(json.loads(render_analysis(_analysis(), "json")))
