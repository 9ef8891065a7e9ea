"""The `$management` node over the wire: exact encodings, status codes and error conditions (docs/protocol.md §0-§9)."""

from __future__ import annotations

import time
import uuid

import proton
import pytest
from proton import Array, ConnectionException, Data, Described, Timeout, symbol, ulong
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, LinkDetached

from reconciler.amqp import codec, messages
from reconciler.emulator import Emulator

from .conftest import ORDERS
from .raw import RawManagement

ADD = "com.microsoft:add-rule"
REMOVE = "com.microsoft:remove-rule"
ENUMERATE = "com.microsoft:enumerate-rules"
PEEK = "com.microsoft:peek-message"


def _sql_rule(name: str, expression: str, action: str | None = None) -> dict:
    return {
        "rule-name": name,
        "rule-description": {
            "sql-filter": {"expression": expression},
            "sql-rule-action": None if action is None else {"expression": action},
            "rule-name": name,
        },
    }


@pytest.fixture
def eu(emulator):
    with RawManagement(emulator, "orders/Subscriptions/eu") as mgmt:
        yield mgmt


def test_enumerate_rules_uses_the_service_descriptor_codes(emulator):
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        assert mgmt.request(ADD, _sql_rule("big", "amount > 10", "SET tier = 'gold'"))[0] == 200
        status, props, body = mgmt.request(ENUMERATE, {"top": 100, "skip": 0})
    assert status == 200 and props["statusCode"] == 200 and type(props["statusCode"]) is proton.int32
    default, big = [entry["rule-description"] for entry in body["rules"]]
    assert default.descriptor == ulong(0x0000013700000004)
    assert default.value[0] == Described(ulong(0x000001370000007), [])
    assert default.value[1] == Described(ulong(0x0000013700000005), [])
    assert default.value[2] == "$Default"
    assert big.value[0] == Described(ulong(0x000001370000006), ["amount > 10", 20])
    assert big.value[1] == Described(ulong(0x0000013700000006), ["SET tier = 'gold'", 20])
    assert codec.decode_rule_description(big).name == "big"


def test_correlation_filter_round_trips_with_typed_properties(eu):
    body = {
        "rule-name": "typed",
        "rule-description": {
            "correlation-filter": {"label": "created", "properties": {"n": proton.int32(3), "s": "x"}},
        },
    }
    assert eu.request(ADD, body)[0] == 200
    _, _, listing = eu.request(ENUMERATE, {"top": 10, "skip": 1})
    (entry,) = listing["rules"]
    corr = entry["rule-description"].value[0]
    assert corr.descriptor == ulong(0x000001370000009)
    assert corr.value[4] == "created"
    assert corr.value[8] == {"n": 3, "s": "x"} and type(corr.value[8]["n"]) is proton.int32


def test_enumerate_pages_with_top_and_skip_and_204_past_the_end(eu):
    for i in range(5):
        assert eu.request(ADD, _sql_rule(f"r{i}", f"n = {i}"))[0] == 200
    pages = []
    skip = 0
    while True:
        status, _, body = eu.request(ENUMERATE, {"top": 2, "skip": skip})
        if status == 204:
            break
        names = [e["rule-description"].value[2] for e in body["rules"]]
        pages.append(names)
        skip += len(names)
    assert pages == [["eu", "r0"], ["r1", "r2"], ["r3", "r4"]]


def test_duplicate_rule_is_409_entity_already_exists(eu):
    status, props, _ = eu.request(ADD, _sql_rule("eu", "1=1"))
    assert status == 409
    assert props["errorCondition"] == symbol("com.microsoft:entity-already-exists")
    assert type(props["errorCondition"]) is symbol
    assert "already exists" in props["statusDescription"]


def test_invalid_sql_is_400_with_the_parser_message(eu):
    status, props, _ = eu.request(ADD, _sql_rule("bad", "amount >"))
    assert status == 400
    assert props["errorCondition"] == "com.microsoft:argument-error"
    assert "bad" in props["statusDescription"] and "invalid SQL filter" in props["statusDescription"]
    status, props, _ = eu.request(ADD, _sql_rule("bad2", "1=1", "SET"))
    assert status == 400 and "invalid SQL action" in props["statusDescription"]


