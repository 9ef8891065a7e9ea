"""One port for every protocol: AMQP, AMQP over WebSockets and the management REST API.

Every client of a namespace gets one connection string, and Microsoft's SDKs derive both endpoints
from its ``Endpoint``: ``ServiceBusClient`` speaks AMQP to host:port, and
``ServiceBusAdministrationClient`` speaks HTTPS to the very same host:port. So the emulator listens
once and looks at what each connection sends first: an AMQP client opens with the protocol header
(``AMQP``), a TLS client with a handshake record (0x16), a plain HTTP client with a method name.
AMQP connections are handed to proton's event loop; HTTP ones are served on a thread of their own
(TLS with the emulator's generated certificate, or plain for sbrules' loopback-only emulator mode).
An HTTP request to upgrade at ``/$servicebus/websocket`` (subprotocol ``AMQPWSB10``) becomes AMQP
over WebSockets: proton gets one end of a socketpair, as it gets an AMQP connection's socket, and
the connection's thread pumps WebSocket messages to and from the other end.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Callable, cast

import proton
from proton.reactor import Container
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.utilities import generate_accept_token

from reconciler.amqp.reactor import attach_socket
from reconciler.amqp.websocket import SUBPROTOCOL, pump

log = logging.getLogger("reconciler.emulator")

TLS_HANDSHAKE = 0x16
AMQP_FIRST_BYTE = ord("A")
#: A connection that sends nothing within this many seconds is closed.
FIRST_BYTE_DEADLINE = 20.0
#: An idle keep-alive HTTP connection is closed after this many seconds.
HTTP_IDLE_TIMEOUT = 120.0
BACKLOG = 128

Address = tuple


def adopt_amqp(container: Container, sock: socket.socket, address: Address) -> None:
    """Serve an accepted socket as an AMQP server connection (on proton's loop thread)."""
    attach_socket(container, server_transport(container, address), sock)


def server_transport(container: Container, address: Address) -> proton.Transport:
    """A new server connection on ``container``'s loop, bound to a transport with no socket yet.

    The same steps as proton's own ``Acceptor`` takes for a socket it accepted itself; a connection
    with an ``_acceptor`` is one proton's I/O handler must not try to connect out. Until a socket is
    attached, the transport's bytes are whatever its owner pushes (the in-process fuzzer does that).
    """
    connection = container.connection()
    connection._acceptor = adopt_amqp
    connection.url = proton.Url(host=address[0], port=address[1])
    transport = proton.Transport(proton.Transport.SERVER)
    transport._selectable = None
    transport.bind(connection)
    return transport


class FrontDoor:
    """Accepts on one port and routes each connection by its first byte."""

    def __init__(
        self,
        host: str,
        port: int,
        on_amqp: Callable[[socket.socket, Address], None],
        http_handler: Callable[[str], type],
        tls_context: Callable[[], ssl.SSLContext],
    ) -> None:
        self._on_amqp = on_amqp
        self._http_handler = http_handler
        self._tls_context = tls_context
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
        self._listener.bind((host, port))
        self._listener.listen(BACKLOG)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._waker_r, self._waker_w = socket.socketpair()
        self._pending: dict[socket.socket, tuple[Address, float]] = {}
        self._http: set[socket.socket] = set()
        self._http_lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._waker_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name="sbrules-emulator-frontdoor", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop accepting; close connections not yet routed and every HTTP connection."""
        self._closed.set()
        try:
            self._waker_w.send(b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(10)
        with self._http_lock:
            for sock in list(self._http):
                _shutdown(sock)

    # -- the accept loop -------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._closed.is_set():
                now = time.monotonic()
                deadlines = [d for _, d in self._pending.values()]
                timeout = max(0.0, min(deadlines) - now) if deadlines else None
                for key, _ in self._selector.select(timeout):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._waker_r.recv(64)
                    else:
                        self._route(cast(socket.socket, key.fileobj))
                self._expire(time.monotonic())
        except Exception:  # report, never die silently
            log.exception("emulator: the listener stopped with an error")
        finally:
            for sock in list(self._pending):
                self._drop(sock)
            self._selector.close()
            self._listener.close()
            self._waker_r.close()
            self._waker_w.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("emulator: accept failed: %s", exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            self._pending[sock] = (address, time.monotonic() + FIRST_BYTE_DEADLINE)
            self._selector.register(sock, selectors.EVENT_READ, "first-byte")

    def _route(self, sock: socket.socket) -> None:
        address, _ = self._pending.pop(sock)
        self._selector.unregister(sock)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            self._pending[sock] = (address, time.monotonic() + FIRST_BYTE_DEADLINE)
            self._selector.register(sock, selectors.EVENT_READ, "first-byte")
            return
        except OSError:
            sock.close()
            return
        if not first:
            sock.close()
        elif first[0] == AMQP_FIRST_BYTE:
            self._on_amqp(sock, address)
        else:
            threading.Thread(
                target=self._serve_http, args=(sock, address, first[0] == TLS_HANDSHAKE),
                name="sbrules-emulator-http", daemon=True,
            ).start()

    def _expire(self, now: float) -> None:
        for sock, (_, deadline) in list(self._pending.items()):
            if deadline <= now:
                del self._pending[sock]
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    # -- HTTP ------------------------------------------------------------------------------------
    def serve_websocket(self, request: BaseHTTPRequestHandler) -> None:
        """Upgrade ``request`` (on its connection's thread) to AMQP over WebSockets and pump it until
        either side closes; a request that is not a WebSocket upgrade to AMQPWSB10 gets 400."""
        headers = request.headers
        key = headers.get("Sec-WebSocket-Key")
        offered = [p.strip() for p in (headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        request.close_connection = True
        if (headers.get("Upgrade") or "").lower() != "websocket" or not key or headers.get("Sec-WebSocket-Version") != "13":
            request.send_error(400, "expected a WebSocket (version 13) upgrade request")
            return
        if SUBPROTOCOL not in offered:
            request.send_error(400, f"AMQP over WebSockets needs the {SUBPROTOCOL} subprotocol")
            return
        request.send_response(101, "Switching Protocols")
        request.send_header("Upgrade", "websocket")
        request.send_header("Connection", "Upgrade")
        request.send_header("Sec-WebSocket-Accept", generate_accept_token(key.encode("ascii")).decode("ascii"))
        request.send_header("Sec-WebSocket-Protocol", SUBPROTOCOL)
        request.end_headers()
        ours, theirs = socket.socketpair()
        try:
            self._on_amqp(theirs, request.client_address)
            pump(Connection(ConnectionType.SERVER), request.connection, ours)
        finally:
            _shutdown(ours)

    def _serve_http(self, sock: socket.socket, address: Address, tls: bool) -> None:
        sock.setblocking(True)
        sock.settimeout(HTTP_IDLE_TIMEOUT)
        with self._http_lock:
            if self._closed.is_set():
                sock.close()
                return
            self._http.add(sock)
        conn: socket.socket = sock
        try:
            if tls:
                conn = self._tls_context().wrap_socket(sock, server_side=True)
                with self._http_lock:  # wrapping detached ``sock``: close the wrapper instead
                    self._http.discard(sock)
                    self._http.add(conn)
            self._http_handler("https" if tls else "http")(conn, address, self)
        except (ssl.SSLError, OSError) as exc:
            log.debug("emulator: management API connection from %s ended: %s", address, exc)
        except Exception:  # one connection must not take the listener down
            log.exception("emulator: management API connection from %s failed", address)
        finally:
            with self._http_lock:
                self._http.discard(conn)
            _shutdown(conn)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
