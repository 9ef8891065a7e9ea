"""The management client against the emulator over real loopback AMQP: every catalog operation."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid

import pytest

from reconciler import model as m
from reconciler.amqp import messages
from reconciler.amqp.client import ManagementClient
from reconciler.amqp.messaging import Disposition, ScheduledMessage, SettleMode
from reconciler.emulator import DEV_KEY, DEV_KEY_NAME, Emulator
from reconciler.emulator.namespace import parse_address
from reconciler.namespace import errors
from reconciler.namespace.credentials import SasKeyTokenProvider
from reconciler.namespace.retry import RetryPolicy

from .conftest import SEED

UTC = dt.timezone.utc


def publish(emulator, entity, **sys):
    """Put one message on a topic/queue through the emulator's broker (as a sender link would)."""
    user = sys.pop("user", {})
    msg = m.Message(sys={k: m.TypedValue.infer(v) for k, v in sys.items()}, user=user, body=b"payload")
    emulator.broker.publish(parse_address(entity), messages.encode_model_message(msg))


def test_rule_lifecycle_and_types(client, emulator):
    assert client.list_rules("orders", "billing") == [m.Rule("big", m.SqlFilter("amount > 100"))]
    assert client.list_rules("orders", "empty") == []
    corr = m.Rule("c", m.CorrelationFilter(subject="s", to="t", properties={"n": {"int": 3}, "l": 3, "f": 1.5}),
                  m.SqlRuleAction("SET x = 1"))
    client.add_rule("orders", "empty", corr)
    client.add_rule("orders", "empty", m.Rule("t", m.TrueFilter()))
    live = client.list_rules("orders", "empty")
    assert live[0] == corr
    assert live[0].filter.property_map["n"] != live[0].filter.property_map["l"]  # int 3 vs long 3 kept apart
    assert live[1].name == "t"
    client.remove_rule("orders", "empty", "c")
    assert [r.name for r in client.list_rules("orders", "empty")] == ["t"]


def test_enumerate_pages_through_many_rules(client, emulator):
    for i in range(250):
        emulator.namespace.add_rule("orders", "empty", m.Rule(f"r{i:03}", m.SqlFilter(f"n = {i}")))
    rules = client.list_rules("orders", "empty")
    assert [r.name for r in rules] == [f"r{i:03}" for i in range(250)]


def test_rule_errors_map_to_the_hierarchy(client):
    with pytest.raises(errors.AlreadyExistsError) as exists:
        client.add_rule("orders", "billing", m.Rule("big", m.SqlFilter("1=1")))
    assert exists.value.status == 409 and not exists.value.transient
    with pytest.raises(errors.NotFoundError):
        client.remove_rule("orders", "billing", "missing")
    with pytest.raises(errors.BadRequestError, match="invalid SQL"):
        client.add_rule("orders", "billing", m.Rule("bad", m.SqlFilter("amount >")))
    with pytest.raises(errors.NotFoundError, match="nosuch"):
        client.list_rules("orders", "nosuch")
    assert client.list_rules("orders", "billing")  # the client is still usable after errors


def test_pipelined_requests_from_many_threads(client, emulator):
    for i in range(20):
        emulator.namespace.add_rule("orders", "empty", m.Rule(f"r{i}", m.SqlFilter(f"n = {i}")))
    results, failures = [], []

    def work():
        try:
            for _ in range(15):
                results.append(len(client.list_rules("orders", "empty")))
        except Exception as exc:  # collected and asserted below
            failures.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures and results == [20] * 120


def test_batch_reads_every_target_from_one_thread_with_per_target_errors(client, emulator):
    for i in range(130):
        emulator.namespace.add_rule("orders", "empty", m.Rule(f"r{i:03d}", m.SqlFilter(f"n = {i}")))
    targets = [("orders", "billing"), ("orders", "nosuch"), ("orders", "empty"), ("nosuch", "x")]
    before = threading.active_count()
    results = client.list_rules_many(targets, window=2)
    assert threading.active_count() == before  # no thread per request
    assert results[0] == [m.Rule("big", m.SqlFilter("amount > 100"))]
    assert isinstance(results[1], errors.NotFoundError) and isinstance(results[3], errors.NotFoundError)
    assert [r.name for r in results[2]] == [f"r{i:03d}" for i in range(130)]  # two pages


