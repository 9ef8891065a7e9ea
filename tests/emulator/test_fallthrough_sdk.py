"""End to end: `sbrules apply` of a fall-through subscription to the emulator, messages published
with Microsoft's azure-servicebus SDK; the fall-through subscription holds exactly the messages
no other subscription receives, as reconciler.sql routing computes them in Python."""

from __future__ import annotations

import textwrap

import pytest
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

#: message id -> (subject, application properties): every case of absent, null and present values
MESSAGES: dict[str, tuple[str | None, dict]] = {
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


@pytest.fixture
def emulator():
    subs = tuple(model.Subscription(name) for name in ("billing", "audit", "tap", "leftovers"))
    with Emulator(model.DesiredState(topics=(model.Topic("orders", subs),))) as emu:
        yield emu


def _ids(client: ServiceBusClient, subscription: str) -> set[str]:
    with client.get_subscription_receiver("orders", subscription) as receiver:
        return {str(m.message_id) for m in receiver.peek_messages(max_message_count=100)}


def test_the_fallthrough_holds_exactly_the_unrouted_messages(emulator, run_cli, tmp_path, monkeypatch):
    rules = tmp_path / "orders.yaml"
    rules.write_text(textwrap.dedent(RULES).lstrip())
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", emulator.connection_string)
    code, out, err = run_cli("apply", rules, "--auto-approve")
    assert code == 0, out + err
    assert run_cli("plan", rules, "--detailed-exitcode")[0] == 0

    with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as client:
        with client.get_topic_sender("orders", keep_alive=0) as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(mid, message_id=mid, subject=subject, application_properties=props)
                    for mid, (subject, props) in MESSAGES.items()
                ]
            )
        received = {name: _ids(client, name) for name in ("billing", "audit", "tap", "leftovers")}

    desired = load_paths([rules])
    topic = desired.topic("orders")
    unrouted = set()
    for mid, (subject, props) in MESSAGES.items():
        message = Message.from_json({"sys": {"MessageId": mid, **({"Label": subject} if subject else {})}, "user": props})
        others = [s for s in topic.subscriptions if not s.sampling_tap and not s.fallthrough]
        if not any(route_rules(s.rules or (), message).delivered for s in others):
            unrouted.add(mid)

    assert received["tap"] == set(MESSAGES), received
    assert received["leftovers"] == unrouted
    assert received["leftovers"] == set(MESSAGES) - received["billing"] - received["audit"]
    assert unrouted == {"us", "bare", "null-region", "upper-eu", "plain-refund", "refund-no-vip", "small"}
