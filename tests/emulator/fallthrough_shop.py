"""A topic with a fall-through subscription, run for real: `sbrules apply` to an emulator, messages
published with Microsoft's azure-servicebus SDK (absent, null and present properties), and what
each subscription then holds. Shared by the emulator test and the Spark (`sbrules analyze`) test."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Callable

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from reconciler import model
from reconciler.emulator import Emulator
from reconciler.model import Message
from reconciler.rulefiles import load_paths
from reconciler.sql.routing import route_rules

RULES = """
topic: orders
subscriptions:
  billing:
    rules:
      - {name: eu, sql: "region = 'eu' OR NOT (amount <= 100)"}
  audit:
    rules:
      - {name: refunds, correlation: {subject: refund, properties: {vip: true}}}
  tap: {sampling_tap: true, rules: [{name: all, filter: true}]}
  leftovers: {fallthrough: true}
"""
SUBSCRIPTIONS = ("billing", "audit", "tap", "leftovers")

#: message id -> (subject, application properties)
MESSAGES: dict[str, tuple[str | None, dict[str, Any]]] = {
    "eu": (None, {"region": "eu"}),
    "us": (None, {"region": "us"}),
    "bare": (None, {}),
    "null-region": (None, {"region": None}),
    "upper-eu": ("other", {"region": "EU"}),
    "vip-refund": ("refund", {"vip": True}),
    "plain-refund": ("refund", {"vip": False}),
    "refund-no-vip": ("refund", {}),
    "both": ("refund", {"vip": True, "region": "eu"}),
    "big": (None, {"amount": 250}),
    "small": (None, {"amount": 50, "region": "us"}),
    "big-and-us": ("refund", {"amount": 101.5, "region": "us"}),
}
#: what nobody but the fall-through receives, worked out by hand from the rules above
UNROUTED = {"us", "bare", "null-region", "upper-eu", "plain-refund", "refund-no-vip", "small"}

RunCli = Callable[..., tuple[int, str, str]]


#: A subscription no rule file mentions, made by hand in the namespace: it receives messages too.
BYSTANDER = model.Subscription("legacy", rules=(model.Rule("us", model.SqlFilter("region = 'us'")),))


def empty_emulator(*extra: model.Subscription) -> Emulator:
    """An emulator with the topic and its four subscriptions, each with the service's $Default rule
    (and the ``extra`` subscriptions, with their rules)."""
    subs = tuple(model.Subscription(name) for name in SUBSCRIPTIONS) + extra
    return Emulator(model.DesiredState(topics=(model.Topic("orders", subs),)))


def apply_and_publish(
    emulator: Emulator, run_cli: RunCli, directory: Path, subscriptions: tuple[str, ...] = SUBSCRIPTIONS
) -> tuple[Path, dict[str, set[str]]]:
    """Write the rule file, `sbrules apply` it, publish MESSAGES with the SDK; the rule file and the
    message ids each of ``subscriptions`` holds (peeked, so they stay)."""
    rules = directory / "orders.yaml"
    rules.write_text(textwrap.dedent(RULES).lstrip())
    code, out, err = run_cli("apply", rules, "--auto-approve", "--connection-string", emulator.connection_string)
    assert code == 0, out + err
    with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as client:
        with client.get_topic_sender("orders", keep_alive=0) as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(mid, message_id=mid, subject=subject, application_properties=props)
                    for mid, (subject, props) in MESSAGES.items()
                ]
            )
        held = {}
        for name in subscriptions:
            with client.get_subscription_receiver("orders", name) as receiver:
                held[name] = {str(m.message_id) for m in receiver.peek_messages(max_message_count=100)}
    return rules, held


def python_unrouted(rules: Path) -> set[str]:
    """The messages no receiving subscription takes, by reconciler.sql routing in Python."""
    topic = load_paths([rules]).topic("orders")
    assert topic is not None
    receivers = [s for s in topic.subscriptions if not s.sampling_tap and not s.fallthrough]
    out = set()
    for mid, (subject, props) in MESSAGES.items():
        sys = {"MessageId": mid, **({"Label": subject} if subject else {})}
        message = Message.from_json({"sys": sys, "user": props})
        if not any(route_rules(s.rules or (), message).delivered for s in receivers):
            out.add(mid)
    return out
