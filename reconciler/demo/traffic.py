"""The demo's traffic step: publish realistic orders, sample them by peeking, report the impact on Spark.

It shows a reviewer's question answered before apply: which messages each subscription gains or
loses if the rule files replace the live rules. ``Emulator.publish`` stands in for the publishers;
sampling and the report use the real commands' code.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import tempfile
from typing import Callable, Iterable

from reconciler.app import operations
from reconciler.app.target import Target
from reconciler.emulator import Emulator
from reconciler.model import DesiredState, Message, TrueFilter, TypedValue, ValueType
from reconciler.names import same_name
from reconciler.plan import Plan

ORDER_LABELS = ("order.placed", "order.paid", "order.amended", "refund", "order.shipped")
REGIONS = ("eu-west", "eu-north", "us-east", "us-west", "ap-south")
CURRENCIES = ("EUR", "USD", "GBP", "JPY")


def _order(rng: random.Random, n: int) -> Message:
    label = rng.choice(ORDER_LABELS)
    user = {
        "amount": TypedValue(ValueType.LONG, rng.choice((40, 250, 900, 1500, 4000))),
        "currency": TypedValue(ValueType.STRING, rng.choice(CURRENCIES)),
        "region": TypedValue(ValueType.STRING, rng.choice(REGIONS)),
    }
    if label == "refund":
        # .NET publishers send small integers as 32-bit int; some old ones as 64-bit long
        tier_type = ValueType.INT if rng.random() < 0.7 else ValueType.LONG
        user["tier"] = TypedValue(tier_type, rng.choice((1, 3)))
        user["region"] = TypedValue(ValueType.STRING, "eu")
    if rng.random() < 0.2:
        user["express"] = TypedValue(ValueType.BOOL, True)
        user["priority"] = TypedValue(ValueType.INT, 1)
    if rng.random() < 0.05:
        user["test"] = TypedValue(ValueType.BOOL, True)
    if rng.random() < 0.03:
        user["amount"] = TypedValue(ValueType.STRING, "n/a")  # a publisher bug: string amount
    sys = {"MessageId": TypedValue(ValueType.STRING, f"order-{n:04d}"), "Label": TypedValue(ValueType.STRING, label)}
    if user.get("express"):
        sys["ContentType"] = TypedValue(ValueType.STRING, "application/json")
    return Message(sys=sys, user=user, body=b"{}")


def _payment(rng: random.Random, n: int) -> Message:
    label = "chargeback" if rng.random() < 0.1 else "payment.captured"
    user = {
        "amount": TypedValue(ValueType.LONG, rng.choice((20, 800, 6000))),
        "risk_score": TypedValue(ValueType.DOUBLE, round(rng.random(), 2)),
        "country": TypedValue(ValueType.STRING, rng.choice(("DE", "FR", "NL", "BR", "US"))),
    }
    sys = {"MessageId": TypedValue(ValueType.STRING, f"payment-{n:04d}"), "Label": TypedValue(ValueType.STRING, label)}
    return Message(sys=sys, user=user, body=b"{}")


def publish_sample_traffic(emulator: Emulator, topics: Iterable[str], count: int = 300, seed: int = 7) -> None:
    """Send a deterministic mix of messages to each topic (payment-like to 'payments', else orders)."""
    rng = random.Random(seed)
    for topic in topics:
        make = _payment if same_name(topic, "payments") else _order
        emulator.publish(topic, [make(rng, n) for n in range(count)])


def catch_all_subscriptions(live: DesiredState) -> dict[str, str]:
    """Per topic, a live subscription that takes every message (an action-less true filter): peek
    there; one with no rule action first, whose every message is one sent message (a rule action
    adds a copy of its own, with a sequence number of its own)."""
    found: dict[str, tuple[bool, str]] = {}
    for topic, sub in live.subscriptions():
        rules = sub.rules or ()
        takes_all = any(isinstance(r.filter, TrueFilter) and not r.has_action for r in rules)
        copies = any(r.has_action for r in rules)
        if takes_all and (topic.name not in found or (found[topic.name][0] and not copies)):
            found[topic.name] = (copies, sub.name)
    return {topic: sub for topic, (_, sub) in found.items()}


def spark_available() -> str | None:
    """None when a local Spark can run here, else the reason it cannot (the spark extra is optional)."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'sbrules[spark]')"
    if shutil.which("java") is None:
        return "no Java runtime on PATH (Spark needs Java 17)"
    return None


def run_traffic_step(
    emulator: Emulator, target: Target, rules: operations.Rules, plan: Plan, live: DesiredState,
    echo: Callable[[str], None],
) -> None:
    """Publish, sample the catch-all subscriptions into Parquet, print the impact of ``plan`` (read
    with its bystanders) and write it as an HTML report (kept after the demo; its path is printed)."""
    from reconciler.traffic.report.render import render_report

    catch_alls = catch_all_subscriptions(live)
    if not catch_alls:
        echo("No live catch-all subscription to peek all traffic from; skipping the traffic report.")
        return
    publish_sample_traffic(emulator, catch_alls)
    with tempfile.TemporaryDirectory(prefix="sbrules-demo-") as dataset:
        for topic, subscription in catch_alls.items():
            stats = operations.sample(target, topic, [subscription], dataset)
            echo(f"sbrules sample --topic {topic} --subscription {subscription}: {stats.written} messages peeked")
        result = operations.impact(rules, plan, dataset)
        report = result.report
        echo("")
        for warning in result.warnings:
            echo(f"warning: {warning}")
        echo(render_report(report, "text"))
    fd, path = tempfile.mkstemp(prefix="sbrules-demo-traffic-", suffix=".html")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(render_report(report, "html"))
    echo(f"\nThe same report as one HTML file (chart, each rule change beside its traffic, example messages): {path}")
