"""Conformance with a client nobody here wrote: Microsoft's azure-servicebus SDK against the emulator."""

from __future__ import annotations

import datetime as _dt

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusAuthenticationError

from reconciler.emulator import Emulator


@pytest.fixture
def client(emulator):
    with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as sb:
        yield sb


#: Senders run without the SDK's keep-alive thread: it would first act after 30 s, beyond any test
#: here, but it sleeps in 1 s steps and the sender's close joins it (half a second per sender).
SENDER = {"keep_alive": 0}


def _send(client, *messages, topic="orders"):
    with client.get_topic_sender(topic, **SENDER) as sender:
        sender.send_messages(list(messages))


def test_send_to_topic_then_peek_from_subscription(client):
    _send(
        client,
        ServiceBusMessage("first", application_properties={"region": "eu", "n": 1}, subject="created"),
        ServiceBusMessage("second", application_properties={"region": "us"}, message_id="m-2"),
    )
    with client.get_subscription_receiver("orders", "all") as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
    assert [str(m) for m in peeked] == ["first", "second"]
    assert [m.sequence_number for m in peeked] == [1, 2]
    assert peeked[0].application_properties[b"region"] == b"eu"
    assert peeked[0].subject == "created"
    assert peeked[1].message_id == "m-2"
    now = _dt.datetime.now(_dt.timezone.utc)
    assert all(abs((now - m.enqueued_time_utc).total_seconds()) < 30 for m in peeked)


def test_peek_continues_from_sequence_number_and_ends_empty(client):
    _send(client, *[ServiceBusMessage(f"m{i}") for i in range(5)])
    with client.get_subscription_receiver("orders", "all") as receiver:
        first = receiver.peek_messages(max_message_count=3)
        rest = receiver.peek_messages(max_message_count=3)
        after = receiver.peek_messages(max_message_count=3, sequence_number=100)
    assert [m.sequence_number for m in first] == [1, 2, 3]
    assert [m.sequence_number for m in rest] == [4, 5]
    assert after == []


def test_receive_and_complete_removes_the_message(client, emulator):
    _send(client, ServiceBusMessage("work"))
    with client.get_subscription_receiver("orders", "all", max_wait_time=5) as receiver:
        received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert [str(m) for m in received] == ["work"]
        message = received[0]
        assert message.lock_token is not None
        assert message.locked_until_utc > _dt.datetime.now(_dt.timezone.utc)
        assert message.delivery_count == 0
        receiver.complete_message(message)
        assert receiver.peek_messages(max_message_count=5) == []
    assert emulator.namespace.subscription("orders", "all").store.messages == {}


def test_abandon_redelivers_with_a_higher_delivery_count(client):
    _send(client, ServiceBusMessage("again"))
    with client.get_subscription_receiver("orders", "all") as receiver:
        first = receiver.receive_messages(max_message_count=1, max_wait_time=5)[0]
        receiver.abandon_message(first)
        second = receiver.receive_messages(max_message_count=1, max_wait_time=5)[0]
        assert second.sequence_number == first.sequence_number
        assert second.delivery_count == 1
        receiver.complete_message(second)


