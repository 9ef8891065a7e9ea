"""The AMQP transport under the request pipeline: one connection, CBS, link pairs, correlation.

proton is single-threaded: the Container runs in its own thread and only that thread touches
proton objects. Callers hand requests over through a queue and an ``EventInjector`` and are told
of each answer through the request's ``on_done`` callback. Responses are matched by
correlation-id = the request's message-id, so any number of requests may be in flight on one
link pair (pipelining).

Per entity (``<entity>/$management``) the loop first puts a token on ``$cbs`` for the audience
``sb://host/<entity>/$management``, then attaches a sender (pre-settled) and a receiver whose
target is a unique reply-to address, and re-puts the token before it expires. A ``SEND`` request
carries one encoded message to the entity itself: the token is for ``sb://host/<entity>``, the link
one unsettled sender, and the request is answered when the service settles the delivery
(at-least-once: accepted is 200, rejected its error, released or modified a retryable one). A dropped
connection fails every request in flight with ConnectionLostError; the next request reconnects.
A first connection that never opens fails for a classified reason (``reach``: host not found,
refused, not AMQP, TLS, open timeout) that every later request gets at once, without reconnecting:
another try would fail the same way. On close the loop sends an AMQP close and waits (briefly) for
the peer's, so that a normal exit is not a dropped socket to the service.
Every handler is guarded: an exception escaping a handler would stop the loop for everyone.

The handler is a plain proton ``Handler``, not a ``MessagingHandler``: the latter runs every event
through four helper handlers and decodes each message into Python with proton's slow ``Data``
walk, which together were most of the client's time per request. Here responses are read as raw
bytes by ``deliveries.ResponseCollector`` (before proton wraps the event), decoded by ``wire.sections``,
and the receive credit is topped up by hand.
"""

from __future__ import annotations

import functools
import itertools
import logging
import queue
import ssl
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable

import proton
from proton import Condition, Handler, SSLDomain, symbol, uint
from proton.reactor import ApplicationEvent, AtLeastOnce, AtMostOnce, EventInjector, LinkOption

from reconciler.amqp.deliveries import CREDIT, ResponseCollector, quiet_events
from reconciler.amqp.reactor import attach_socket, container
from reconciler.amqp.websocket import Tunnel
from reconciler.amqp.wire import sections
from reconciler.amqp.wire.types import DecodeError
from reconciler.namespace import reach
from reconciler.namespace.connection import ConnectionString, Transport
from reconciler.namespace.credentials import JWT_TOKEN_TYPE, TokenProvider
from reconciler.namespace.errors import (
    AuthenticationError,
    ClientClosedError,
    ConnectFailed,
    ConnectionLostError,
    ManagementError,
    UnauthorizedError,
    error_for,
    response_status,
)
from reconciler.namespace.network import DIRECT, Network
from reconciler.namespace.pipeline import Request, Response, next_message_id

log = logging.getLogger("reconciler.amqp")

CBS_ADDRESS = "$cbs"
#: The operation of a request whose body is an encoded message to send to the entity itself.
SEND = "sbrules:send"
#: Detach conditions on a working management link that a re-authorised retry can recover from.
_RECOVERABLE_DETACH = {"amqp:unauthorized-access", "amqp:link:detach-forced", "amqp:connection:forced"}
#: Re-put a token this long before it expires (NET2: 10 min, but never less than a third of its life).
REFRESH_MARGIN_SECONDS = 600.0
#: On close, how long to wait for the peer to answer our AMQP close before dropping the socket.
CLOSE_GRACE_SECONDS = 2.0


class _Attributes(LinkOption):
    """Attach properties the SDKs send on management links (symbol keys)."""

    def __init__(self, timeout_ms: int) -> None:
        self._props = {
            symbol("com.microsoft:timeout"): uint(timeout_ms),
            symbol("com.microsoft:entity-type"): "entity-mgmt",
        }

    def apply(self, link: proton.Link) -> None:
        link.properties = self._props


