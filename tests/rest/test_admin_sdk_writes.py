"""Microsoft's ServiceBusAdministrationClient writes subscriptions and rules through the emulator's
REST API (as a framework does at start-up), and sbrules' AMQP client, the independent observer,
reads what it wrote; refusals are the ones AMQP add-rule gives."""

from __future__ import annotations

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.servicebus.management import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

from reconciler import limits, model
from reconciler.amqp.client import ManagementClient
from reconciler.emulator import Emulator, Faults
from reconciler.namespace.errors import ManagementError

LISTENER, LISTENER_KEY = "listener", "listen-only-key"


@pytest.fixture
def emu():
    emulator = Emulator(listen_keys={LISTENER: LISTENER_KEY}, faults=Faults(credits_per_second=1_000_000))
    emulator.namespace.create_topic("orders")
    with emulator:
        yield emulator


def _admin(emu, connection_string=None):
    return ServiceBusAdministrationClient.from_connection_string(
        connection_string or emu.connection_string, connection_verify=emu.ca_file
    )


def test_a_subscription_and_its_rules_written_with_the_sdk_are_what_amqp_reads(emu):
    with _admin(emu) as admin, ManagementClient(emu.connection_string) as amqp:
        created = admin.create_subscription("orders", "Shipping")
        assert created.name == "Shipping"
        assert [r.name for r in amqp.list_rules("orders", "Shipping")] == ["$Default"]  # as the service adds it
        admin.create_rule("orders", "Shipping", "Shop.Messages.OrderPlaced", filter=SqlRuleFilter(
            "[NServiceBus.EnclosedMessageTypes] LIKE '%Shop.Messages.OrderPlaced%'"))
        admin.create_rule("orders", "Shipping", "eu", filter=CorrelationRuleFilter(
            label="refund", properties={"tier": 3, "region": "eu", "vip": True}), action=SqlRuleAction("SET x = 1"))
        admin.delete_rule("orders", "Shipping", "$Default")
        live = {r.name: r for r in amqp.list_rules("orders", "Shipping")}

    assert set(live) == {"Shop.Messages.OrderPlaced", "eu"}
    assert live["Shop.Messages.OrderPlaced"].filter == model.SqlFilter(
        "[NServiceBus.EnclosedMessageTypes] LIKE '%Shop.Messages.OrderPlaced%'")
    eu = live["eu"]
    assert eu.filter == model.CorrelationFilter(subject="refund", properties={"tier": {"int": 3}, "region": "eu", "vip": True})
    assert eu.action == model.SqlRuleAction("SET x = 1")
    assert all(r.created_at is not None for r in live.values())


def test_if_match_updates_a_rule_in_place_and_delete_removes_the_subscription(emu):
    emu.namespace.create_subscription("orders", "nsb")
    with _admin(emu) as admin, ManagementClient(emu.connection_string) as amqp:
        (before,) = amqp.list_rules("orders", "nsb")
        default = admin.get_rule("orders", "nsb", "$Default")
        default.filter = FalseRuleFilter()
        admin.update_rule("orders", "nsb", default)  # PUT with If-Match: *
        (after,) = amqp.list_rules("orders", "nsb")
        assert after.filter == model.FalseFilter() and after.name == "$Default"
        assert after.created_at == before.created_at  # the same rule, changed
        default.name = "nope"
        with pytest.raises(ResourceNotFoundError):
            admin.update_rule("orders", "nsb", default)
        admin.delete_subscription("orders", "nsb")
        with pytest.raises(ResourceNotFoundError):
            admin.get_subscription("orders", "nsb")
        with pytest.raises(ResourceNotFoundError):
            admin.delete_rule("orders", "nsb", "$Default")


def test_refusals_are_those_of_amqp_add_rule(emu):
    emu.namespace.create_subscription("orders", "s")
    with _admin(emu) as admin, ManagementClient(emu.connection_string) as amqp:
        with pytest.raises(ResourceExistsError):
            admin.create_subscription("orders", "s")
        with pytest.raises(ResourceExistsError):
            admin.create_rule("orders", "s", "$Default")
        with pytest.raises(ResourceNotFoundError):
            admin.create_rule("orders", "missing", "r")
        with pytest.raises(ManagementError) as over_amqp:
            amqp.add_rule("orders", "s", model.Rule("bad", model.SqlFilter("a = = 1")))
        with pytest.raises(HttpResponseError) as over_rest:
            admin.create_rule("orders", "s", "bad", filter=SqlRuleFilter("a = = 1"))
        assert over_rest.value.status_code == 400
        assert "rule 'bad': invalid SQL filter at line 1, column 5" in str(over_rest.value)
        assert "rule 'bad': invalid SQL filter at line 1, column 5" in str(over_amqp.value)
        with pytest.raises(HttpResponseError) as bad_name:
            admin.create_rule("orders", "s", "x" * 51)
        assert bad_name.value.status_code == 400
    assert [r.name for r in emu.namespace.rules("orders", "s")] == ["$Default"]


def test_the_topic_filter_quota_counts_rules_written_over_rest(emu):
    full = limits.SQL_FILTERS_PER_TOPIC.value
    emu.namespace.create_subscription("orders", "full", [model.Rule(f"r{i}", model.SqlFilter("1=1")) for i in range(full)])
    emu.namespace.create_subscription("orders", "s", [])
    with _admin(emu) as admin:
        with pytest.raises(HttpResponseError) as caught:
            admin.create_rule("orders", "s", "one-more", filter=SqlRuleFilter("1=1"))
        admin.create_rule("orders", "s", "correlation", filter=CorrelationRuleFilter(label="x"))  # the other quota
    assert caught.value.status_code == 403 and "maximum number of SQL filters" in str(caught.value)


def test_writes_need_manage_rights_and_are_charged_as_management_operations(emu):
    emu.namespace.create_subscription("orders", "s")
    with _admin(emu, emu.connection_string_for(LISTENER, LISTENER_KEY)) as listener:
        with pytest.raises(ClientAuthenticationError, match="Manage"):
            listener.create_rule("orders", "s", "r")
    charged = emu.credits.stats().credits
    with _admin(emu) as admin:
        admin.create_rule("orders", "s", "r")
        admin.delete_rule("orders", "s", "r")
    assert emu.credits.stats().credits - charged == 2 * emu.credits.costs.management


def test_with_a_state_file_an_answered_write_survives_a_restart(tmp_path):
    state = tmp_path / "state.json"
    with Emulator(state_file=state) as emu:
        emu.namespace.create_topic("orders")
        with _admin(emu) as admin:
            admin.create_subscription("orders", "s")
            admin.create_rule("orders", "s", "kept", filter=SqlRuleFilter("a = 1"))
    with Emulator(state_file=state) as again:
        names = [r.name for r in again.namespace.rules("orders", "s")]
    assert names == ["$Default", "kept"]
