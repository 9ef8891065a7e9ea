"""Subscription properties the management API reports: auto-forwarding and sessions."""

from __future__ import annotations

import socket

import pytest

from reconciler.amqp.client import ManagementClient
from reconciler.emulator import Emulator
from reconciler.emulator import state as persistence
from reconciler.emulator.namespace import Namespace
from reconciler.namespace.errors import BadRequestError
from reconciler.namespace.network import Network
from reconciler.rest.client import ManagementRestClient


@pytest.fixture
def forwarding():
    emu = Emulator()
    emu.namespace.create_queue("archive")
    emu.namespace.create_subscription("orders", "forwarded", forward_to="archive")
    with emu:
        yield emu


def test_the_service_refuses_to_browse_an_auto_forwarding_subscription(forwarding):
    with ManagementClient(forwarding.connection_string, retries=0) as client:
        with pytest.raises(BadRequestError, match="auto-forwarding enabled") as caught:
            client.list_rules("orders", "forwarded")
        assert caught.value.condition == "amqp:not-allowed"
        with pytest.raises(BadRequestError, match="auto-forwarding enabled"):
            client.peek_messages("orders", "forwarded", 0, 10)


def test_properties_survive_a_restart(tmp_path):
    namespace = Namespace()
    namespace.create_subscription("orders", "forwarded", forward_to="archive",
                                  forward_dead_lettered_messages_to="dead", requires_session=True)
    path = tmp_path / "state.json"
    persistence.save(namespace, path)
    restored = Namespace()
    persistence.load(restored, path)
    sub = restored.subscription("orders", "forwarded")
    assert (sub.forward_to, sub.forward_dead_lettered_messages_to, sub.requires_session) == ("archive", "dead", True)


def test_one_port_serves_amqp_https_and_plain_http(forwarding):
    with ManagementClient(forwarding.connection_string) as amqp, \
            ManagementRestClient(forwarding.connection_string) as plain, \
            ManagementRestClient(forwarding.connection_string, base_url=f"https://127.0.0.1:{forwarding.port}",
                                 network=Network(ca_file=forwarding.ca_file)) as tls:
        assert plain.base_url.startswith("http://") and tls.base_url.startswith("https://")
        assert plain.list_topics() == tls.list_topics() == ["orders"]
        assert amqp.peek_messages("archive", None, 0, 1) == []  # AMQP on the very same port


def test_an_unknown_http_method_gets_an_answer_not_a_hang(forwarding):
    with socket.create_connection(("127.0.0.1", forwarding.port), timeout=10) as sock:
        sock.sendall(b"BREW /coffee HTTP/1.1\r\nHost: pot\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 501")