def test_batch_reads_targets_in_bounded_batches_across_pages(client, emulator, monkeypatch):
    from reconciler.amqp import rules as rules_module

    monkeypatch.setattr(rules_module, "RULES_BATCH", 2)  # five targets: three batches a round, two rounds
    for i in range(130):
        emulator.namespace.add_rule("orders", "empty", m.Rule(f"r{i:03d}", m.SqlFilter(f"n = {i}")))
    targets = [("orders", "empty"), ("orders", "billing"), ("orders", "nosuch"), ("orders", "empty"), ("orders", "billing")]
    results = client.list_rules_many(targets)
    assert [r.name for r in results[0]] == [r.name for r in results[3]] == [f"r{i:03d}" for i in range(130)]
    assert results[1] == results[4] == [m.Rule("big", m.SqlFilter("amount > 100"))]
    assert isinstance(results[2], errors.NotFoundError)


def test_batch_retries_transient_failures_per_call(emulator):
    emulator.faults.update(busy_fraction=0.5, seed=3)
    with ManagementClient(emulator.connection_string, timeout=5, retries=10, backoff=0.001) as c:
        results = c.list_rules_many([("orders", "billing")] * 40)
    assert all(r == [m.Rule("big", m.SqlFilter("amount > 100"))] for r in results)
    assert emulator.handler.requests > 40


def test_batch_times_out_each_call_and_frees_its_slot(emulator):
    emulator.faults.update(latency=1.0)
    with ManagementClient(emulator.connection_string, timeout=0.3, retries=0, window=2) as c:
        results = c.list_rules_many([("orders", "billing")] * 3)
        assert all(isinstance(r, errors.OperationTimeoutError) for r in results)
        emulator.faults.clear()
        assert c.list_rules("orders", "billing")  # every window slot came back


def test_batch_without_a_free_slot_reports_a_timeout_per_call(emulator):
    with ManagementClient(emulator.connection_string, timeout=0.2, retries=0, window=1) as c:
        assert c.pacer.acquire(0, slot_timeout=1)  # another caller holds the only slot throughout
        results = c.list_rules_many([("orders", "billing")] * 2)
        assert all(isinstance(r, errors.OperationTimeoutError) and "no free request slot" in str(r) for r in results)
        c.pacer.release(0, 0)
        assert c.list_rules("orders", "billing")


def test_server_busy_is_retried(emulator):
    emulator.faults.update(busy_fraction=0.5, seed=7)
    with ManagementClient(emulator.connection_string, timeout=5, retries=10, backoff=0.001) as c:
        for _ in range(10):
            assert c.list_rules("orders", "billing")
    assert emulator.handler.requests > 10


def test_server_busy_surfaces_after_retries(emulator):
    emulator.faults.update(busy_fraction=1.0)
    policy = RetryPolicy(retries=2, backoff=0.001, throttled_retries=2)
    with ManagementClient(emulator.connection_string, timeout=5, retry=policy) as c:
        with pytest.raises(errors.ServerBusyError) as info:
            c.list_rules("orders", "billing")
    assert info.value.transient and info.value.status == 503
    assert emulator.handler.requests == 3


def test_dropped_connection_is_retried_with_reconnect(emulator):
    emulator.faults.update(close_after_ops=3)
    with ManagementClient(emulator.connection_string, timeout=5, retries=5, backoff=0.001) as c:
        for i in range(8):
            c.add_rule("orders", "empty", m.Rule(f"r{i}", m.SqlFilter(f"n = {i}")))
        assert len(c.list_rules("orders", "empty")) == 8


def test_refused_token_is_not_retried(emulator):
    class Counting(SasKeyTokenProvider):
        signed = 0

        def get_token(self, audience):
            self.signed += 1
            return super().get_token(audience)

    provider = Counting(DEV_KEY_NAME, DEV_KEY)
    emulator.faults.update(refuse_cbs=True)
    with ManagementClient(emulator.connection_string, token_provider=provider, timeout=5, retries=5) as c:
        with pytest.raises(errors.AuthenticationError, match="refused the token"):
            c.list_rules("orders", "billing")
    assert provider.signed == 1 and emulator.handler.requests == 0  # one put-token, no retry, no request