class _EntityState(StrEnum):
    """An entity's link pair: waiting for its CBS token, then ready for requests."""

    AUTH = "auth"
    READY = "ready"


@dataclass(eq=False)
class _Entity:
    """Link pair and auth state of one ``<entity>/$management`` node, or the sender to the entity
    itself (``sends``)."""

    name: str
    sends: bool = False
    state: _EntityState = _EntityState.AUTH
    reply_to: str = field(default_factory=lambda: f"sbrules-reply-{uuid.uuid4().hex}")
    sender: proton.Sender | None = None
    receiver: proton.Receiver | None = None
    backlog: deque = field(default_factory=deque)
    token_expires_at: float = 0.0
    token_type: str = ""
    proven: bool = False  # a response arrived over this link pair (attach refusals come as attach+detach)

    #: Link names, kept as strings: reading ``link.name`` is a foreign call on every use.
    sender_name: str | None = None
    receiver_name: str | None = None

    @property
    def address(self) -> str:
        return self.name if self.sends else f"{self.name}/$management"


def guarded(method: Callable) -> Callable:
    """Keep the event loop alive: log a handler's exception and fail what it was working on."""

    @functools.wraps(method)
    def wrapper(self: "Engine", *args: Any) -> None:
        try:
            method(self, *args)
        except Exception:  # the loop must survive any single failure
            log.exception("internal error in AMQP handler %s; resetting the connection", method.__name__)
            try:
                self._drop(ConnectionLostError("internal client error (run with -v for the details)"))
            except Exception:
                log.exception("could not reset the connection")

    return wrapper


def client_ssl_domain(ca_file: str | None = None) -> SSLDomain:
    """TLS client settings: certificate chain and host name verified against trusted CAs."""
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    paths = ssl.get_default_verify_paths()
    trusted = ca_file or paths.cafile or paths.openssl_cafile
    if trusted:
        domain.set_trusted_ca_db(trusted)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, trusted)
    return domain