def test_a_topic_at_its_sql_filter_limit_refuses_one_more_and_still_takes_correlation_filters():
    """2,000 SQL (or true/false) filters over all subscriptions of a topic, as the service counts."""
    from reconciler import limits
    from reconciler.model import DesiredState, Rule, SqlFilter, Subscription, Topic, TrueFilter

    half = limits.SQL_FILTERS_PER_TOPIC.value // 2
    subs = tuple(
        Subscription(name, tuple(Rule(f"r{i}", SqlFilter(f"n = {i}") if i % 2 else TrueFilter()) for i in range(half)))
        for name in ("a", "b")
    )
    with Emulator(DesiredState((Topic("t", subs),))) as emulator, RawManagement(emulator, "t/Subscriptions/a") as mgmt:
        status, props, _ = mgmt.request(ADD, _sql_rule("over", "n = -1"))
        assert (status, props["errorCondition"]) == (403, "amqp:resource-limit-exceeded")
        assert "2000" in props["statusDescription"]
        correlation = {"rule-name": "c", "rule-description": {"correlation-filter": {"label": "x"}, "rule-name": "c"}}
        assert mgmt.request(ADD, correlation)[0] == 200
        assert mgmt.request(REMOVE, {"rule-name": "r1"})[0] == 200
        assert mgmt.request(ADD, _sql_rule("over", "n = -1"))[0] == 200


def test_remove_missing_rule_is_404_not_found(eu):
    status, props, _ = eu.request(REMOVE, {"rule-name": "nope"})
    assert (status, props["errorCondition"]) == (404, "amqp:not-found")
    assert eu.request(REMOVE, {"rule-name": "eu"})[0] == 200
    assert eu.request(ENUMERATE, {"top": 10, "skip": 0})[0] == 204


def test_bad_requests_get_error_responses(eu):
    assert eu.request("com.microsoft:frobnicate", {})[0] == 501
    assert eu.request(None, {})[0] == 400
    assert eu.request(ENUMERATE, ["top", 1])[0] == 400
    assert eu.request(ENUMERATE, {"top": "ten", "skip": 0})[0] == 400
    assert eu.request(ENUMERATE, {"skip": 0})[0] == 400
    assert eu.request(ADD, _sql_rule("x" * 51, "1=1"))[0] == 400
    assert eu.request(ADD, _sql_rule("a/b", "1=1"))[0] == 400
    assert eu.request(ADD, {"rule-name": "n", "rule-description": {}})[0] == 400
    assert eu.request(PEEK, {"from-sequence-number": 1})[0] == 400
    assert eu.request("com.microsoft:renew-lock", {"lock-tokens": ["not-a-uuid"]})[0] == 400


def test_rules_on_a_missing_subscription_are_404(emulator):
    with RawManagement(emulator, "orders") as mgmt:
        status, props, _ = mgmt.request(ENUMERATE, {"top": 10, "skip": 0})
    assert status == 400 and props["errorCondition"] == "amqp:not-allowed"
    with pytest.raises(LinkDetached):
        RawManagement(emulator, "orders/Subscriptions/ghost")


class _ReplyTarget(LinkOption):
    def __init__(self, address: str) -> None:
        self.address = address

    def apply(self, link: proton.Link) -> None:
        link.target.address = self.address


def test_response_goes_to_reply_to_with_correlation_id(emulator):
    with _token_only(emulator) as helper:
        assert helper.put_token(f"sb://127.0.0.1:{emulator.port}/orders") == 202
        node = "orders/Subscriptions/all/$management"
        sender = helper.conn.create_sender(node, name="req")
        other = helper.conn.create_receiver(node, name="other", credit=10, options=_ReplyTarget("other-reply"))
        mine = helper.conn.create_receiver(node, name="mine", credit=10, options=_ReplyTarget("my-reply"))
        request = proton.Message(
            id=uuid.UUID(int=7), reply_to="my-reply", body={"top": 1, "skip": 0}, properties={"operation": ENUMERATE}
        )
        sender.send(request)
        reply = mine.receive(timeout=5)
        assert reply.correlation_id == uuid.UUID(int=7)
        with pytest.raises(Timeout):
            other.receive(timeout=0.3)


def test_peek_message_returns_wire_messages_then_204(emulator):
    emulator.broker.publish(
        emulator_address("orders"), proton.Message(body="hello", id="m1", properties={"k": proton.int32(1)})
    )
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        status, _, body = mgmt.request(PEEK, {"from-sequence-number": 1, "message-count": 10})
        assert status == 200
        (entry,) = body["messages"]
        decoded = messages.decode_model_message(entry["message"])
        assert decoded.message.sys["SequenceNumber"].value == 1
        assert decoded.message.sys["MessageId"].value == "m1"
        assert "x-opt-enqueued-time" in decoded.annotations
        assert mgmt.request(PEEK, {"from-sequence-number": 2, "message-count": 10})[0] == 204


def test_sessions_listing_uses_sessions_ids(emulator):
    for sid in ("a", "b"):
        emulator.broker.publish(emulator_address("orders"), proton.Message(body=sid, group_id=sid))
    with RawManagement(emulator, "orders/Subscriptions/sessions") as mgmt:
        status, _, body = mgmt.request(
            "com.microsoft:get-message-sessions", {"skip": 0, "top": 10, "last-updated-time": proton.timestamp(0)}
        )
        assert status == 200
        assert list(body["sessions-ids"].elements) == ["a", "b"]
        status, props, _ = mgmt.request("com.microsoft:get-session-state", {"session-id": "a"})
        assert (status, props["errorCondition"]) == (410, "com.microsoft:session-lock-lost")


