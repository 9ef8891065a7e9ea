"""Credit-based throttling (a Standard namespace): one budget per namespace, spent by every client.

The emulator counts credits by the seconds of a clock the test moves, so who is throttled when is
decided by the work done, never by how fast this machine runs.
"""

from __future__ import annotations

import datetime

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusServerBusyError

from reconciler import model
from reconciler.amqp.client import ManagementClient
from reconciler.amqp.messaging import ScheduledMessage
from reconciler.emulator import Emulator, Faults, FaultsFileError
from reconciler.emulator.throttling import CreditMeter
from reconciler.namespace import errors
from reconciler.namespace.credits import THROTTLED_CONDITION, wait_hint
from reconciler.namespace.retry import RetryPolicy
from reconciler.rest.client import ManagementRestClient

from .conftest import ORDERS
from .raw import RawManagement

NO_RETRIES = RetryPolicy(retries=0, throttled_retries=0)


class Seconds:
    """The meter's clock: stands still until the test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def seconds() -> Seconds:
    return Seconds()


@pytest.fixture
def throttled(seconds):
    """A namespace of 100 credits per second, counted on the test's clock."""
    emu = Emulator(ORDERS, faults=Faults(credits_per_second=100), credit_clock=seconds)
    emu.namespace.create_queue("work")
    with emu:
        yield emu


def test_the_meter_admits_while_the_seconds_credits_last_and_carries_an_overdraft(seconds):
    meter = CreditMeter(Faults(credits_per_second=100), seconds)
    assert meter.admit()
    meter.charge(250)  # a large peek admitted with credits left overdraws
    assert not meter.admit()
    seconds.now += 1  # +100: still 50 in debt
    assert not meter.admit()
    seconds.now += 1
    assert meter.admit()
    seconds.now += 60  # an idle minute does not bank more than one second's credits
    assert meter.admit()
    meter.charge(100)
    assert not meter.admit()
    assert meter.stats().throttled == 3


def test_without_credits_per_second_nothing_is_throttled(seconds):
    meter = CreditMeter(Faults(), seconds)
    meter.charge(10**9)
    assert meter.admit() and meter.available()


def test_a_throttled_request_gets_the_services_answer(throttled):
    throttled.credits.charge(100)
    with RawManagement(throttled, "orders/Subscriptions/all") as mgmt:
        status, props, _ = mgmt.request("com.microsoft:enumerate-rules", {"top": 10, "skip": 0})
    assert (status, props["errorCondition"]) == (503, THROTTLED_CONDITION)
    assert "Error code: 50009" in props["statusDescription"]
    assert wait_hint(props["statusDescription"]) == 2


def test_rule_operations_cost_ten_credits_each(throttled, seconds):
    with ManagementClient(throttled.connection_string, timeout=5, retry=NO_RETRIES) as client:
        for _ in range(10):
            client.list_rules("orders", "eu")
        with pytest.raises(errors.ServerBusyError) as info:
            client.list_rules("orders", "eu")
        assert info.value.retry_after == 2
        seconds.now += 1
        assert client.list_rules("orders", "eu")
    assert throttled.credits.stats().credits == 110


def test_a_peek_is_charged_per_message_returned(throttled, seconds):
    throttled.publish("orders", [model.Message(body=b"x") for _ in range(30)])
    with ManagementClient(throttled.connection_string, timeout=5, retry=NO_RETRIES) as client:
        assert len(client.peek_messages("orders", "all", 1, 250)) == 30
    assert throttled.credits.stats().credits == 30


def test_the_client_budgets_each_message_operation_as_the_service_charges_it(throttled, seconds):
    """Schedule and cancel are charged per message they name, as a peek per message it returns: the
    client's pacer counts what the namespace counts, so a budget holds for every operation."""
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    throttled.publish("orders", [model.Message(body=b"x") for _ in range(7)])
    with ManagementClient(throttled.connection_string, timeout=5, retry=NO_RETRIES) as client:
        numbers = client.schedule_messages("orders", [ScheduledMessage(model.Message(body=b"x"), at) for _ in range(40)])
        seconds.now += 1
        client.cancel_scheduled_messages("orders", numbers)
        seconds.now += 1
        assert len(client.peek_messages("orders", "all", 1, 250)) == 7
        assert client.pacer.stats().credits == throttled.credits.stats().credits == 40 + 40 + 7


