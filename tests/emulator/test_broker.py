"""Namespace and broker rules without the network: addresses, seeding, locks, delivery limits, SAS."""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import hmac
import time
import uuid
from urllib.parse import quote

import proton
import pytest

from reconciler import model
from reconciler.emulator.auth import Grant, TokenRejected, TokenValidator
from reconciler.emulator.broker import Broker
from reconciler.emulator.namespace import (
    MAX_DELIVERY_COUNT,
    Namespace,
    OperationError,
    address_path,
    parse_address,
)
from reconciler.namespace.credentials import sas_token

from .conftest import ORDERS

pytestmark = pytest.mark.unit


@pytest.fixture
def broker():
    namespace = Namespace()
    namespace.seed(ORDERS)
    namespace.create_queue("work")
    return Broker(namespace, lock_duration=_dt.timedelta(seconds=30))


def _send(broker: Broker, path: str, body: str = "x", **fields) -> None:
    broker.publish(parse_address(path), proton.Message(body=body, **fields))


@pytest.mark.parametrize(
    "address, node, subscription, dead_letter, management",
    [
        ("orders", "orders", None, False, False),
        ("amqps://h:5671/orders/Subscriptions/all", "orders/Subscriptions/all", "all", False, False),
        ("orders/subscriptions/all/$DeadLetterQueue", "orders/Subscriptions/all/$DeadLetterQueue", "all", True, False),
        ("sb://h/work/$management", "work/$management", None, False, True),
        # topic and queue names are paths, as the service's are
        ("team/orders", "team/orders", None, False, False),
        ("sb://h/team/eu/orders/Subscriptions/all/$management", "team/eu/orders/Subscriptions/all/$management",
         "all", False, True),
    ],
)
def test_parse_address(address, node, subscription, dead_letter, management):
    parsed = parse_address(address)
    assert (parsed.node, parsed.subscription, parsed.dead_letter, parsed.management) == (
        node, subscription, dead_letter, management
    )


def test_unknown_address_shapes_are_404():
    with pytest.raises(OperationError) as info:
        parse_address("orders/$unknown")
    assert info.value.status == 404
    assert address_path("sb://ns.servicebus.windows.net/") == ""


def test_seed_gives_default_only_to_subscriptions_without_rules(broker):
    assert broker.namespace.rules("orders", "all") == [
        model.Rule("$Default", model.TrueFilter(), model.EmptyAction())
    ]
    assert [r.name for r in broker.namespace.rules("orders", "EU")] == ["eu"]


def test_sequence_numbers_are_per_entity(broker):
    _send(broker, "orders", "a", properties={"region": "eu"})
    _send(broker, "orders", "b")
    all_store = broker.namespace.subscription("orders", "all").store
    eu_store = broker.namespace.subscription("orders", "eu").store
    assert sorted(all_store.messages) == [1, 2]
    assert sorted(eu_store.messages) == [1]


def test_lock_expiry_makes_the_message_visible_again(broker):
    _send(broker, "work")
    store = broker.namespace.queue("work").store
    stored, _ = broker.receive(store, peek_lock=True)
    assert broker.receive(store, peek_lock=True) is None
    later = stored.locked_until + _dt.timedelta(seconds=1)
    broker.tick(later)
    assert stored.lock_token is None
    again, payload = broker.receive(store, peek_lock=True, now=later)
    assert again.sequence_number == stored.sequence_number
    message = proton.Message()
    message.decode(payload)
    assert message.delivery_count == 1
    assert message.annotations["x-opt-sequence-number"] == stored.sequence_number


def test_message_over_max_delivery_count_is_dead_lettered(broker):
    _send(broker, "work")
    queue = broker.namespace.queue("work")
    for _ in range(MAX_DELIVERY_COUNT):
        stored, _ = broker.receive(queue.store, peek_lock=True)
        broker.abandon(queue.store, stored.lock_token)
    assert broker.receive(queue.store, peek_lock=True) is None
    (dead,) = queue.dead_letters.messages.values()
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"