def test_wrong_key_fails_without_revealing_it(emulator, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = emulator.connection_string.replace(DEV_KEY, "WrongSecretValue123")
    with ManagementClient(wrong, timeout=5, retries=1) as c:
        with pytest.raises(errors.UnauthorizedError) as info:
            c.list_rules("orders", "billing")
        assert "WrongSecretValue123" not in repr(c)
    assert "WrongSecretValue123" not in str(info.value) and "sig=" not in str(info.value)
    assert "WrongSecretValue123" not in caplog.text and "sig=" not in caplog.text


def test_client_timeout(emulator):
    emulator.faults.update(latency=1.0)
    with ManagementClient(emulator.connection_string, timeout=0.3, retries=0) as c:
        with pytest.raises(errors.OperationTimeoutError, match="no response within"):
            c.list_rules("orders", "billing")


def test_connection_refused_is_not_retried_and_every_later_request_gets_it():
    with ManagementClient("Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=true",
                          timeout=2, retries=5, backoff=0.001) as c:
        with pytest.raises(errors.EndpointRefusedError, match=r"127\.0\.0\.1:1 refused the connection") as info:
            c.list_rules("orders", "billing")
        results = c.list_rules_many([("orders", "a"), ("orders", "b")])
    assert not info.value.transient and info.value.namespace_wide
    assert [type(r) for r in results] == [errors.EndpointRefusedError] * 2


def test_token_is_refreshed_before_expiry(clock):
    refreshed = threading.Event()

    class Counting(SasKeyTokenProvider):
        audiences: list[str] = []
        tokens: list = []

        def get_token(self, audience):
            self.audiences.append(audience)
            self.tokens.append(super().get_token(audience))
            if len(self.tokens) == 2:
                refreshed.set()
            return self.tokens[-1]

    provider = Counting(DEV_KEY_NAME, DEV_KEY, validity=2)
    with Emulator(SEED, token_clock=clock) as emulator:
        with ManagementClient(emulator.connection_string, token_provider=provider, timeout=5, retries=0) as c:
            c.list_rules("orders", "billing")
            assert refreshed.wait(10), "the client never asked for a fresh token"
            first, second = provider.tokens[:2]
            assert second.expires_at > first.expires_at
            clock.now = first.expires_at  # the first token has run out; only the refreshed one covers the link
            assert c.list_rules("orders", "billing")
    host = f"sb://127.0.0.1:{emulator.port}/"
    assert provider.audiences[:2] == [host + "orders/Subscriptions/billing/$management"] * 2


# -- messages ----------------------------------------------------------------------------------


def test_peek_messages_with_annotations_and_paging(client, emulator):
    for i in range(5):
        publish(emulator, "orders", MessageId=f"m{i}", Label="order", user={"n": m.TypedValue("int", i)})
    page = client.peek_messages("orders", "all", from_sequence_number=1, count=3)
    assert [p.message.sys["MessageId"].value for p in page] == ["m0", "m1", "m2"]
    first = page[0]
    assert first.sequence_number == first.message.sys["SequenceNumber"].value
    assert first.enqueued_time.tzinfo is not None and "x-opt-enqueued-time" in first.annotations
    assert first.message.user["n"] == m.TypedValue("int", 0) and first.body_size == len(b"payload")
    rest = client.peek_messages("orders", "all", from_sequence_number=page[-1].sequence_number + 1, count=10)
    assert [p.message.sys["MessageId"].value for p in rest] == ["m3", "m4"]
    assert client.peek_messages("orders", "all", from_sequence_number=rest[-1].sequence_number + 1, count=10) == []
    assert client.peek_messages("orders", "billing", from_sequence_number=1, count=10) == []


def test_schedule_and_cancel(client, emulator):
    when = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    msgs = [ScheduledMessage(m.Message(sys={"MessageId": m.TypedValue("string", f"s{i}")}, body=b"x"), when)
            for i in range(3)]
    numbers = client.schedule_messages("orders", msgs)
    assert len(numbers) == 3 and numbers == sorted(numbers)
    peeked = client.peek_messages("orders", None, from_sequence_number=1, count=10)
    assert [p.message.sys["MessageId"].value for p in peeked] == ["s0", "s1", "s2"]
    assert peeked[0].message.sys["ScheduledEnqueueTimeUtc"].value == when.replace(microsecond=when.microsecond // 1000 * 1000)
    client.cancel_scheduled_messages("orders", numbers[:2])
    assert len(client.peek_messages("orders", None, from_sequence_number=1, count=10)) == 1
    with pytest.raises(errors.NotFoundError):
        client.cancel_scheduled_messages("orders", [numbers[0]])


def _lock_first(emulator, entity):
    store = emulator.namespace.store(parse_address(entity))
    with emulator.namespace.lock:
        stored = store.next_visible(dt.datetime.now(UTC))
        return stored.sequence_number, store.lock(stored, dt.datetime.now(UTC))


def test_defer_receive_by_sequence_renew_and_complete(client, emulator):
    emulator.namespace.create_queue("work")
    publish(emulator, "work", MessageId="w1")
    seq, token = _lock_first(emulator, "work")
    client.update_disposition("work", None, [token], Disposition.DEFERRED)
    received = client.receive_by_sequence_number("work", None, [seq], SettleMode.PEEK_LOCK)
    assert len(received) == 1 and received[0].sequence_number == seq and received[0].lock_token is not None
    (expiry,) = client.renew_lock("work", None, [received[0].lock_token])
    assert expiry > dt.datetime.now(UTC)
    client.update_disposition("work", None, [received[0].lock_token], Disposition.COMPLETED)
    assert client.peek_messages("work", None, 1, 10) == []
    with pytest.raises(errors.NotFoundError):
        client.receive_by_sequence_number("work", None, [seq])


def test_dead_letter_with_reason(client, emulator):
    emulator.namespace.create_queue("work")
    publish(emulator, "work", MessageId="w2")
    _, token = _lock_first(emulator, "work")
    client.update_disposition("work", None, [token], Disposition.SUSPENDED,
                              deadletter_reason="bad", deadletter_description="because",
                              properties_to_modify={"why": m.TypedValue("string", "test")})
    dead = client.peek_messages("work/$DeadLetterQueue", None, 1, 10)
    assert [p.message.sys["MessageId"].value for p in dead] == ["w2"]
    with pytest.raises(errors.LockLostError):
        client.renew_lock("work", None, [uuid.uuid4()])


def test_sessions(client, emulator):
    emulator.namespace.create_queue("sessions")
    for sid in ("a", "b"):
        publish(emulator, "sessions", MessageId=f"m-{sid}", SessionId=sid)
    assert sorted(client.get_message_sessions("sessions", None, dt.datetime(2000, 1, 1, tzinfo=UTC))) == ["a", "b"]
    assert client.peek_messages("sessions", None, 1, 10, session_id="b")[0].message.sys["SessionId"].value == "b"
    store = emulator.namespace.store(parse_address("sessions"))
    emulator.broker.accept_session(store, "a", owner=object())
    assert client.renew_session_lock("sessions", None, "a") > dt.datetime.now(UTC)
    assert client.get_session_state("sessions", None, "a") is None
    client.set_session_state("sessions", None, "a", b"\x00state")
    assert client.get_session_state("sessions", None, "a") == b"\x00state"
    client.set_session_state("sessions", None, "a", None)
    assert client.get_session_state("sessions", None, "a") is None
    with pytest.raises(errors.LockLostError):
        client.renew_session_lock("sessions", None, "b")


def test_closed_client_refuses_requests_at_once(emulator):
    c = ManagementClient(emulator.connection_string, timeout=5, retries=5)
    c.list_rules("orders", "billing")
    c.close()
    with pytest.raises(errors.ClientClosedError):
        c.list_rules("orders", "billing")
    assert emulator.handler.requests == 1  # refused without sending anything


def test_batch_completions_wake_once_enough_are_in_and_never_hold_stragglers():
    from reconciler.namespace.pipeline import Completions, Request

    done = Completions()
    assert done.take(1, timeout=0.05) == []  # nothing arrives: [] after the timeout
    first = Request("e", "op", {}, 1.0)
    done.add(0, first)
    started = time.monotonic()
    assert done.take(4, timeout=60) == [(0, first)]  # fewer than wanted: handed over after the grace ...
    assert time.monotonic() - started < 30  # ... not at the timeout
    done.GRACE = 5.0
    threading.Timer(0.01, lambda: [done.add(i, first) for i in (1, 2, 3)]).start()
    assert [i for i, _ in done.take(3, timeout=10)] == [1, 2, 3]  # woken by the third, not per response


def test_a_client_and_an_emulator_leave_no_file_descriptor_behind():
    """proton's EventInjector never closes its pipe; ours does once the loop stops (a long-lived
    process, such as this test suite, otherwise runs past the 1,024 descriptors select can watch)."""
    import os

    from reconciler.model import DesiredState, Subscription, Topic

    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    def round_trip() -> None:
        state = DesiredState((Topic("t", (Subscription("s", ()),)),))
        with Emulator(state) as emu, ManagementClient(emu.connection_string, timeout=10) as client:
            assert client.list_rules("t", "s") == []

    round_trip()  # first use: imports, caches, logging handlers
    before = open_descriptors()
    for _ in range(5):
        round_trip()
    assert open_descriptors() - before < 3
