"""AMQP over WebSockets, HTTP CONNECT proxies and CA files: against the emulator, through a real proxy
(proxy.py) whose access log shows the traffic went through it, and Microsoft's SDK as the
independent check of the emulator's WebSockets side."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, TransportType

from reconciler import model
from reconciler.amqp.client import ManagementClient
from reconciler.demo import drifted_namespace
from reconciler.emulator import Emulator
from reconciler.namespace import errors
from reconciler.namespace.connection import ConnectionString, ConnectionStringError
from reconciler.namespace.network import Network, NetworkError, Proxy, resolve
from reconciler.rest.client import ManagementRestClient
from reconciler.rulefiles import load_paths
from tests.conftest import one_error

RULES = Path(__file__).resolve().parents[2] / "rules"
ORDERS = model.DesiredState((
    model.Topic("orders", (
        model.Subscription("eu", (model.Rule("eu", model.CorrelationFilter(properties={"region": "eu"})),)),
        model.Subscription("all"),
    )),
))


@pytest.fixture
def emulator():
    with Emulator(ORDERS, key="test-" + secrets.token_urlsafe(24)) as emu:
        yield emu


def tls_connection_string(emu: Emulator) -> str:
    """The emulator over TLS (its generated CA): a connection string without UseDevelopmentEmulator."""
    return emu.connection_string.replace(";UseDevelopmentEmulator=true", "")


# -- settings (unit) ------------------------------------------------------------------------------


@pytest.mark.unit
def test_transport_type_in_the_connection_string_chooses_websockets_unless_an_option_says_otherwise():
    conn = ConnectionString.parse("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;"
                                  "SharedAccessKey=s;TransportType=AmqpWebSockets")
    assert conn.transport_type == "amqpwebsockets"
    assert "TransportType=AmqpWebSockets" in str(conn)
    assert resolve(transport_type=conn.transport_type, environ={}).websockets
    assert not resolve(transport="amqp", transport_type=conn.transport_type, environ={}).websockets
    assert conn.transport(websockets=True).url == "wss://ns.servicebus.windows.net:443/$servicebus/websocket"
    with pytest.raises(ConnectionStringError, match="TransportType must be Amqp or AmqpWebSockets"):
        ConnectionString.parse("Endpoint=sb://ns/;TransportType=Http")


@pytest.mark.unit
def test_emulator_websockets_are_plain_on_its_port_and_tls_elsewhere():
    emu = ConnectionString.parse("Endpoint=sb://127.0.0.1:5672;UseDevelopmentEmulator=true")
    assert emu.transport(websockets=True).url == "ws://127.0.0.1:5672/$servicebus/websocket"
    assert not emu.transport(websockets=True).tls
    assert ConnectionString.parse("Endpoint=sb://ns:8443/").transport(websockets=True).port == 8443


@pytest.mark.unit
def test_proxy_from_the_environment_no_proxy_and_secrets_never_shown(tmp_path):
    env = {"https_proxy": "http://me:s3cret@proxy.corp:3128", "NO_PROXY": "localhost,.internal.corp"}
    network = resolve(environ=env)
    proxy = network.proxy
    assert proxy is not None and (proxy.host, proxy.port, proxy.source) == ("proxy.corp", 3128, "$https_proxy")
    assert "s3cret" not in repr(network) + str(proxy) + repr(proxy)
    assert proxy.headers() == {"Proxy-Authorization": "Basic bWU6czNjcmV0"}
    assert network.proxy_for("ns.servicebus.windows.net") is proxy
    assert network.proxy_for("localhost") is None and network.proxy_for("sb.internal.corp") is None
    assert resolve(proxy="http://127.0.0.1:1", environ=env).proxy.source == "--proxy"  # the option wins
    assert resolve(environ={"HTTPS_PROXY": "p:8080", "NO_PROXY": "*"}).proxy_for("anything") is None
    with pytest.raises(NetworkError, match="must be http://"):
        resolve(proxy="socks5://me:s3cret@p:1080", environ={})


@pytest.mark.unit
@pytest.mark.parametrize("url", ["http://deployer:hunter2@[::1", "http://deployer:hunter2@[::1]:99999", "http://deployer:hunter2@/x"])
def test_an_invalid_proxy_url_is_a_usage_error_that_shows_no_credentials(url, run_cli, check):
    code, out, err = run_cli("drift", "--proxy", url, "--connection-string",
                             "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0")
    check.one_error(code, out, err, 64, "--proxy: the proxy URL")
    assert "hunter2" not in err and "deployer" not in err


@pytest.mark.unit
def test_ca_file_from_the_option_then_ssl_cert_file_then_requests_ca_bundle(tmp_path):
    first, second = tmp_path / "a.pem", tmp_path / "b.pem"
    first.write_text("x")
    second.write_text("x")
    env = {"SSL_CERT_FILE": str(first), "REQUESTS_CA_BUNDLE": str(second)}
    assert resolve(environ=env).ca_file == str(first)
    assert resolve(environ={"REQUESTS_CA_BUNDLE": str(second)}).ca_file == str(second)
    assert resolve(ca_file=str(second), environ=env).ca_file == str(second)
    with pytest.raises(NetworkError, match=r"\$REQUESTS_CA_BUNDLE: CA file .* does not exist"):
        resolve(environ={"REQUESTS_CA_BUNDLE": str(tmp_path / "missing.pem")})


# -- the client over WebSockets -------------------------------------------------------------------


def test_websockets_plain_and_tls_read_what_amqp_reads(emulator):
    with ManagementClient(emulator.connection_string, timeout=10, retries=0) as amqp:
        expected = amqp.list_rules("orders", "eu")
    with ManagementClient(emulator.connection_string, network=Network("websockets"), timeout=10, retries=0) as ws:
        assert ws.list_rules("orders", "eu") == expected
    secure = Network("websockets", ca_file=emulator.ca_file)
    with ManagementClient(tls_connection_string(emulator), network=secure, timeout=10, retries=0) as wss:
        assert wss.list_rules("orders", "eu") == expected
    assert emulator.handler.errors == 0


def test_wss_verifies_the_certificate(emulator):
    with ManagementClient(tls_connection_string(emulator), network=Network("websockets"), timeout=10, retries=3) as wss:
        with pytest.raises(errors.TransportSecurityError, match=r"TLS with 127.0.0.1:.* failed: self-signed certificate"):
            wss.list_rules("orders", "eu")


def test_websockets_through_the_proxy_with_basic_auth(emulator, connect_proxy):
    target = f"127.0.0.1:{emulator.port}"
    before = connect_proxy.tunnels().count(target)
    network = Network("websockets", Proxy.parse(connect_proxy.url), ca_file=emulator.ca_file)
    with ManagementClient(tls_connection_string(emulator), network=network, timeout=10, retries=0) as client:
        assert [r.name for r in client.list_rules("orders", "eu")] == ["eu"]
    with ManagementRestClient(tls_connection_string(emulator), network=network,
                              base_url=f"https://127.0.0.1:{emulator.port}") as rest:
        assert rest.list_topics() == ["orders"]
    assert connect_proxy.wait_for_tunnel(target, before + 2).count(target) >= before + 2


def test_a_proxy_that_wants_credentials_or_is_not_there_is_one_clear_failure(emulator, connect_proxy):
    anonymous = Network("websockets", Proxy.parse(connect_proxy.anonymous_url))
    with ManagementClient(emulator.connection_string, network=anonymous, timeout=10, retries=3) as client:
        with pytest.raises(errors.EndpointRefusedError, match=r"HTTP 407.*it wants credentials"):
            client.list_rules("orders", "eu")
    wrong = Network("websockets", Proxy.parse(connect_proxy.anonymous_url.replace("//", "//ci:wrong@")))
    with ManagementRestClient(emulator.connection_string, network=wrong) as rest:
        with pytest.raises(errors.EndpointRefusedError, match=r"HTTP 407.*check the user name and password") as caught:
            rest.list_topics()
    assert "wrong" not in str(caught.value)
    nothing = Network("websockets", Proxy.parse("http://127.0.0.1:1"))
    with ManagementClient(emulator.connection_string, network=nothing, timeout=10, retries=3) as client:
        with pytest.raises(errors.EndpointRefusedError, match=r"the proxy 127.0.0.1:1 \(--proxy\) refused the connection"):
            client.list_rules("orders", "eu")


def test_a_websocket_upgrade_to_something_else_is_refused_as_not_service_bus(serve):
    def answer_404(conn):
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        conn.close()

    port = serve(answer_404)
    conn = f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=s;UseDevelopmentEmulator=true"
    with ManagementClient(conn, network=Network("websockets"), timeout=5, retries=3) as client:
        with pytest.raises(errors.NotServiceBusError, match=r"refused the WebSocket upgrade \(HTTP 404\)"):
            client.list_rules("orders", "eu")


# -- the commands ----------------------------------------------------------------------------------


@pytest.fixture
def drifted():
    live, _ = drifted_namespace(load_paths([RULES]))
    with Emulator(live, key="test-" + secrets.token_urlsafe(24)) as emu:
        yield emu


def test_plan_over_websockets_through_the_proxy_is_the_plan_over_amqp(drifted, connect_proxy, run_cli, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    code, direct, err = run_cli("plan", RULES, "--format", "json")
    assert code == 0, err
    target = f"127.0.0.1:{drifted.port}"
    before = connect_proxy.tunnels().count(target)
    monkeypatch.setenv("HTTPS_PROXY", connect_proxy.url)
    code, proxied, err = run_cli("plan", RULES, "--format", "json", "--transport", "websockets")
    assert code == 0, err
    proxied_plan, direct_plan = json.loads(proxied), json.loads(direct)
    assert proxied_plan.pop("read_at") and direct_plan.pop("read_at")  # when each read the namespace
    assert proxied_plan == direct_plan and direct_plan["changes"]
    assert connect_proxy.PASSWORD not in proxied + err
    # one tunnel for AMQP over WebSockets, one per REST connection (discovery, the tier probe)
    assert connect_proxy.wait_for_tunnel(target, before + 2).count(target) >= before + 2


def test_a_proxy_with_plain_amqp_is_said_once_and_amqp_goes_direct(drifted, connect_proxy, run_cli, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    code, _, err = run_cli("plan", RULES, "--proxy", connect_proxy.url, "--transport", "amqp")
    assert code == 0, err
    notes = [line for line in err.splitlines() if "cannot go through an HTTP proxy" in line]
    assert len(notes) == 1 and "--transport websockets" in notes[0]
    assert connect_proxy.PASSWORD not in err


def test_bad_proxy_url_or_ca_file_is_a_usage_error(drifted, run_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    one_error(*run_cli("topics", "--proxy", "ftp://p:21"), 64, "must be http://")
    one_error(*run_cli("topics", "--ca-file", tmp_path / "none.pem"), 64, "--ca-file: CA file .* does not exist")


# -- sbrules send, and Microsoft's SDK over WebSockets ---------------------------------------------


def sdk_client(emu: Emulator, **options) -> ServiceBusClient:
    """azure-servicebus over WebSockets to the emulator's port (its custom endpoint: plain ws there)."""
    return ServiceBusClient.from_connection_string(
        emu.connection_string, transport_type=TransportType.AmqpOverWebsocket,
        custom_endpoint_address=f"sb://127.0.0.1:{emu.port}", retry_total=0, **options,
    )