def test_dead_letter_moves_message_to_the_dead_letter_queue(client):
    _send(client, ServiceBusMessage("poison"))
    with client.get_subscription_receiver("orders", "all") as receiver:
        message = receiver.receive_messages(max_message_count=1, max_wait_time=5)[0]
        receiver.dead_letter_message(message, reason="bad-order", error_description="no items")
    with client.get_subscription_receiver("orders", "all", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        dead = dlq.receive_messages(max_message_count=1, max_wait_time=5)
        assert [str(m) for m in dead] == ["poison"]
        assert dead[0].dead_letter_reason == "bad-order"
        assert dead[0].dead_letter_error_description == "no items"
        dlq.complete_message(dead[0])


def test_defer_then_receive_deferred_by_sequence_number(client):
    _send(client, ServiceBusMessage("later"))
    with client.get_subscription_receiver("orders", "all") as receiver:
        message = receiver.receive_messages(max_message_count=1, max_wait_time=5)[0]
        receiver.defer_message(message)
        _send(client, ServiceBusMessage("next"))
        (following,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert str(following) == "next"  # the deferred message is skipped, not redelivered
        receiver.complete_message(following)
        deferred = receiver.receive_deferred_messages([message.sequence_number])
        assert [str(m) for m in deferred] == ["later"]
        receiver.complete_message(deferred[0])
        assert receiver.peek_messages(max_message_count=5) == []


def test_renew_message_lock_extends_the_lock(client, emulator):
    _send(client, ServiceBusMessage("slow"))
    with client.get_subscription_receiver("orders", "all") as receiver:
        message = receiver.receive_messages(max_message_count=1, max_wait_time=5)[0]
        before = message.locked_until_utc
        renewed = receiver.renew_message_lock(message)
        assert renewed >= before
        (locked,) = emulator.namespace.subscription("orders", "all").store.messages.values()
        assert renewed == locked.locked_until.replace(microsecond=locked.locked_until.microsecond // 1000 * 1000)
        receiver.complete_message(message)


def test_receive_and_delete_mode(client, emulator):
    _send(client, ServiceBusMessage("gone"))
    with client.get_subscription_receiver(
        "orders", "all", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
    assert [str(m) for m in received] == ["gone"]
    assert emulator.namespace.subscription("orders", "all").store.messages == {}


def test_schedule_and_cancel_on_a_topic(client, emulator):
    later = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=1)
    with client.get_topic_sender("orders", **SENDER) as sender:
        numbers = sender.schedule_messages([ServiceBusMessage("a"), ServiceBusMessage("b")], later)
        assert len(numbers) == 2 and numbers[0] < numbers[1]
        assert len(emulator.namespace.topic("orders").store.messages) == 2
        sender.cancel_scheduled_messages(numbers[0])
    assert [m.sequence_number for m in emulator.namespace.topic("orders").store.messages.values()] == [numbers[1]]
    with client.get_subscription_receiver("orders", "all") as receiver:
        assert receiver.peek_messages(max_message_count=5) == []


def test_scheduled_message_arrives_when_due(client):
    soon = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=0.5)
    with client.get_topic_sender("orders", **SENDER) as sender:
        sender.schedule_messages(ServiceBusMessage("on time"), soon)
    with client.get_subscription_receiver("orders", "all") as receiver:
        received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert [str(m) for m in received] == ["on time"]
        assert received[0].enqueued_time_utc >= soon - _dt.timedelta(milliseconds=5)
        receiver.complete_message(received[0])


def test_queue_send_receive(client):
    with client.get_queue_sender("work", **SENDER) as sender:
        sender.send_messages(ServiceBusMessage("job"))
    with client.get_queue_receiver("work") as receiver:
        received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert [str(m) for m in received] == ["job"]
        receiver.complete_message(received[0])


def test_session_state_get_and_set(client):
    _send(client, ServiceBusMessage("s1-a", session_id="s1"), ServiceBusMessage("s2-a", session_id="s2"))
    with client.get_subscription_receiver("orders", "sessions", session_id="s1") as receiver:
        session = receiver.session
        assert session.session_id == "s1"
        assert session.get_state() is None
        session.set_state(b"step-2")
        assert session.get_state() == b"step-2"
        session.renew_lock()
        received = receiver.receive_messages(max_message_count=5, max_wait_time=3)
        assert [str(m) for m in received] == ["s1-a"]
        receiver.complete_message(received[0])
    with client.get_subscription_receiver("orders", "sessions", session_id="s1") as receiver:
        assert receiver.session.get_state() == b"step-2"


def test_next_available_session(client):
    from azure.servicebus import NEXT_AVAILABLE_SESSION

    _send(client, ServiceBusMessage("only", session_id="lonely"))
    with client.get_subscription_receiver("orders", "sessions", session_id=NEXT_AVAILABLE_SESSION) as receiver:
        assert receiver.session.session_id == "lonely"
        received = receiver.receive_messages(max_message_count=1, max_wait_time=3)
        assert [str(m) for m in received] == ["only"]


def test_wrong_key_is_refused(emulator):
    bad = emulator.connection_string.replace("SharedAccessKey=SAS_KEY_VALUE", "SharedAccessKey=wrong")
    with ServiceBusClient.from_connection_string(bad, retry_total=0) as sb:
        with pytest.raises(ServiceBusAuthenticationError):
            with sb.get_topic_sender("orders", **SENDER) as sender:
                sender.send_messages(ServiceBusMessage("x"))


def test_sdk_works_against_a_started_emulator_without_rules_files():
    with Emulator() as emu:
        emu.namespace.create_subscription("t", "s")
        with ServiceBusClient.from_connection_string(emu.connection_string, retry_total=0) as sb:
            _send(sb, ServiceBusMessage("x"), topic="t")
            with sb.get_subscription_receiver("t", "s") as receiver:
                assert [str(m) for m in receiver.peek_messages(max_message_count=2)] == ["x"]


def test_next_available_session_times_out_when_none_has_messages(client):
    from azure.servicebus import NEXT_AVAILABLE_SESSION
    from azure.servicebus.exceptions import OperationTimeoutError

    with pytest.raises(OperationTimeoutError):
        with client.get_subscription_receiver("orders", "sessions", session_id=NEXT_AVAILABLE_SESSION):
            pass


def test_receiving_from_a_missing_subscription_is_entity_not_found(client):
    from azure.servicebus.exceptions import MessagingEntityNotFoundError

    with pytest.raises(MessagingEntityNotFoundError):
        with client.get_subscription_receiver("orders", "ghost") as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=1)


def test_message_sent_with_a_scheduled_enqueue_time_waits_for_it(client, emulator):
    with client.get_queue_sender("work", **SENDER) as sender:
        due = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=1.5)
        sender.send_messages(ServiceBusMessage("timed", scheduled_enqueue_time_utc=due))
    assert [m.state for m in emulator.namespace.queue("work").store.messages.values()] == ["scheduled"]
    with client.get_queue_receiver("work") as receiver:
        received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert [str(m) for m in received] == ["timed"]
        assert received[0].scheduled_enqueue_time_utc is not None
        receiver.complete_message(received[0])


def test_a_normal_close_by_the_sdk_logs_no_error_and_no_signature(emulator, caplog):
    """Microsoft's SDK closes its sockets without waiting for the emulator's last frames: that is a
    normal close, not an error; and no log line carries a SAS signature."""
    import logging

    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            with ServiceBusClient.from_connection_string(emulator.connection_string) as sdk:
                _send(sdk, ServiceBusMessage("hello"))
                with sdk.get_subscription_receiver("orders", "all", max_wait_time=1) as receiver:
                    for message in receiver.receive_messages(max_wait_time=1):
                        receiver.complete_message(message)
                    receiver.peek_messages(5)
    ours = [r for r in caplog.records if not r.name.startswith(("azure", "uamqp"))]
    assert not [r for r in ours if r.levelno >= logging.ERROR], [r.getMessage() for r in ours if r.levelno >= logging.ERROR]
    assert not any("sig=" in r.getMessage() for r in ours)
