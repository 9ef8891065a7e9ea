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

Connections are limited (``max_connections``): proton's loop watches its sockets with ``select()``,
which cannot watch a descriptor numbered 1024 or more, so the process must never hold that many.
A connection counts from its accept until it is closed: while its first byte is awaited, while its
HTTP thread serves it, and, once handed to proton, until proton reports its transport closed (a
WebSocket connection counts twice: its HTTP socket and proton's end of the socketpair). Over the
limit, a few connections at a time are answered by ``refusal.Refusal`` (AMQP quota error, HTTP 503)
and the rest closed at once; one line is logged when a burst starts and one when it ends. Every
HTTP request must send its request line and headers within ``HEADER_DEADLINE`` of its first byte.
"""

from __future__ import annotations

import base64
import logging
import selectors
import socket
import ssl
import struct
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
from reconciler.emulator.refusal import Refusal

log = logging.getLogger("reconciler.emulator")

TLS_HANDSHAKE = 0x16
AMQP_FIRST_BYTE = ord("A")
#: A connection that sends nothing within this many seconds is closed.
FIRST_BYTE_DEADLINE = 20.0
#: An idle keep-alive HTTP connection is closed after this many seconds.
HTTP_IDLE_TIMEOUT = 120.0
#: A request's line and headers must arrive within this many seconds of its first byte.
HEADER_DEADLINE = 10.0
BACKLOG = 128
#: Connections served at once by default: with WebSocket pairs and the process's own files, well
#: under the 1024 descriptors ``select()`` can watch.
DEFAULT_MAX_CONNECTIONS = 300
#: Over-limit connections answered (not just closed) at a time, and how long each may take.
REFUSING = 32
REFUSAL_DEADLINE = 2.0

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

    header_deadline = HEADER_DEADLINE

    def __init__(
        self,
        host: str,
        port: int,
        on_amqp: Callable[[socket.socket, Address], None],
        http_handler: Callable[[str], type],
        tls_context: Callable[[], ssl.SSLContext],
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.max_connections = max_connections
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
        #: Connections admitted and not yet closed (guarded by ``_http_lock``).
        self.open = 0
        self._refusing: dict[socket.socket, tuple[Refusal, float]] = {}
        self._refused = 0
        #: HTTP connections that must finish their request's headers by a time (guarded by ``_http_lock``).
        self._header_deadlines: dict[socket.socket, float] = {}
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
                for key, _ in self._selector.select(self._timeout(time.monotonic())):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._waker_r.recv(64)
                    elif key.data == "refuse":
                        self._refuse(cast(socket.socket, key.fileobj))
                    else:
                        self._route(cast(socket.socket, key.fileobj))
                self._expire(time.monotonic())
        except Exception:  # report, never die silently
            log.exception("emulator: the listener stopped with an error")
        finally:
            for sock in [*self._pending, *self._refusing]:
                self._drop(sock)
            self._selector.close()
            self._listener.close()
            self._waker_r.close()
            self._waker_w.close()

    def _timeout(self, now: float) -> float | None:
        with self._http_lock:
            headers = list(self._header_deadlines.values())
        deadlines = [d for _, d in self._pending.values()] + [d for _, d in self._refusing.values()] + headers
        return max(0.0, min(deadlines) - now) if deadlines else None

    def admit(self) -> bool:
        """Take a slot for a new connection; False at the limit (a burst's first and last refusal are logged)."""
        with self._http_lock:
            admitted = self.open < self.max_connections
            if admitted:
                self.open += 1
                ended, self._refused = self._refused, 0
            else:
                self._refused += 1
                started = self._refused == 1
        if admitted and ended:
            log.warning("emulator: below the connection limit again after refusing %d connections", ended)
        elif not admitted and started:
            log.warning("emulator: %d connections open, the limit; refusing new ones until some close",
                        self.max_connections)
        return admitted

    def release(self) -> None:
        """Give back the slot of a connection that is now closed (any thread)."""
        with self._http_lock:
            self.open -= 1

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
            if not self.admit():
                self._start_refusal(sock)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            self._pending[sock] = (address, time.monotonic() + FIRST_BYTE_DEADLINE)
            self._selector.register(sock, selectors.EVENT_READ, "first-byte")

    def _start_refusal(self, sock: socket.socket) -> None:
        if len(self._refusing) >= REFUSING:
            _abort(sock)
            return
        refusal = Refusal(f"the emulator serves at most {self.max_connections} connections at once")
        self._refusing[sock] = (refusal, time.monotonic() + REFUSAL_DEADLINE)
        self._selector.register(sock, selectors.EVENT_READ, "refuse")

    def _refuse(self, sock: socket.socket) -> None:
        """Answer what the over-limit client sent; once answered, only read (and drop) what it still
        sends until it closes: closing with its frames unread would reset the connection before
        the client has read the answer."""
        refusal, _ = self._refusing[sock]
        try:
            data = sock.recv(65536)
            if data and not refusal.done:
                reply = refusal.feed(data)
                if reply:
                    sock.sendall(reply)
                if refusal.done:
                    sock.shutdown(socket.SHUT_WR)
        except OSError:
            data = b""
        if not data:
            del self._refusing[sock]
            self._selector.unregister(sock)
            sock.close()

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
            first = b""
        if not first:
            sock.close()
            self.release()
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
                self.release()
        for sock, (_, deadline) in list(self._refusing.items()):
            if deadline <= now:
                del self._refusing[sock]
                self._drop(sock)
        with self._http_lock:
            late = [sock for sock, deadline in self._header_deadlines.items() if deadline <= now]
            for sock in late:
                del self._header_deadlines[sock]
        for sock in late:  # the connection's thread then reads the end of its stream and finishes
            _cut(sock)

    def headers_by(self, sock: socket.socket, deadline: float | None) -> None:
        """Cut ``sock`` unless its request's headers are read by ``deadline`` (None: they were)."""
        with self._http_lock:
            if deadline is None:
                self._header_deadlines.pop(sock, None)
                return
            self._header_deadlines[sock] = deadline
        try:
            self._waker_w.send(b"x")
        except OSError:
            pass

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
        key = headers.get("Sec-WebSocket-Key") or ""
        offered = [p.strip() for p in (headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        request.close_connection = True
        if (headers.get("Upgrade") or "").lower() != "websocket" or headers.get("Sec-WebSocket-Version") != "13":
            request.send_error(400, "expected a WebSocket (version 13) upgrade request")
            return
        if not _valid_key(key):
            request.send_error(400, "Sec-WebSocket-Key must be 16 bytes in base64")
            return
        if SUBPROTOCOL not in offered:
            request.send_error(400, f"AMQP over WebSockets needs the {SUBPROTOCOL} subprotocol")
            return
        if not self.admit():  # proton's end of the pair is one more connection for its loop
            request.send_error(503, "the emulator is at its connection limit; retry")
            return
        try:
            request.send_response(101, "Switching Protocols")
            request.send_header("Upgrade", "websocket")
            request.send_header("Connection", "Upgrade")
            request.send_header("Sec-WebSocket-Accept", generate_accept_token(key.encode("ascii")).decode("ascii"))
            request.send_header("Sec-WebSocket-Protocol", SUBPROTOCOL)
            request.end_headers()
            ours, theirs = socket.socketpair()
        except BaseException:  # proton never got its end: give its slot back here
            self.release()
            raise
        try:
            self._on_amqp(theirs, request.client_address)  # proton gives the slot back when it closes
            pump(Connection(ConnectionType.SERVER), request.connection, ours)
        finally:
            _shutdown(ours)

    def _serve_http(self, sock: socket.socket, address: Address, tls: bool) -> None:
        sock.setblocking(True)
        sock.settimeout(HTTP_IDLE_TIMEOUT)
        with self._http_lock:
            if self._closed.is_set():
                self.open -= 1
                sock.close()
                return
            self._http.add(sock)
        conn: socket.socket = sock
        try:
            if tls:
                self.headers_by(sock, time.monotonic() + self.header_deadline)  # the handshake too
                conn = self._tls_context().wrap_socket(sock, server_side=True)
                with self._http_lock:  # wrapping detached ``sock``: close the wrapper instead
                    self._header_deadlines.pop(sock, None)
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
                self._header_deadlines.pop(sock, None)
                self._header_deadlines.pop(conn, None)
                self.open -= 1
            _shutdown(conn)


def _valid_key(key: str) -> bool:
    """A WebSocket key is 16 random bytes in base64 (RFC 6455 §4.1): 24 ASCII characters."""
    if not key.isascii() or len(key) != 24:
        return False
    try:
        return len(base64.b64decode(key, validate=True)) == 16
    except ValueError:
        return False


def _cut(sock: socket.socket) -> None:
    """End a connection another thread is blocked reading (the plain socket's shutdown, also for TLS)."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _abort(sock: socket.socket) -> None:
    """Close at once with a reset: nothing is owed to a connection the emulator cannot even answer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