def test_settling_with_an_unknown_lock_is_lock_lost(broker):
    store = broker.namespace.queue("work").store
    with pytest.raises(OperationError) as info:
        broker.complete(store, uuid.uuid4())
    assert (info.value.status, info.value.condition) == (410, "com.microsoft:message-lock-lost")


def test_sending_to_a_subscription_is_not_allowed(broker):
    with pytest.raises(OperationError) as info:
        _send(broker, "orders/Subscriptions/all")
    assert info.value.condition == "amqp:not-allowed"


def test_session_lock_is_exclusive(broker):
    _send(broker, "orders", "s", group_id="g")
    store = broker.namespace.subscription("orders", "sessions").store
    assert broker.accept_session(store, None, owner="a")[0] == "g"
    with pytest.raises(OperationError) as info:
        broker.accept_session(store, "g", owner="b")
    assert info.value.condition == "com.microsoft:session-cannot-be-locked"
    assert broker.receive(store, peek_lock=True) is None
    broker.release_session(store, "g", owner="a")
    assert broker.accept_session(store, "g", owner="b")[0] == "g"


def test_a_batch_transfer_publishes_each_message_once(broker):
    inner = [bytes(proton.Message(id=f"m{i}", body=f"m{i}").encode()) for i in range(3)]
    data = proton.Data()
    for item in inner:
        data.put_described()
        data.enter()
        data.put_ulong(0x75)
        data.put_binary(item)
        data.exit()
    broker.publish(parse_address("work"), bytes(proton.Message(id="m0").encode()) + bytes(data.encode()))
    stored = broker.namespace.queue("work").store.messages
    assert [m.payload for m in stored.values()] == inner
    assert [m.message_id for m in stored.values()] == ["m0", "m1", "m2"]


def test_an_undecodable_message_is_refused_as_the_senders_error(broker):
    with pytest.raises(OperationError) as info:
        broker.publish(parse_address("work"), b"\x00Sw\xa1\xff not really a message")
    assert (info.value.status, info.value.condition) == (400, "amqp:decode-error")
    assert not broker.namespace.queue("work").store.messages


def test_sas_tokens_are_checked_for_key_signature_audience_and_expiry():
    validator = TokenValidator({"root": "k1"})
    soon = int(time.time()) + 60
    grant = validator.validate(sas_token("sb://h:1/orders", "root", "k1", soon), "jwt", "sb://h:1/orders")
    assert grant.covers("orders/Subscriptions/a/$management") and not grant.covers("orders2")
    for token, reason in [
        (sas_token("sb://h:1/orders", "root", "other", soon), "invalid signature"),
        (sas_token("sb://h:1/orders", "nobody", "k1", soon), "unknown shared access key name"),
        (sas_token("sb://h:1/orders", "root", "k1", int(time.time()) - 1), "expired"),
        ("Bearer abc", "only SharedAccessSignature"),
    ]:
        with pytest.raises(TokenRejected, match=reason):
            validator.validate(token, "servicebus.windows.net:sastoken", None)
    with pytest.raises(TokenRejected, match="does not cover"):
        validator.validate(sas_token("sb://h:1/orders", "root", "k1", soon), "jwt", "sb://h:1/work")
    assert "k1" not in repr(validator)
    assert Grant("", soon).covers("anything/at/all")


def test_a_token_is_checked_over_its_sr_as_written_whatever_the_url_encoding():
    validator = TokenValidator({"root": "k1"})
    soon = int(time.time()) + 60
    lower_case = "sb%3a%2f%2fh%3a1%2forders"  # as HttpUtility.UrlEncode writes it; WebUtility writes %3A
    digest = hmac.new(b"k1", f"{lower_case}\n{soon}".encode(), hashlib.sha256).digest()
    token = f"SharedAccessSignature sr={lower_case}&sig={quote(base64.b64encode(digest).decode(), safe='')}&se={soon}&skn=root"
    assert validator.validate(token, "jwt", None).covers("orders/Subscriptions/a")
    with pytest.raises(TokenRejected, match="invalid signature"):
        validator.validate(token.replace("orders", "work"), "jwt", None)


