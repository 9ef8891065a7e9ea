"""A namespace that cannot be reached or refuses the credentials: one line naming the cause, once per
command, no traceback, exit 1, and quickly (nothing is retried that would fail the same way)."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from pathlib import Path

import pytest

from reconciler.amqp.client import ManagementClient
from reconciler.emulator import Emulator
from reconciler.rulefiles import load_paths

RULES = Path(__file__).resolve().parents[2] / "rules"
KEYS = "SharedAccessKeyName=k;SharedAccessKey=a-secret-key-value"


def emulator_string(port: int) -> str:
    return f"Endpoint=sb://127.0.0.1:{port}/;{KEYS};UseDevelopmentEmulator=true"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def http_server():
    """An ordinary web server (what `python3 -m http.server` runs) on a loopback port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def namespace():
    with Emulator(load_paths([RULES])) as emu:
        yield emu


def test_unknown_host_is_named_once(run_cli, check):
    cs = f"Endpoint=sb://nonexistent-ns-xyz.invalid/;{KEYS}"
    code, out, err = run_cli("plan", str(RULES), "--connection-string", cs)
    check.one_error(code, out, err, 1, r"cannot resolve host 'nonexistent-ns-xyz\.invalid'")
    code, out, err = run_cli("export", "--topic", "orders", "--subscription", "billing", "--connection-string", cs)
    check.one_error(code, out, err, 1, r"cannot resolve host 'nonexistent-ns-xyz\.invalid'")


def test_connection_refused_is_named_once(run_cli, check):
    cs = emulator_string(free_port())
    code, out, err = run_cli("plan", str(RULES), "--connection-string", cs)
    check.one_error(code, out, err, 1, r"refused the connection")
    code, out, err = run_cli("export", "--topic", "orders", "--subscription", "billing", "--subscription", "shipping",
                             "--connection-string", cs)
    check.one_error(code, out, err, 1, r"refused the connection")


def test_a_web_server_is_not_the_management_api(run_cli, check, http_server):
    code, out, err = run_cli("topics", "--connection-string", emulator_string(http_server))
    check.one_error(code, out, err, 1, r"is not the Service Bus management API: it answered HTTP 404 with text/html")
    # plan needs no discovery: it goes on to AMQP, which a web server does not speak
    code, out, err = run_cli("plan", str(RULES), "--timeout", "2", "--connection-string", emulator_string(http_server))
    check.one_error(code, out, err, 1, r"accepted the connection but did not open AMQP")


def test_a_listener_that_never_answers_times_out_once(run_cli, check, http_server):
    # A web server reads the AMQP header as the start of a request line and waits for its end.
    code, out, err = run_cli("export", "--topic", "orders", "--subscription", "billing", "--subscription", "shipping",
                             "--timeout", "2", "--connection-string", emulator_string(http_server))
    check.one_error(code, out, err, 1, r"accepted the connection but did not open AMQP within 1\.\ds")


def test_a_peer_that_answers_something_else_is_not_amqp(run_cli, check, serve):
    def banner(conn: socket.socket) -> None:
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        conn.recv(64)
        conn.close()

    args = ("export", "--topic", "orders", "--subscription", "billing", "--timeout", "60")
    code, out, err = run_cli(*args, "--connection-string", emulator_string(serve(banner)))
    check.one_error(code, out, err, 1, r"is not a Service Bus \(AMQP\) endpoint: it answered 'SSH-2\.0-OpenSSH_9\.6'")
    # Closing at once is answered as quickly: the timeout of a minute is never waited for.
    code, out, err = run_cli(*args, "--connection-string", emulator_string(serve(lambda conn: conn.close())))
    check.one_error(code, out, err, 1, r"closed the connection without answering the AMQP protocol header")


def test_tls_verification_failure_is_named(run_cli, check, namespace):
    # No UseDevelopmentEmulator: sbrules speaks TLS (AMQP over TLS on the given port; the emulator
    # answers a TLS handshake there), and the emulator's certificate is not trusted.
    cs = f"Endpoint=sb://127.0.0.1:{namespace.port}/;{KEYS}"
    code, out, err = run_cli("export", "--topic", "orders", "--subscription", "billing", "--connection-string", cs)
    check.one_error(code, out, err, 1, r"TLS with 127\.0\.0\.1:\d+ failed: .*certificate")


def test_a_refused_key_is_named_once_not_per_subscription(run_cli, check, namespace):
    wrong = namespace.connection_string.replace(namespace.key, "not-the-key")
    code, out, err = run_cli("plan", str(RULES), "--connection-string", wrong)
    line = check.one_error(code, out, err, 1, r"the service refused the token for .*: .*check SharedAccessKeyName")
    assert "not-the-key" not in out + err and line.count("/Subscriptions/") == 1


def test_an_expired_signature_says_when(run_cli, check):
    cs = ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessSignature=SharedAccessSignature "
          "sr=sb%3a%2f%2fns.servicebus.windows.net%2f&sig=c2lnbmF0dXJl&se=1700000000&skn=listen")
    code, out, err = run_cli("plan", str(RULES), "--connection-string", cs)
    check.one_error(code, out, err, 1, r"SharedAccessSignature .* expired at 2023-11-14 22:13:20 UTC \(\d+ days ago\)")
    code, out, err = run_cli("sample", "--topic", "orders", "--subscription", "all", "--connection-string", cs)
    check.one_error(code, out, err, 1, r"expired at 2023-11-14")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_web_endpoint_scheme_is_refused(run_cli, check, scheme):
    cs = f"Endpoint={scheme}://ns.servicebus.windows.net/;{KEYS}"
    code, out, err = run_cli("drift", str(RULES), "--connection-string", cs)
    check.one_error(code, out, err, 1, rf"Endpoint scheme {scheme}:// is not a Service Bus endpoint")


def test_a_normal_exit_closes_the_connection_with_an_amqp_close(namespace, caplog):
    caplog.set_level(logging.INFO)
    with ManagementClient(namespace.connection_string, timeout=5) as client:
        assert client.list_rules("orders", "billing")
    # A second connection's whole handshake and request: the emulator has long seen the first one end.
    with ManagementClient(namespace.connection_string, timeout=5) as client:
        assert client.list_rules("orders", "billing")
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not errors, [r.getMessage() for r in errors]
