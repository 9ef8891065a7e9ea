"""AMQP over WebSockets: proton's byte stream carried in WebSocket binary messages (``AMQPWSB10``).

proton does AMQP over whatever socket it is given. For WebSockets it is given one end of a
socketpair, and a pump thread carries the bytes between the other end and the WebSocket
connection: TCP (through an HTTP CONNECT proxy when one is set), then TLS verified as for AMQP,
then the upgrade at ``/$servicebus/websocket``. wsproto does the WebSocket protocol, without I/O
of its own. The emulator serves upgraded connections with the same ``pump``.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time

from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from reconciler.namespace import reach
from reconciler.namespace.connection import WEBSOCKET_PATH, Transport
from reconciler.namespace.errors import ConnectFailed, NotServiceBusError
from reconciler.namespace.network import Network, http_connection

log = logging.getLogger("reconciler.amqp")

SUBPROTOCOL = "AMQPWSB10"
#: Bytes read from either side at a time; a pipelined batch of requests is usually one read.
CHUNK = 256 * 1024

#: Either kind of wsproto connection: the client's (handshake included) or a bare framing one.
Framing = WSConnection | Connection


class Tunnel:
    """One WebSocket connection to ``transport``'s host for proton: ``proton_socket`` is proton's end.

    The thread opens the WebSocket connection and then pumps until either side closes. When it could
    not open, ``failure`` says why (set before proton's end sees the socket close)."""

    def __init__(self, transport: Transport, network: Network, timeout: float) -> None:
        self.proton_socket, self._ours = socket.socketpair()
        self.failure: ConnectFailed | None = None
        self._transport = transport
        self._network = network
        self._timeout = timeout
        self._thread = threading.Thread(target=self._run, name="sbrules-websocket", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop pumping (the pump thread sees its end close and ends the WebSocket connection)."""
        try:
            self._ours.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _run(self) -> None:
        try:
            try:
                sock, ws = self._open()
            except ConnectFailed as exc:
                self.failure = exc
                return
            except Exception as exc:  # a failure to open must reach the engine, whatever it is
                log.debug("opening the WebSocket connection failed", exc_info=True)
                self.failure = ConnectFailed(f"cannot open a WebSocket connection to {self._transport.url}: {exc}")
                return
            try:
                pump(ws, sock, self._ours)
            finally:
                _shutdown(sock)
        finally:
            _shutdown(self._ours)

    def _open(self) -> tuple[socket.socket, WSConnection]:
        """TCP (through the proxy), TLS, the upgrade: the socket and the open WebSocket connection."""
        transport, network = self._transport, self._network
        proxy = network.proxy_for(transport.host)
        where = reach.host_port(transport.host, transport.port)
        started = time.monotonic()
        connection = http_connection(
            transport.host, transport.port, tls=network.tls_context() if transport.tls else None, proxy=proxy,
            timeout=self._timeout,
        )
        try:
            connection.connect()
        except TimeoutError:
            raise reach.open_timeout(where, time.monotonic() - started, "a connection") from None
        except OSError as exc:
            failure = reach.through_proxy(exc, proxy, where) if proxy else None
            failure = failure or reach.from_os_error(exc, transport.host, transport.port)
            if failure is not None:
                raise failure from None
            raise ConnectFailed(f"cannot connect to {where}: {exc}") from None
        sock = connection.sock
        assert sock is not None
        connection.sock = None  # the socket is ours now, not http.client's
        try:
            ws = _handshake(sock, transport, where, started, self._timeout)
        except BaseException:
            _shutdown(sock)
            raise
        sock.settimeout(None)
        return sock, ws


def _handshake(sock: socket.socket, transport: Transport, where: str, started: float, timeout: float) -> WSConnection:
    ws = WSConnection(ConnectionType.CLIENT)
    host = f"[{transport.host}]" if ":" in transport.host else transport.host
    sock.sendall(ws.send(Request(host=f"{host}:{transport.port}", target=WEBSOCKET_PATH, subprotocols=[SUBPROTOCOL])))
    answered = b""
    while True:
        try:
            data = sock.recv(CHUNK)
        except TimeoutError:
            raise reach.open_timeout(where, time.monotonic() - started, "a WebSocket connection") from None
        except ssl.SSLError as exc:
            raise reach.tls_failed(where, exc.reason or str(exc)) from None
        answered += data[:64]
        try:
            ws.receive_data(data or None)
            events = list(ws.events())
        except RemoteProtocolError:
            raise reach.not_http(transport.url, answered.decode("latin-1")) from None
        for event in events:
            if isinstance(event, AcceptConnection):
                if event.subprotocol != SUBPROTOCOL:
                    raise NotServiceBusError(
                        f"{transport.url} accepted the WebSocket connection without the {SUBPROTOCOL} subprotocol: "
                        "it is not a Service Bus endpoint"
                    )
                return ws
            if isinstance(event, (RejectConnection, RejectData)):
                status = getattr(event, "status_code", None)
                raise NotServiceBusError(
                    f"{transport.url} refused the WebSocket upgrade (HTTP {status}): it is not a Service Bus "
                    "WebSockets endpoint"
                )
        if not data:
            raise reach.not_amqp(where, None)


def pump(ws: Framing, net: socket.socket, local: socket.socket) -> None:
    """Carry bytes both ways between ``local`` (a plain stream) and the open WebSocket connection
    ``ws`` over ``net`` until either side closes; binary messages only, pings answered."""
    try:
        _pump(ws, net, local)
    except (OSError, LocalProtocolError, RemoteProtocolError) as exc:  # either side broke off: the stream ends
        log.debug("WebSocket connection ended: %s: %s", type(exc).__name__, exc)


def _pump(ws: Framing, net: socket.socket, local: socket.socket) -> None:
    net.setblocking(True)
    local.setblocking(True)
    with selectors.DefaultSelector() as selector:
        selector.register(net, selectors.EVENT_READ, "net")
        selector.register(local, selectors.EVENT_READ, "local")
        while True:
            for key, _ in selector.select():
                if key.data == "local":
                    data = _recv(local)
                    if not data:
                        _send(net, ws, CloseConnection(code=1000))
                        return
                    net.sendall(ws.send(BytesMessage(data=data)))
                elif not _from_net(ws, net, local):
                    return


def _from_net(ws: Framing, net: socket.socket, local: socket.socket) -> bool:
    """Read what ``net`` has (all of it, a TLS socket may hold decrypted bytes select cannot see);
    False once the WebSocket connection has ended."""
    while True:
        data = _recv(net)
        ws.receive_data(data or None)
        for event in ws.events():
            if isinstance(event, BytesMessage):
                local.sendall(event.data)
            elif isinstance(event, Ping):
                net.sendall(ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                _send(net, ws, event.response())
                return False
            elif isinstance(event, TextMessage):
                _send(net, ws, CloseConnection(code=1003, reason="AMQP over WebSockets is binary"))
                return False
        if not data:
            return False
        if not (isinstance(net, ssl.SSLSocket) and net.pending()):
            return True


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(CHUNK)
    except (ConnectionError, ssl.SSLError, OSError):
        return b""


def _send(net: socket.socket, ws: Framing, event: CloseConnection) -> None:
    """Send a close frame when the connection still allows one (never raises: the pump is ending)."""
    try:
        net.sendall(ws.send(event))
    except Exception:
        pass


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
