"""Discovery degrades, never blocks: when the management REST API cannot be used (nothing listens,
an AMQP-only endpoint answers, a silent server, or --no-discovery), plan, drift and apply carry on
from the declared names, as with a Listen-only key, and say why once."""

from __future__ import annotations

import socket

import pytest
import yaml

from reconciler import model
from reconciler.emulator import Emulator

RULE = model.Rule("eu", model.SqlFilter("region = 'eu'"))


@pytest.fixture
def emulator():
    emu = Emulator()
    emu.namespace.create_subscription("orders", "billing", (RULE,))
    emu.namespace.create_subscription("orders", "undeclared")
    with emu:
        yield emu


@pytest.fixture
def rules(tmp_path):
    path = tmp_path / "rules"
    path.mkdir()
    doc = {"topic": "orders", "subscriptions": {"billing": {"rules": [model.rule_to_doc(RULE), {"name": "us", "sql": "region = 'us'"}]}}}
    (path / "orders.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _amqp_only(conn: socket.socket) -> None:
    """What an AMQP port does with an HTTP request: answers with its own protocol header and closes."""
    with conn:
        conn.recv(65536)
        conn.sendall(b"AMQP\x00\x01\x00\x00")


def _silent(conn: socket.socket) -> None:
    with conn:
        conn.recv(4096)
        conn.recv(4096)


@pytest.mark.parametrize(
    "endpoint, cause",
    [
        ("closed", "refused the connection"),
        ("amqp", "speaks AMQP, not HTTP"),
        ("silent", "no response in time"),
    ],
)
def test_plan_carries_on_from_the_declared_names_and_names_the_cause_once(
    emulator, rules, run_cli, serve, endpoint, cause
):
    port = {"closed": _closed_port, "amqp": lambda: serve(_amqp_only), "silent": lambda: serve(_silent)}[endpoint]()
    args = ["--connection-string", emulator.connection_string, "--management-endpoint", f"http://127.0.0.1:{port}", "--timeout", "2"]
    code, out, err = run_cli("plan", rules, "--detailed-exitcode", *args)
    assert code == 2, out + err
    assert "+ create rule 'us'" in out and "Traceback" not in out + err
    notes = [line for line in out.splitlines() if "discovery skipped" in line]
    assert len(notes) == 1 and cause in notes[0], out
    assert "orders/undeclared" not in out  # nothing was listed, so nothing is called undeclared


def test_no_discovery_plans_drifts_and_applies_from_the_declared_names(emulator, rules, run_cli):
    args = ["--connection-string", emulator.connection_string, "--no-discovery"]
    code, out, err = run_cli("drift", rules, "--strict", *args)
    assert code == 2 and "discovery skipped: --no-discovery was given" in out, out + err
    code, out, err = run_cli("apply", rules, "--auto-approve", *args)
    assert code == 0, out + err
    code, out, err = run_cli("drift", rules, "--strict", *args)
    assert code == 0 and "In sync" in out, out + err
    code, out, _ = run_cli("drift", rules, "--strict", "--connection-string", emulator.connection_string)
    assert code == 2 and "undeclared" in out  # with discovery, the undeclared subscription is drift under --strict


@pytest.mark.unit
@pytest.mark.parametrize("url", ["http://example.com", "ftp://127.0.0.1/", "localhost:5300"])
def test_a_management_endpoint_must_be_https_or_loopback_http(run_cli, rules, url):
    code, _, err = run_cli("plan", rules, "--connection-string", "Endpoint=sb://x/;SharedAccessKeyName=a;SharedAccessKey=b", "--management-endpoint", url)
    assert code == 64 and "--management-endpoint" in err


def test_an_environment_names_its_management_endpoint(emulator, rules, run_cli, serve):
    port = serve(_amqp_only)
    (rules / "sbrules.yaml").write_text(yaml.safe_dump({"environments": {"local": {"management_endpoint": f"http://127.0.0.1:{port}"}}}))
    code, out, err = run_cli("plan", rules, "--env", "local", "--connection-string", emulator.connection_string, "--timeout", "2")
    assert code == 0, out + err
    assert "speaks AMQP, not HTTP" in out