def test_expired_messages_are_dropped(broker):
    _send(broker, "work", "short", ttl=0.5)
    _send(broker, "work", "long")
    store = broker.namespace.queue("work").store
    broker.tick(_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=1))
    assert [m.sequence_number for m in store.messages.values()] == [2]
    assert store.expiring == set()


def test_the_tick_visits_only_stores_with_timed_work(broker):
    """An idle store costs the 50 ms tick nothing: stores join the tick's set with a time-to-live, a
    schedule or a lock, and leave it once that work is done."""
    _send(broker, "orders", "plain", properties={"region": "eu"})
    assert broker.namespace.timed_stores == set()
    _send(broker, "work", "short", ttl=0.5)
    store = broker.namespace.queue("work").store
    assert broker.namespace.timed_stores == {store}
    later = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=1)
    assert broker.tick(later)
    assert not store.messages
    broker.tick(later)
    assert broker.namespace.timed_stores == set()
    _send(broker, "work", "locked")
    broker.receive(store, peek_lock=True)
    assert broker.namespace.timed_stores == {store}


def test_deleting_a_subscription_stops_routing_to_it(broker):
    broker.namespace.delete_subscription("orders", "all")
    _send(broker, "orders", "x", properties={"region": "eu"})
    assert [s.name for s in broker.namespace.topic("orders").subscriptions.values()] == ["sessions", "eu"]
    with pytest.raises(OperationError):
        broker.namespace.delete_subscription("orders", "all")


def _peeked(broker: Broker, store, start: int, count: int = 100) -> list[proton.Message]:
    out = []
    for payload in broker.peek(store, start, count):
        message = proton.Message()
        message.decode(payload)
        out.append(message)
    return out


def test_peek_serves_each_message_as_published_with_the_brokers_fields(broker):
    for n in range(1, 6):
        _send(broker, "work", body=f"b{n}", id=f"m{n}", subject="s", priority=7, ttl=60,
              properties={"n": n}, annotations={"x-app": "kept"})
    queue = broker.namespace.queue("work")
    first, _ = broker.receive(queue.store, peek_lock=True)
    broker.complete(queue.store, first.lock_token)
    second, _ = broker.receive(queue.store, peek_lock=True)
    broker.dead_letter(queue.store, second.lock_token, "why", "because", {"extra": True})
    third, _ = broker.receive(queue.store, peek_lock=True)
    broker.abandon(queue.store, third.lock_token, {"n": 30})
    _send(broker, "work", body="b6", id="m6")

    peeked = _peeked(broker, queue.store, 2)
    assert [m.annotations["x-opt-sequence-number"] for m in peeked] == [3, 4, 5, 6]
    assert [m.id for m in peeked] == ["m3", "m4", "m5", "m6"]
    assert [m.body for m in peeked] == ["b3", "b4", "b5", "b6"]
    assert [m.properties for m in peeked] == [{"n": 30}, {"n": 4}, {"n": 5}, None]
    assert [m.delivery_count for m in peeked] == [1, 0, 0, 0]
    assert all(m.annotations["x-app"] == "kept" for m in peeked[:3])
    assert (peeked[0].priority, peeked[0].ttl, peeked[0].subject) == (7, 60, "s")
    assert [m.id for m in _peeked(broker, queue.store, 4, count=2)] == ["m4", "m5"]

    (dead,) = _peeked(broker, queue.dead_letters, 1)
    assert dead.id == "m2"
    assert dead.properties == {"n": 2, "DeadLetterReason": "why", "DeadLetterErrorDescription": "because", "extra": True}
    assert dead.annotations["x-app"] == "kept"
