"""Routing: rules set through reconciler.amqp, traffic sent and observed with Microsoft's SDK.

The expected routing is computed with ``reconciler.sql.route_rules`` over the same rules, so the
test checks the emulator's wire path (add-rule decoding, copies, RuleName, actions, dead letters)
against the evaluator, message by message.
"""

from __future__ import annotations

import contextlib

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue

from reconciler import model, sql
from reconciler.amqp.client import ManagementClient
from reconciler.emulator import Emulator, OperationError
from reconciler.model import CorrelationFilter, Rule, SqlFilter, SqlRuleAction, TypedValue

RULES = {
    "eu": [Rule("eu", CorrelationFilter(properties={"region": "eu"}))],
    "big": [
        Rule("big", SqlFilter("amount > 100")),
        Rule("tagged", SqlFilter("amount > 500"), SqlRuleAction("SET tier = 'gold'")),
    ],
    "labels": [
        Rule("created", CorrelationFilter(subject="created")),
        Rule("none", SqlFilter("1=0")),
        Rule("relabel", SqlFilter("amount = 1"), SqlRuleAction("SET sys.Label = 'small'")),
    ],
    "strict": [Rule("typed", SqlFilter("code = 'x'"))],
}

MESSAGES = [
    {"body": "m0", "props": {"region": "eu", "amount": 50}, "subject": "created"},
    {"body": "m1", "props": {"region": "us", "amount": 200}},
    {"body": "m2", "props": {"region": "eu", "amount": 900, "code": "x"}},
    {"body": "m3", "props": {"amount": 1, "code": 5}, "subject": "updated"},
]


@contextlib.contextmanager
def _routed_namespace():
    """An emulator whose shop topic has RULES (set over AMQP) and MESSAGES (sent with the SDK)."""
    desired = model.DesiredState(
        topics=(model.Topic("shop", tuple(model.Subscription(name, ()) for name in RULES)),)
    )
    with Emulator(desired) as emu:
        with ManagementClient(emu.connection_string, timeout=10) as mgmt:
            for sub, rules in RULES.items():
                for rule in rules:
                    mgmt.add_rule("shop", sub, rule)
            assert {sub: mgmt.list_rules("shop", sub) for sub in RULES} == RULES
        with ServiceBusClient.from_connection_string(emu.connection_string, retry_total=0) as client:
            with client.get_topic_sender("shop", keep_alive=0) as sender:
                for m in MESSAGES:
                    sender.send_messages(
                        ServiceBusMessage(m["body"], application_properties=m["props"], subject=m.get("subject"))
                    )
            yield emu, client


class Peeks:
    """Peeks of the routed namespace, one SDK receiver per entity opened on first use and kept.

    The tests below only read, so they share one namespace; an SDK receiver costs about a
    second to open and close (the SDK polls link readiness in 50 ms steps, and close joins a
    keep-alive thread that sleeps in 1 s steps), so each entity gets one.
    """

    def __init__(self, emulator: Emulator, client: ServiceBusClient, stack: contextlib.ExitStack) -> None:
        self.emulator = emulator
        self._client = client
        self._stack = stack
        self._receivers: dict[tuple[str, object], object] = {}

    def __call__(self, sub: str, sub_queue: ServiceBusSubQueue | None = None) -> list:
        """Every message on ``shop/sub`` (or its dead-letter queue), from the first on."""
        key = (sub, sub_queue)
        if key not in self._receivers:
            self._receivers[key] = self._stack.enter_context(
                self._client.get_subscription_receiver("shop", sub, sub_queue=sub_queue)
            )
        return self._receivers[key].peek_messages(max_message_count=50, sequence_number=1)


@pytest.fixture(scope="module")
def peek():
    with _routed_namespace() as (emu, client), contextlib.ExitStack() as stack:
        yield Peeks(emu, client, stack)


