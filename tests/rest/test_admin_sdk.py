"""Microsoft's ServiceBusAdministrationClient, the independent client, against the emulator's REST API."""

from __future__ import annotations

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError, ServiceRequestError
from azure.servicebus.management import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

from reconciler import model
from reconciler.amqp.client import ManagementClient
from tests.rest.conftest import LISTENER, LISTENER_KEY, MANY


@pytest.fixture(scope="module")
def admin(namespace_emulator):
    with ServiceBusAdministrationClient.from_connection_string(
        namespace_emulator.connection_string, connection_verify=namespace_emulator.ca_file
    ) as client:
        yield client


def _sdk_value(value: model.TypedValue):
    """What the SDK makes of a typed value read over REST (it keeps no int/long or uuid type)."""
    if value.type is model.ValueType.UUID:
        return str(value.value)
    return value.value


def _as_sdk(rule: model.Rule) -> tuple:
    """A model rule (as enumerate-rules returns it) in the shape of the SDK's RuleProperties."""
    flt = rule.filter
    if isinstance(flt, model.TrueFilter):
        filter_view = ("true",)
    elif isinstance(flt, model.FalseFilter):
        filter_view = ("false",)
    elif isinstance(flt, model.SqlFilter):
        filter_view = ("sql", flt.expression)
    else:
        fields = tuple(getattr(flt, name) for name in model.CORRELATION_FIELDS)
        filter_view = ("correlation", fields, {k: _sdk_value(v) for k, v in flt.properties})
    action = rule.action.expression if isinstance(rule.action, model.SqlRuleAction) else None
    return rule.name, filter_view, action


def _sdk_view(rule) -> tuple:
    flt = rule.filter
    if isinstance(flt, TrueRuleFilter):
        filter_view = ("true",)
    elif isinstance(flt, FalseRuleFilter):
        filter_view = ("false",)
    elif isinstance(flt, SqlRuleFilter):
        filter_view = ("sql", flt.sql_expression)
    else:
        assert isinstance(flt, CorrelationRuleFilter)
        fields = (flt.correlation_id, flt.message_id, flt.to, flt.reply_to, flt.label, flt.session_id,
                  flt.reply_to_session_id, flt.content_type)
        filter_view = ("correlation", fields, dict(flt.properties))
    action = rule.action.sql_expression if isinstance(rule.action, SqlRuleAction) else None
    return rule.name, filter_view, action


def test_lists_topics(admin):
    assert sorted(t.name for t in admin.list_topics()) == ["orders", "payments"]
    assert admin.get_topic("orders").name == "orders"


def test_lists_every_subscription_across_pages(admin):
    names = [s.name for s in admin.list_subscriptions("orders")]
    assert len(names) == MANY + 2  # three pages of at most 100
    assert names == sorted(names, key=str.lower)
    assert {"s000", "s249", "forwarded", "sessions"} <= set(names)
    assert list(admin.list_subscriptions("payments")) == []


def test_reads_subscription_properties(admin):
    forwarded = admin.get_subscription("orders", "forwarded")
    assert forwarded.forward_to == "archive"
    assert forwarded.requires_session is False
    sessions = admin.get_subscription("orders", "sessions")
    assert sessions.requires_session is True and sessions.forward_to is None


def test_rules_equal_what_enumerate_rules_returns(admin, namespace_emulator):
    with ManagementClient(namespace_emulator.connection_string) as amqp:
        live = amqp.list_rules("orders", "s007")
    sdk_rules = list(admin.list_rules("orders", "s007"))
    assert [_sdk_view(r) for r in sdk_rules] == [_as_sdk(r) for r in live]
    one = admin.get_rule("orders", "s007", "refunds")
    assert _sdk_view(one) == _as_sdk(live[1])


def test_missing_entities_are_not_found(admin):
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription("orders", "nope")
    with pytest.raises(ResourceNotFoundError):
        admin.get_rule("orders", "s000", "nope")
    with pytest.raises(ResourceNotFoundError):
        list(admin.list_subscriptions("nope"))


def test_topics_are_not_created_here_and_the_answer_says_so(admin):
    with pytest.raises(HttpResponseError) as caught:
        admin.create_topic("new")
    assert caught.value.status_code == 501
    assert "subscriptions and rules only" in str(caught.value)


def test_listen_only_key_is_refused(namespace_emulator):
    conn = namespace_emulator.connection_string_for(LISTENER, LISTENER_KEY)
    with ServiceBusAdministrationClient.from_connection_string(conn, connection_verify=namespace_emulator.ca_file) as admin:
        with pytest.raises(ClientAuthenticationError) as caught:
            list(admin.list_topics())
    assert "Manage" in str(caught.value)


def test_the_certificate_is_verified(namespace_emulator):
    with ServiceBusAdministrationClient.from_connection_string(
        namespace_emulator.connection_string, retry_total=0
    ) as admin:
        with pytest.raises(ServiceRequestError, match="CERTIFICATE_VERIFY_FAILED"):
            list(admin.list_topics())