def test_schedule_and_cancel_over_management(emulator):
    later = proton.timestamp(int((time.time() + 3600) * 1000))
    payload = bytes(proton.Message(body="s", annotations={symbol("x-opt-scheduled-enqueue-time"): later}).encode())
    with RawManagement(emulator, "orders") as mgmt:
        status, _, body = mgmt.request(
            "com.microsoft:schedule-message", {"messages": [{"message": payload, "message-id": "s1"}]}
        )
        assert status == 200
        numbers = list(body["sequence-numbers"].elements)
        assert body["sequence-numbers"].type == Data.LONG
        cancel = {"sequence-numbers": Array(proton.UNDESCRIBED, Data.LONG, *numbers)}
        assert mgmt.request("com.microsoft:cancel-scheduled-message", cancel)[0] == 200
        status, props, _ = mgmt.request("com.microsoft:cancel-scheduled-message", cancel)
        assert (status, props["errorCondition"]) == (404, "com.microsoft:message-not-found")


def test_management_link_needs_a_token(emulator):
    with pytest.raises(LinkDetached) as info:
        RawManagement(emulator, "orders/Subscriptions/all", token=False)
    assert "unauthorized" in str(info.value)


@pytest.mark.parametrize(
    "audience_suffix, key, expiry_offset",
    [("orders", "wrong-key", 600), ("orders", None, -10)],
    ids=["bad-signature", "expired"],
)
def test_bad_tokens_are_401(emulator, audience_suffix, key, expiry_offset):
    with _token_only(emulator) as helper:
        status = helper.put_token(
            f"sb://127.0.0.1:{emulator.port}/{audience_suffix}", key=key, expiry=int(time.time()) + expiry_offset
        )
    assert status == 401


def test_token_for_one_entity_does_not_cover_another(emulator):
    with _token_only(emulator) as helper:
        assert helper.put_token(f"sb://127.0.0.1:{emulator.port}/work") == 202
        with pytest.raises(LinkDetached):
            helper.conn.create_sender("orders/Subscriptions/all/$management", name="x")


def test_connection_without_token_is_closed_after_the_deadline():
    with Emulator(cbs_deadline=0.3) as emu:
        conn = BlockingConnection(f"amqp://127.0.0.1:{emu.port}", allowed_mechs="ANONYMOUS", timeout=5)
        with pytest.raises(ConnectionException):
            conn.wait(lambda: False, timeout=3, msg="waiting for the server to close")
        assert emu.running


class _token_only:
    """A bare connection with put_token (no management links)."""

    def __init__(self, emulator: Emulator) -> None:
        self.helper = RawManagement.__new__(RawManagement)
        self.helper.emulator = emulator
        self.helper.conn = BlockingConnection(
            f"amqp://127.0.0.1:{emulator.port}", allowed_mechs="ANONYMOUS", timeout=5
        )

    def __enter__(self) -> RawManagement:
        return self.helper

    def __exit__(self, *exc: object) -> None:
        self.helper.conn.close()


def emulator_address(path: str):
    from reconciler.emulator.namespace import parse_address

    return parse_address(path)


def test_batch_delete_messages(emulator):
    for body in ("a", "b", "c"):
        emulator.broker.publish(emulator_address("orders"), proton.Message(body=body))
    later = proton.timestamp(int((time.time() + 60) * 1000))
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        status, _, body = mgmt.request(
            "com.microsoft:batch-delete-messages", {"message-count": proton.int32(2), "enqueued-time-utc": later}
        )
        assert (status, body) == (200, {"message-count": 2})
        remaining = emulator.namespace.subscription("orders", "all").store.messages
        assert list(remaining) == [3]
        early = proton.timestamp(0)
        status, props, _ = mgmt.request(
            "com.microsoft:batch-delete-messages", {"message-count": proton.int32(2), "enqueued-time-utc": early}
        )
        assert (status, props["errorCondition"]) == (204, "com.microsoft:message-not-found")


def test_receiver_is_detached_when_its_token_expires(clock):
    with Emulator(ORDERS, token_clock=clock) as emulator:
        emulator.broker.publish(emulator_address("orders"), proton.Message(body="x"))
        with _token_only(emulator) as helper:
            expiry = int(clock()) + 2
            assert helper.put_token(f"sb://127.0.0.1:{emulator.port}/orders", expiry=expiry) == 202
            receiver = helper.conn.create_receiver("orders/Subscriptions/all", name="r", credit=0)
            clock.now = expiry
            receiver.flow(1)
            with pytest.raises(LinkDetached, match="expired"):
                receiver.receive(timeout=3)