class Engine(Handler):
    """The AMQP transport of the request pipeline: owns the proton Container thread; ``submit``,
    ``forget`` and ``close`` are the only methods other threads call."""

    def __init__(
        self,
        conn: ConnectionString,
        transport: Transport,
        tokens: TokenProvider,
        *,
        network: Network = DIRECT,
        link_timeout: float = 60.0,
        refresh_margin: float = REFRESH_MARGIN_SECONDS,
    ) -> None:
        self._conn = conn
        self._transport = transport
        self._tokens = tokens
        self._network = network
        #: The WebSocket tunnel of the current connection (AMQP over WebSockets only).
        self._tunnel: Tunnel | None = None
        self._link_timeout_ms = int(link_timeout * 1000)
        #: Half a request's time: leaves the other half for a retry on a fresh connection.
        self._connect_timeout = max(0.5, link_timeout / 2)
        self._refresh_margin = refresh_margin
        self._inbox: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self._pending: dict[str, Request] = {}
        self._lock = threading.Lock()
        self._wake_pending = False  # a "sbrules_work" event is queued and will drain the inbox
        self._names = itertools.count(1)
        self._generation = 0
        self._connection: proton.Connection | None = None
        self._cbs_sender: proton.Sender | None = None
        self._cbs_sender_name = ""
        self._cbs_receiver_name = ""
        self._cbs_reply = ""
        self._cbs_waiting: dict[str, str] = {}  # put-token message-id → entity address
        self._entities: dict[str, _Entity] = {}  # by address
        self._link_entities: dict[str, _Entity] = {}  # by link name: a scan per response was O(entities)
        #: Encoded messages waiting for credit, by sender link name, each with the message-id of the
        #: request its settlement answers (None: sent pre-settled).
        self._outbox: dict[str, deque[tuple[bytes, str | None]]] = {}
        self._closed = False
        self._opened = False
        self._ever_opened = False
        self._connect_started = 0.0
        #: Why the first connection could not be made; every later request fails with it at once.
        self._fatal: ConnectFailed | None = None
        self._stopping = False  # closing: an AMQP close is sent, the peer's answer awaited
        self._stopped = False
        self._injector = EventInjector()
        self._container = container(self)
        # Set before the loop runs or connects: connections report their events to this collector.
        self._container._collector = ResponseCollector(self._on_payload, quiet_events(self))
        self._container.container_id = f"sbrules-{uuid.uuid4().hex[:12]}"
        self._container.selectable(self._injector)
        self._thread = threading.Thread(target=self._run, name="sbrules-amqp", daemon=True)
        self._thread.start()

    # -- called from any thread -------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue ``request``; the loop sends it (connecting and authorising first when needed)."""
        if self._fatal is not None:
            request.finish(error=error_copy(self._fatal))
            return
        # Queued under the lock, which closing takes to set ``_closed``: a request either sees the
        # client closed or is pending when the loop fails everything pending, never neither.
        with self._lock:  # the loop also clears the wake-up flag under it before draining
            closed = self._closed
            if not closed:
                self._pending[request.message_id] = request
                self._inbox.put(request)
                wake, self._wake_pending = not self._wake_pending, True
        if closed:
            request.finish(error=ClientClosedError("the management client is closed"))
            return
        if wake:  # one wake-up drains the whole inbox; a wake-up per request costs an event each
            self._injector.trigger(ApplicationEvent("sbrules_work"))

    def forget(self, request: Request) -> bool:
        """Stop waiting for ``request`` (the caller timed out); a late response is dropped.

        False when the loop had already taken it to finish it (its ``on_done`` still runs).
        """
        with self._lock:
            return self._pending.pop(request.message_id, None) is not None

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._inbox.put(None)
        self._injector.trigger(ApplicationEvent("sbrules_work"))
        self._thread.join(timeout)

    # -- loop thread --------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._container.run()
        except Exception:  # report, then fail everyone waiting
            log.debug("AMQP event loop stopped", exc_info=True)
        finally:
            with self._lock:
                self._closed = True
            self._fail_all(lambda: ClientClosedError("the AMQP event loop stopped"))

    def _fail_all(self, make_error: Callable[[], ManagementError], entity: str | None = None) -> None:
        with self._lock:
            victims = [r for r in self._pending.values() if entity is None or r.entity == entity]
            for request in victims:
                self._pending.pop(request.message_id, None)
        for request in victims:
            request.finish(error=make_error())

    @guarded
    def on_sbrules_work(self, event: proton.Event) -> None:
        with self._lock:
            self._wake_pending = False
        while True:
            try:
                request = self._inbox.get_nowait()
            except queue.Empty:
                return
            if request is None:
                self._shutdown()
                return
            with self._lock:
                live = request.message_id in self._pending
            if live:
                self._dispatch(request)

    def _shutdown(self) -> None:
        """Fail what waits, close the connection with an AMQP close, and stop once the peer answered."""
        self._fail_all(lambda: ClientClosedError("the management client is closed"))
        connection = self._connection
        if connection is not None and self._opened and connection.state & proton.Endpoint.LOCAL_ACTIVE:
            self._stopping = True
            connection.close()
            self._container.schedule(CLOSE_GRACE_SECONDS, _Callback(self._stop))
            return
        self._stop()

    def _stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._injector.close()
        self._container.stop()

    def _dispatch(self, request: Request) -> None:
        fatal = self._fatal
        if fatal is not None:
            self._fail_all(lambda: error_copy(fatal))
            return
        if self._connection is None and not self._connect():
            return
        sends = request.operation == SEND
        address = request.entity if sends else f"{request.entity}/$management"
        entity = self._entities.get(address)
        if entity is None:
            entity = _Entity(request.entity, sends)
            self._entities[address] = entity
            self._put_token(entity)
        if entity.state is _EntityState.READY:
            self._send(entity, request)
        else:
            entity.backlog.append(request)

    def _connect(self) -> bool:
        """Start connecting (False when the host name does not even resolve)."""
        self._generation += 1
        transport = self._transport
        kwargs: dict[str, Any] = {
            "reconnect": False,
            "sasl_enabled": True,
            "allowed_mechs": "ANONYMOUS",
            "virtual_host": transport.host,
        }
        url = transport.url
        if transport.websockets:  # proton does plain AMQP over the tunnel, which does TLS (and the proxy)
            self._tunnel = Tunnel(transport, self._network, self._connect_timeout)
            url = f"amqp://{self._where}"
        else:
            try:
                reach.resolve(transport.host, transport.port)  # proton's own lookup would raise inside its loop
            except ConnectFailed as exc:
                self._connection_failed(exc)
                return False
            if transport.tls:
                kwargs["ssl_domain"] = client_ssl_domain(self._network.ca_file)
        log.debug("connecting to %s", transport.url)
        self._connection = self._container.connect(url=url, **kwargs)
        if self._tunnel is not None:
            self._connection._acceptor = self._tunnel  # connected already: proton must not connect out
        self._connection._sbrules_generation = self._generation
        self._opened = False
        self._connect_started = time.monotonic()
        self._container.schedule(self._connect_timeout, _Callback(self._connect_deadline, self._generation))
        self._cbs_reply = f"sbrules-cbs-{uuid.uuid4().hex}"
        self._cbs_sender_name = self._link_name("cbs-sender")
        self._cbs_receiver_name = self._link_name("cbs-receiver")
        self._cbs_sender = self._container.create_sender(
            self._connection, target=CBS_ADDRESS, name=self._cbs_sender_name, options=[AtMostOnce()]
        )
        receiver = self._container.create_receiver(
            self._connection, source=CBS_ADDRESS, target=self._cbs_reply, name=self._cbs_receiver_name
        )
        receiver.flow(CREDIT)
        return True

    def _connect_deadline(self, generation: int) -> None:
        """A peer that accepts TCP but never opens AMQP must not hold requests forever."""
        if generation == self._generation and self._connection is not None and not self._opened:
            elapsed = time.monotonic() - self._connect_started
            self._connection_failed(reach.open_timeout(self._where, elapsed))

    @property
    def _where(self) -> str:
        return reach.host_port(self._transport.host, self._transport.port)

    def _connection_failed(self, failure: ConnectFailed) -> None:
        """The connection could not be made. Before any connection of this client ever opened, that
        is the answer for every request to come; after, it is a dropped connection, retried."""
        if self._ever_opened:
            self._drop(ConnectionLostError(f"reconnecting to {self._transport.url} failed: {failure}"))
            return
        self._fatal = failure
        log.debug("cannot connect: %s", failure)
        self._drop(failure)

    def _current(self, connection: proton.Connection | None) -> bool:
        """proton re-wraps objects per event, so identity is tracked with an attached attribute."""
        generation = getattr(connection, "_sbrules_generation", None) if connection is not None else None
        return self._connection is not None and generation == self._generation

    def _link_name(self, role: str) -> str:
        return f"{self._container.container_id}-{role}-{next(self._names)}"

    def _put_token(self, entity: _Entity) -> None:
        audience = self._conn.audience(entity.address)
        try:
            token = self._tokens.get_token(audience)
        except ManagementError as exc:  # the provider's own: expired signature, no Entra ID token
            self._fail_entity(entity, exc)
            return
        except Exception as exc:  # a credential failure must reach the caller
            log.debug("could not get a token for %s", entity.address, exc_info=True)
            self._fail_entity(entity, AuthenticationError(
                f"could not get a token for {entity.name}: {type(exc).__name__} (run with -v for the details)"
            ))
            return
        entity.token_type = token.token_type
        message_id = next_message_id()
        msg = sections.encode_management_message(
            message_id=message_id,
            reply_to=self._cbs_reply,
            body=token.value,
            application_properties={
                "operation": "put-token",
                "type": token.token_type,
                "name": audience,
                "expiration": proton.timestamp(int(token.expires_at * 1000)),
            },
        )
        self._cbs_waiting[message_id] = entity.address
        entity.token_expires_at = token.expires_at
        assert self._cbs_sender is not None
        self._enqueue(self._cbs_sender, self._cbs_sender_name, msg)

    def _send(self, entity: _Entity, request: Request) -> None:
        assert entity.sender is not None and entity.sender_name is not None
        if entity.sends:
            self._enqueue(entity.sender, entity.sender_name, request.body, request.message_id)
            return
        msg = sections.encode_management_message(
            message_id=request.message_id, reply_to=entity.reply_to, body=request.body,
            application_properties={
                "operation": request.operation, "com.microsoft:server-timeout": uint(int(request.timeout * 1000)),
            },
        )
        self._enqueue(entity.sender, entity.sender_name, msg)

    def _enqueue(self, sender: proton.Sender, name: str, msg: bytes, awaited: str | None = None) -> None:
        """Send when the link has credit (a pre-settled delivery sent without credit is lost).
        ``awaited``: the message-id of the request the delivery's settlement answers (SEND)."""
        self._outbox.setdefault(name, deque()).append((msg, awaited))
        self._flush(sender, name)

    def _flush(self, sender: proton.Sender, name: str) -> None:
        outbox = self._outbox.get(name)
        while outbox and sender.credit > 0:
            msg, awaited = outbox.popleft()
            delivery = sender.delivery(sender.delivery_tag())
            sender.send(msg)
            sender.advance()
            if awaited is None:
                delivery.settle()  # management and $cbs links are pre-settled (at most once), as the SDKs send
            else:
                delivery._sbrules_request = awaited

    def _attach(self, entity: _Entity) -> None:
        if entity.sends:
            entity.sender_name = self._link_name(f"{entity.name}-sender")
            entity.sender = self._container.create_sender(
                self._connection, target=entity.address, name=entity.sender_name, options=[AtLeastOnce()],
            )
            self._link_entities[entity.sender_name] = entity
            self._ready(entity)
            return
        options = [_Attributes(self._link_timeout_ms)]
        entity.sender_name = self._link_name(f"{entity.name}-mgmt-sender")
        entity.receiver_name = self._link_name(f"{entity.name}-mgmt-receiver")
        entity.sender = self._container.create_sender(
            self._connection, target=entity.address, name=entity.sender_name, options=[AtMostOnce(), *options],
        )
        entity.receiver = self._container.create_receiver(
            self._connection, source=entity.address, target=entity.reply_to, name=entity.receiver_name,
            options=options,
        )
        entity.receiver.flow(CREDIT)
        self._link_entities[entity.sender_name] = self._link_entities[entity.receiver_name] = entity
        self._ready(entity)

    def _ready(self, entity: _Entity) -> None:
        """The entity's links are attached: send what waited for them."""
        entity.state = _EntityState.READY
        while entity.backlog:
            request = entity.backlog.popleft()
            with self._lock:
                live = request.message_id in self._pending
            if live:
                self._send(entity, request)

    def _schedule_refresh(self, entity: _Entity) -> None:
        lifetime = entity.token_expires_at - time.time()
        if lifetime <= 0:
            return  # a given signature that has run out: nothing fresher to put
        delay = max(1.0, lifetime - min(self._refresh_margin, lifetime / 3))
        self._container.schedule(delay, _Callback(self.refresh, entity, self._generation))

    def refresh(self, entity: _Entity, generation: int) -> None:
        """Timer callback (loop thread): re-put the entity's token if its links still exist."""
        if generation == self._generation and self._entities.get(entity.address) is entity:
            log.debug("refreshing token for %s", entity.address)
            self._put_token(entity)

    def _fail_entity(self, entity: _Entity, error: ManagementError) -> None:
        """Forget ``entity`` (next request re-authorises) and fail its queued and in-flight requests."""
        if self._entities.get(entity.address) is entity:
            del self._entities[entity.address]
        for name in (entity.sender_name, entity.receiver_name):
            if name is not None:  # None until the entity's links were opened
                self._link_entities.pop(name, None)
        for link in (entity.sender, entity.receiver):
            if link is not None and link.state & proton.Endpoint.LOCAL_ACTIVE:
                link.close()
        entity.backlog.clear()
        if entity.sender_name is not None:
            self._outbox.pop(entity.sender_name, None)
        self._fail_all(lambda: error_copy(error), entity=entity.name)

    def _drop(self, error: ManagementError) -> None:
        """The connection is gone: fail everything in flight with ``error``; the next request reconnects."""
        connection, self._connection = self._connection, None
        tunnel, self._tunnel = self._tunnel, None
        self._generation += 1
        self._entities.clear()
        self._link_entities.clear()
        self._cbs_waiting.clear()
        self._outbox.clear()
        if connection is not None and connection.state & proton.Endpoint.LOCAL_ACTIVE:
            connection.close()
        if tunnel is not None:
            tunnel.close()
        log.info("AMQP connection ended: %s", error)
        self._fail_all(lambda: error_copy(error))

    def _lost(self, reason: str) -> None:
        """An open connection dropped: every request in flight may be retried on a new one."""
        self._drop(ConnectionLostError(f"connection to {self._transport.url} lost: {reason}"))

    def _ended(self, condition: Condition | None, default: str) -> None:
        """The transport ended: a dropped connection if it had opened, else a classified failure."""
        if self._opened:
            self._lost(_condition_text(condition) if condition is not None else default)
            return
        if self._tunnel is not None and self._tunnel.failure is not None:  # the WebSocket connection never opened
            self._connection_failed(self._tunnel.failure)
            return
        name = str(condition.name) if condition is not None else None
        description = condition.description if condition is not None else None
        self._connection_failed(reach.from_transport_condition(name, description, self._where, tls=self._transport.tls))

    # -- proton events --------------------------------------------------------------------------
    @guarded
    def on_connection_bound(self, event: proton.Event) -> None:
        tunnel = self._tunnel
        if tunnel is not None and self._current(event.connection):
            attach_socket(self._container, event.transport, tunnel.proton_socket)

    @guarded
    def on_connection_remote_open(self, event: proton.Event) -> None:
        if self._current(event.connection):
            self._opened = self._ever_opened = True

    @guarded
    def on_delivery(self, event: proton.Event) -> None:
        """A sent message's settlement (receiver deliveries never get here: ``ResponseCollector``)."""
        delivery = event.delivery
        awaited = getattr(delivery, "_sbrules_request", None)
        if awaited is None or not delivery.updated:
            return
        state, condition = delivery.remote_state, delivery.remote.condition
        delivery.settle()
        with self._lock:
            request = self._pending.pop(awaited, None)
        if request is None:
            return
        if state == proton.Delivery.ACCEPTED:
            request.finish(Response(200, None, None, None, {}))
        elif state == proton.Delivery.REJECTED:
            name = str(condition.name) if condition is not None else "amqp:internal-error"
            description = condition.description if condition is not None else "the service rejected the message"
            request.finish(error=error_for(None, name, description, request.context or f"send to {request.entity}"))
        else:  # released or modified: the service did not take it, another try may
            request.finish(error=ConnectionLostError(f"send to {request.entity}: the service did not take the message ({state})"))

    @guarded
    def on_link_flow(self, event: proton.Event) -> None:
        link = event.link
        if link.is_sender:
            self._flush(link, link.name)

    @guarded
    def _on_payload(self, receiver: str, payload: bytes) -> None:
        """A complete response on one of our receiver links (from ``ResponseCollector``)."""
        try:
            message = sections.decode_management_message(payload)
        except DecodeError as exc:
            log.warning("dropping an undecodable response on %s: %s", receiver, exc)
            return
        self._on_response(receiver, message)

    def _on_response(self, receiver: str, message: sections.ManagementMessage) -> None:
        if receiver == self._cbs_receiver_name:
            self._on_cbs_response(message)
            return
        entity = self._link_entities.get(receiver)
        if entity is not None:
            entity.proven = True
        key = str(message.correlation_id)
        with self._lock:
            request = self._pending.pop(key, None)
        if request is None:
            log.debug("dropping a response nobody waits for (correlation-id %s)", key)
            return
        status, description, condition = response_status(message.properties)
        request.finish(Response(status, description, condition, message.body, message.properties))

    def _on_cbs_response(self, message: sections.ManagementMessage) -> None:
        address = self._cbs_waiting.pop(str(message.correlation_id), None)
        entity = self._entities.get(address) if address else None
        if entity is None:
            return
        status, description, condition = response_status(message.properties)
        if status in (200, 202):
            if entity.state is _EntityState.AUTH:
                self._attach(entity)
            self._schedule_refresh(entity)
            return
        error = error_for(status, condition, description, f"CBS put-token for {entity.name}")
        if isinstance(error, UnauthorizedError) or status in (400, 403, 404):
            rights = "Send" if entity.sends else "Listen at least"
            hint = (
                "check that the identity has an Azure Service Bus Data role on the namespace"
                if entity.token_type == JWT_TOKEN_TYPE
                else f"check SharedAccessKeyName, SharedAccessKey and the key's rights ({rights})"
            )
            error = AuthenticationError(
                f"the service refused the token for {entity.name}: {description or 'no reason given'} "
                f"({', '.join(str(x) for x in (status, condition) if x is not None)}); {hint}",
                status=status, condition=condition, description=description,
            )
        log.debug("token refused for %s: status %s", entity.address, status)
        self._fail_entity(entity, error)

    @guarded
    def on_link_remote_close(self, event: proton.Event) -> None:
        link = event.link
        if link.state & proton.Endpoint.LOCAL_ACTIVE:
            link.close()
        condition: Condition | None = link.remote_condition
        if link.name in (self._cbs_sender_name, self._cbs_receiver_name):
            self._lost(f"$cbs link closed: {_condition_text(condition)}")
            return
        entity = self._link_entities.get(link.name)
        if entity is None:
            return
        name = str(condition.name) if condition else "amqp:internal-error"
        description = condition.description if condition else "the service closed the management link"
        context = f"{'sender' if entity.sends else 'management'} link for {entity.name}"
        error: ManagementError
        if entity.proven and name in _RECOVERABLE_DETACH:
            # A link that worked was detached (token expired, service rebalancing): the next
            # attempt re-authorises and re-attaches; a refused attach surfaces as it is.
            error = ConnectionLostError(f"{context} closed by the service: {name}: {description}")
        else:
            error = error_for(None, name, description, context)
        self._fail_entity(entity, error)

    @guarded
    def on_session_remote_close(self, event: proton.Event) -> None:
        if self._current(event.connection) and not self._stopping:
            self._lost(f"session closed: {_condition_text(event.session.remote_condition)}")

    @guarded
    def on_connection_remote_close(self, event: proton.Event) -> None:
        if self._stopping:
            self._stop()
        elif self._current(event.connection):
            self._ended(event.connection.remote_condition, "closed by the service")

    @guarded
    def on_transport_error(self, event: proton.Event) -> None:
        if self._current(event.connection) and not self._stopping:
            self._ended(event.transport.condition, "transport error")

    @guarded
    def on_transport_closed(self, event: proton.Event) -> None:
        if self._stopping:
            self._stop()
            return
        connection = event.connection
        if connection is not None and connection.state & proton.Endpoint.LOCAL_ACTIVE and self._current(connection):
            self._ended(None, "disconnected")


class _Callback:
    """A proton timer task calling ``func(*args)``; an exception is logged, never kills the loop."""

    def __init__(self, func: Callable[..., None], *args: Any) -> None:
        self._func, self._args = func, args

    def on_timer_task(self, event: proton.Event) -> None:
        try:
            self._func(*self._args)
        except Exception:
            log.exception("AMQP timer task %s failed", getattr(self._func, "__name__", self._func))


def _condition_text(condition: Condition | None) -> str:
    if condition is None:
        return "no reason given"
    return f"{condition.name}: {condition.description}" if condition.description else str(condition.name)


def error_copy(error: ManagementError) -> ManagementError:
    """A fresh exception per waiting caller (raising one instance from many threads mixes tracebacks)."""
    return type(error)(str(error), status=error.status, condition=error.condition, description=error.description)

