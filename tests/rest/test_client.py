"""The management REST client against the emulator: discovery, rules, paging, errors, TLS."""

from __future__ import annotations

import pytest

from reconciler.amqp.client import ManagementClient
from reconciler.namespace.connection import ConnectionString
from reconciler.namespace.errors import NotFoundError, TransportSecurityError, UnauthorizedError
from reconciler.namespace.network import Network
from reconciler.namespace.retry import RetryPolicy
from reconciler.rest.client import ManagementRestClient, default_base_url, token_audience
from tests.rest.conftest import LISTENER, LISTENER_KEY, MANY, RULES


@pytest.fixture(scope="module")
def rest(namespace_emulator):
    with ManagementRestClient(namespace_emulator.connection_string) as client:
        yield client


def test_lists_topics_and_subscriptions(rest):
    assert sorted(rest.list_topics()) == ["orders", "payments"]
    subs = rest.list_subscriptions("orders")
    assert len(subs) == MANY + 2
    by_name = {s.name: s for s in subs}
    assert by_name["forwarded"].auto_forwarding and by_name["forwarded"].forward_to == "archive"
    assert by_name["sessions"].requires_session and not by_name["sessions"].auto_forwarding
    assert rest.list_subscriptions("payments") == []


def test_pages_follow_skip_and_top(namespace_emulator):
    with ManagementRestClient(namespace_emulator.connection_string, page_size=7) as small:
        names = [s.name for s in small.list_subscriptions("orders")]
        rules = small.list_rules("orders", "s001")
    assert len(names) == len(set(names)) == MANY + 2
    assert rules == list(RULES)


def test_rules_read_over_rest_equal_enumerate_rules(rest, namespace_emulator):
    with ManagementClient(namespace_emulator.connection_string) as amqp:
        live = amqp.list_rules("orders", "s010")
    assert rest.list_rules("orders", "s010") == live == list(RULES)


def test_reads_rules_where_enumerate_rules_is_refused(rest, namespace_emulator):
    with ManagementClient(namespace_emulator.connection_string) as amqp:
        with pytest.raises(Exception, match="auto-forwarding"):
            amqp.list_rules("orders", "forwarded")
    assert rest.list_rules("orders", "forwarded") == list(RULES)


def test_get_subscription(rest):
    info = rest.get_subscription("orders", "forwarded")
    assert (info.topic, info.name, info.forward_to) == ("orders", "forwarded", "archive")
    with pytest.raises(NotFoundError, match="orders/Subscriptions/nope"):
        rest.get_subscription("orders", "nope")
    with pytest.raises(NotFoundError):
        rest.list_subscriptions("no-such-topic")


def test_listen_only_rights_are_unauthorized(namespace_emulator):
    with ManagementRestClient(namespace_emulator.connection_string_for(LISTENER, LISTENER_KEY)) as client:
        with pytest.raises(UnauthorizedError, match="Manage"):
            client.list_topics()
    # ... while the same key reads rules over AMQP
    with ManagementClient(namespace_emulator.connection_string_for(LISTENER, LISTENER_KEY)) as amqp:
        assert amqp.list_rules("orders", "s000") == list(RULES)


def test_a_wrong_key_is_unauthorized_and_never_printed(namespace_emulator):
    with ManagementRestClient(namespace_emulator.connection_string_for(LISTENER, "wrong-secret")) as client:
        with pytest.raises(UnauthorizedError) as caught:
            client.list_topics()
    assert "wrong-secret" not in str(caught.value)


def test_https_is_verified_against_the_given_ca(namespace_emulator):
    url = f"https://127.0.0.1:{namespace_emulator.port}"
    with ManagementRestClient(namespace_emulator.connection_string, base_url=url, network=Network(ca_file=namespace_emulator.ca_file)) as ok:
        assert "orders" in ok.list_topics()
    calls = []

    class Counting(RetryPolicy):
        def next_delay(self, exc, attempts, throttled):
            calls.append(attempts)
            return super().next_delay(exc, attempts, throttled)

    with ManagementRestClient(namespace_emulator.connection_string, base_url=url, retry=Counting()) as untrusted:
        with pytest.raises(TransportSecurityError, match=r"TLS with .* failed: self-signed certificate"):
            untrusted.list_topics()
    assert calls == [1]  # never retried


def test_endpoints_and_audience_follow_the_connection_string():
    cloud = ConnectionString.parse("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v")
    assert default_base_url(cloud) == "https://ns.servicebus.windows.net"
    assert token_audience(cloud) == "https://ns.servicebus.windows.net"
    local = ConnectionString.parse("Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true")
    assert default_base_url(local) == "http://127.0.0.1:5672"
    assert token_audience(local) == "https://127.0.0.1:5672"