def test_every_clients_work_counts_against_one_namespace_budget(throttled, seconds):
    """A production sender spends the namespace's credits; sbrules is throttled, then the sender too,
    until the next second brings credits for both."""
    with ServiceBusClient.from_connection_string(throttled.connection_string, retry_total=0) as sb:
        with sb.get_topic_sender("orders") as sender:
            sent = 0
            with pytest.raises(ServiceBusServerBusyError) as refused:
                for _ in range(200):  # each send costs a credit plus one per rule evaluated
                    sender.send_messages(ServiceBusMessage("order", application_properties={"region": "eu"}))
                    sent += 1
            assert 0 < sent < 100
            assert "Error code: 50009" in str(refused.value)
            with ManagementClient(throttled.connection_string, timeout=5, retry=NO_RETRIES) as client:
                with pytest.raises(errors.ServerBusyError):
                    client.peek_messages("orders", "all", 1, 10)
                seconds.now += 1
                assert len(client.peek_messages("orders", "all", 1, 10)) == 10
            sender.send_messages(ServiceBusMessage("order"))
    stats = throttled.credits.stats()
    assert stats.throttled == 2 and stats.credits > 100


def _drain(receiver) -> list:
    """Everything the receiver gets until a second passes with nothing (a loaded machine may
    deliver one second's credits in more than one batch)."""
    got: list = []
    while batch := receiver.receive_messages(max_message_count=150, max_wait_time=1):
        got += batch
    return got


def test_receivers_wait_for_the_next_second_instead_of_failing(throttled, seconds):
    throttled.publish("work", [model.Message(body=b"job") for _ in range(150)])
    with ServiceBusClient.from_connection_string(throttled.connection_string, retry_total=0) as sb:
        with sb.get_queue_receiver("work", prefetch_count=0) as receiver:
            first = _drain(receiver)
            assert len(first) == 100  # one second's credits
            seconds.now += 1
            second = _drain(receiver)
            assert len(second) == 50
            for message in first + second:
                receiver.complete_message(message)


def test_management_api_reads_are_management_operations(throttled, seconds):
    throttled.credits.charge(95)
    with ManagementRestClient(throttled.connection_string, retry=NO_RETRIES) as rest:
        assert rest.list_topics() == ["orders"]
        with pytest.raises(errors.ServerBusyError) as info:
            rest.list_topics()
    assert info.value.retry_after == 2


def test_throttling_can_be_switched_on_and_off_with_clients_connected(throttled, seconds):
    throttled.credits.charge(1000)
    with ManagementClient(throttled.connection_string, timeout=5, retry=NO_RETRIES) as client:
        with pytest.raises(errors.ServerBusyError):
            client.list_rules("orders", "eu")
        throttled.faults.update(credits_per_second=None)
        assert client.list_rules("orders", "eu")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"credits_per_second": 0}, "credits_per_second must be > 0"),
        ({"credit_costs": {"peek": 1}}, "unknown credit_costs: peek"),
        ({"credit_costs": {"management": -1}}, "credit_costs.management must be a whole number"),
        ({"throttled_wait_seconds": -1}, "throttled_wait_seconds must be >= 0"),
    ],
)
def test_bad_throttling_settings_are_refused(settings, message):
    with pytest.raises(FaultsFileError, match=message):
        Faults.from_mapping(settings)


def test_costs_per_operation_kind_come_from_the_faults_file(tmp_path, seconds):
    path = tmp_path / "faults.yaml"
    path.write_text("credits_per_second: 50\ncredit_costs: {management: 25}\nthrottled_wait_seconds: 0.5\n")
    with Emulator(ORDERS, faults=Faults.load(path), credit_clock=seconds) as emu:
        with ManagementClient(emu.connection_string, timeout=5, retry=NO_RETRIES) as client:
            client.list_rules("orders", "eu")
            client.list_rules("orders", "eu")
            with pytest.raises(errors.ServerBusyError) as info:
                client.list_rules("orders", "eu")
    assert info.value.retry_after == 0.5