def _expected(sub: str) -> tuple[list[tuple[str, str | None]], list[str]]:
    """(body, RuleName) copies and dead-lettered bodies route_rules predicts for ``sub``."""
    copies, dead = [], []
    for m in MESSAGES:
        sys_props = {"Label": TypedValue("string", m["subject"])} if m.get("subject") else {}
        user = {k: TypedValue.infer(v) for k, v in m["props"].items()}
        result = sql.route_rules(RULES[sub], model.Message(sys=sys_props, user=user))
        if any(out.error for _, out in result.rule_results):
            dead.append(m["body"])
        copies.extend((m["body"], name) for name, _ in result.copies)
    return copies, dead


@pytest.mark.parametrize("sub", sorted(RULES))
def test_observed_routing_matches_the_rules(peek, sub):
    expected_copies, expected_dead = _expected(sub)
    observed = []
    for message in peek(sub):
        props = message.application_properties or {}
        rule_name = props.get(b"RuleName")
        observed.append((str(message), rule_name.decode() if rule_name else None))
    assert observed == expected_copies
    assert [str(m) for m in peek(sub, ServiceBusSubQueue.DEAD_LETTER)] == expected_dead
    assert peek.emulator.namespace.subscription("shop", sub).filter_errors == len(expected_dead)


def test_action_copy_carries_the_action_result(peek):
    seen = peek("big")
    tagged = [m for m in seen if (m.application_properties or {}).get(b"RuleName") == b"tagged"]
    assert [str(m) for m in tagged] == ["m2"]
    assert tagged[0].application_properties[b"tier"] == b"gold"
    plain = [m for m in seen if b"RuleName" not in (m.application_properties or {})]
    assert all(b"tier" not in m.application_properties for m in plain)


def test_action_can_set_a_system_property(peek):
    seen = peek("labels")
    relabelled = [m for m in seen if (m.application_properties or {}).get(b"RuleName") == b"relabel"]
    assert [(str(m), m.subject) for m in relabelled] == [("m3", "small")]
    assert [(str(m), m.subject) for m in seen if str(m) == "m0"] == [("m0", "created")]


def test_filter_errors_dead_letter_with_a_reason(peek):
    (dead,) = peek("strict", ServiceBusSubQueue.DEAD_LETTER)
    assert str(dead) == "m3"
    assert dead.dead_letter_reason == "FilterEvaluationException"
    assert "typed" in dead.dead_letter_error_description


def test_removing_a_rule_changes_routing():
    with _routed_namespace() as (emu, client):
        with ManagementClient(emu.connection_string, timeout=10) as mgmt:
            mgmt.remove_rule("shop", "eu", "eu")
            mgmt.add_rule("shop", "eu", Rule("us", CorrelationFilter(properties={"region": "us"})))
        with client.get_topic_sender("shop", keep_alive=0) as sender:
            sender.send_messages(ServiceBusMessage("late-eu", application_properties={"region": "eu"}))
            sender.send_messages(ServiceBusMessage("late-us", application_properties={"region": "us"}))
        with client.get_subscription_receiver("shop", "eu") as receiver:
            bodies = [str(m) for m in receiver.peek_messages(max_message_count=50)]
    assert bodies[-1] == "late-us" and "late-eu" not in bodies


def test_publish_is_routed_like_a_message_from_a_sender():
    desired = model.DesiredState(topics=(model.Topic("shop", (model.Subscription("eu", tuple(RULES["eu"])),)),))
    messages = [
        model.Message(user={"region": TypedValue("string", region)}, body=f"{n}-{region}".encode())
        for n, region in enumerate(("eu", "us", "eu"))
    ]
    with Emulator(desired) as emu:
        emu.publish("shop", messages)
        with pytest.raises(OperationError):
            emu.publish("no-such-topic", messages)
        with ServiceBusClient.from_connection_string(emu.connection_string, retry_total=0) as client:
            with client.get_subscription_receiver("shop", "eu") as receiver:
                seen = receiver.peek_messages(max_message_count=10)
    assert [(b"".join(m.body), m.application_properties[b"region"]) for m in seen] == [
        (b"0-eu", b"eu"),
        (b"2-eu", b"eu"),
    ]
