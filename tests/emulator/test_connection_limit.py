"""No crowd of connections stops the emulator: over its connection limit it refuses cleanly (AMQP:
the service's quota error, HTTP: 503), logs a line per burst, and serves again once they go.

The emulator runs as its own ``sbrules emulator`` process with the usual 1,024-descriptor limit, so
a crowd that pushed it past what ``select()`` can watch would stop it, as it once did; the test
process raises its own limit to hold the crowd.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import resource
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.servicebus.exceptions import ServiceBusError
from proton import ConnectionException
from proton.utils import BlockingConnection

from reconciler.emulator import Emulator
from reconciler.emulator.frontdoor import FrontDoor
from reconciler.emulator.refusal import QUOTA_CONDITION
from reconciler.rulefiles import load_paths

from .process import running

RULES = Path(__file__).resolve().parents[2] / "rules"
CROWD = 2000
#: What each kind of attacker sends before it goes quiet.
KINDS = {
    "idle": b"",
    "amqp-header-only": b"AMQP\x03\x01\x00\x00",
    "partial-http": b"GET /$Resources/topics HTTP/1.1\r\nHost: x\r\n",
}


@contextlib.contextmanager
def emulator(tmp_path: Path, *args: str) -> Iterator[tuple[str, int, Path]]:
    """An ``sbrules emulator`` process seeded with ./rules: (connection string, port, its log file)."""
    with running(tmp_path / "emulator.log", "--rules", str(RULES), *args) as emu:
        yield emu.connection_string, emu.port, emu.log


@contextlib.contextmanager
def descriptors(count: int) -> Iterator[None]:
    """This process may hold ``count`` more descriptors for the duration (within the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = soft + count if hard == resource.RLIM_INFINITY else min(hard, soft + count)
    if want < count + 200:
        pytest.skip(f"the hard descriptor limit ({hard}) is too low for {count} connections")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def crowd(port: int, payload: bytes, count: int) -> list[socket.socket]:
    """``count`` connections that each send ``payload`` and then nothing (reset ones included)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            socks.append(sock)
            sock.settimeout(10)
            with contextlib.suppress(ConnectionError):  # one the emulator could only reset
                sock.connect(("127.0.0.1", port))
                sock.sendall(payload)
    except BaseException:
        disperse(socks)
        raise
    return socks


def disperse(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def send_with_sdk(conn: str, topic: str) -> None:
    """One message sent by Microsoft's SDK with no retries and a bounded operation time."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(conn, retry_total=0) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(ServiceBusMessage("after the crowd"), timeout=5)


def served_within(seconds: float, attempt: Callable[[], object]) -> None:
    """``attempt`` succeeds when started within ``seconds`` from now: the emulator sees the crowd's
    closes as they come, so an attempt that races them may be refused; it is tried again until then."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            attempt()
            return
        except (ServiceBusError, AssertionError):
            if time.monotonic() > deadline:
                raise


def amqp_refusal(port: int) -> str:
    """The error a proton client gets for its connection (empty when it was served)."""
    try:
        BlockingConnection(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS", timeout=5).close()
    except ConnectionException as exc:
        return str(exc)
    return ""


def _assert_served(port: int) -> None:
    assert amqp_refusal(port) == ""


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_crowd_of_connections_is_refused_and_the_sdk_is_served_once_it_goes(tmp_path, kind):
    topic = next(iter(load_paths([RULES]).subscriptions()))[0].name
    with emulator(tmp_path) as (conn, port, log), descriptors(CROWD):
        socks = crowd(port, KINDS[kind], CROWD)
        disperse(socks)
        served_within(1.0, lambda: send_with_sdk(conn, topic))
        text = log.read_text()
    assert len(text.encode()) < 4096, text[-2000:]
    assert "Traceback" not in text, text[-2000:]
    assert "refusing new ones" in text


@pytest.mark.slow
def test_over_the_limit_amqp_gets_the_quota_error_and_http_gets_503(tmp_path):
    topic = next(iter(load_paths([RULES]).subscriptions()))[0].name
    with emulator(tmp_path, "--max-connections", "4") as (conn, port, log):
        held = crowd(port, b"", 4)
        try:
            assert QUOTA_CONDITION in amqp_refusal(port)
            with pytest.raises(ServiceBusError) as refused:  # Microsoft's SDK reads the condition too
                send_with_sdk(conn, topic)
            assert QUOTA_CONDITION in str(refused.value)
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            client.request("GET", "/$Resources/topics")
            assert client.getresponse().status == 503
            client.close()
        finally:
            disperse(held)
        served_within(1.0, lambda: _assert_served(port))
        lines = log.read_text().splitlines()
    assert sum("refusing new ones" in line for line in lines) == 1, lines
    assert sum("below the connection limit again" in line for line in lines) == 1, lines


@pytest.mark.slow
def test_a_request_whose_headers_trickle_in_is_cut_at_the_header_deadline(monkeypatch):
    monkeypatch.setattr(FrontDoor, "header_deadline", 0.5)
    with Emulator() as emu, socket.create_connection(("127.0.0.1", emu.port), timeout=10) as sock:
        sock.sendall(b"GET /$Resources/topics HTTP/1.1\r\nHo")
        assert sock.recv(1024) == b""  # the emulator ended it (a timeout here would raise)


@pytest.mark.slow
def test_a_websocket_key_that_is_not_ascii_gets_400_and_no_traceback(caplog):
    request = (
        "GET /$servicebus/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\nSec-WebSocket-Key: ÄÖÜäöüßÄÖÜäöüßÄÖÜäöüßÄÖÜ\r\n\r\n"
    ).encode("latin-1")
    with Emulator() as emu, socket.create_connection(("127.0.0.1", emu.port), timeout=10) as sock:
        sock.sendall(request)
        assert sock.makefile("rb").readline().split()[1] == b"400"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.slow
def test_a_websocket_upgrade_that_would_put_proton_over_the_limit_gets_503():
    request = (
        b"GET /$servicebus/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    with Emulator(max_connections=2) as emu, socket.create_connection(("127.0.0.1", emu.port), timeout=10) as idle:
        with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as upgrade:
            upgrade.sendall(request)  # its own connection is the second; proton's end would be a third
            assert upgrade.makefile("rb").readline().split()[1] == b"503"
        idle.close()
        deadline = time.monotonic() + 10
        while emu.open_connections and time.monotonic() < deadline:  # both closes seen by the emulator
            time.sleep(0.01)
        assert emu.open_connections == 0
        with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as upgrade:
            upgrade.sendall(request)
            assert upgrade.makefile("rb").readline().split()[1] == b"101"