def test_send_over_websockets_and_the_sdk_receives_over_websockets(emulator, run_cli, monkeypatch, tmp_path):
    message = tmp_path / "m.json"
    message.write_text(json.dumps({"sys": {"Subject": "created"}, "user": {"region": "eu"}, "body": "hi"}))
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", emulator.connection_string)
    code, out, err = run_cli("send", "--topic", "orders", "--message", message, "--count", "3",
                             "--transport", "websockets")
    assert (code, out.strip()) == (0, "sent 3 of 3 message(s) to orders"), err
    with sdk_client(emulator) as sb:
        with sb.get_subscription_receiver("orders", "eu", max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=5, max_wait_time=5)
            for m in received:
                receiver.complete_message(m)
    assert [str(m) for m in received] == ["hi"] * 3
    assert received[0].subject == "created" and received[0].application_properties[b"region"] == b"eu"
    assert emulator.handler.errors == 0


def test_send_to_a_missing_topic_is_one_error(emulator, run_cli, monkeypatch, tmp_path):
    message = tmp_path / "m.json"
    message.write_text('{"user": {"region": "us"}}')
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", emulator.connection_string)
    one_error(*run_cli("send", "--topic", "nope", "--message", message), 1, "nope.*could not be found")
    message.write_text('{"user": ')
    one_error(*run_cli("send", "--topic", "orders", "--message", message), 1, "not JSON")


def test_the_sdk_through_the_proxy_over_websockets(emulator, connect_proxy):
    target = f"127.0.0.1:{emulator.port}"
    before = connect_proxy.tunnels().count(target)
    proxy = {"proxy_hostname": "127.0.0.1", "proxy_port": connect_proxy.port,
             "username": connect_proxy.USER, "password": connect_proxy.PASSWORD}
    with sdk_client(emulator, http_proxy=proxy) as sb:
        with sb.get_topic_sender("orders", keep_alive=0) as sender:
            from azure.servicebus import ServiceBusMessage

            sender.send_messages(ServiceBusMessage("via proxy", application_properties={"region": "eu"}))
    assert len(emulator.namespace.subscription("orders", "eu").store.messages) == 1
    assert connect_proxy.wait_for_tunnel(target, before + 1).count(target) >= before + 1
