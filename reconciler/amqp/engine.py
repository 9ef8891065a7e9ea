"""The AMQP transport under the request pipeline: one connection, CBS, link pairs, correlation.

proton is single-threaded: the Container runs in its own thread and only that thread touches
proton objects. Callers hand requests over through a queue and an ``EventInjector`` and are told
of each answer through the request's ``on_done`` callback. Responses are matched by
correlation-id = the request's message-id, so any number of requests may be in flight on one
link pair (pipelining).

The engine routes proton's events to the three parts of a connection's life, each in a module of
its own: ``connector`` (connecting, opening, what an ended connection means), ``cbs`` (a token per
entity on ``$cbs`` before its links attach, re-put before it expires) and ``links`` (per entity a
management link pair, or for ``SEND`` an unsettled sender to the entity itself, and the outbox that
waits for link credit). A ``SEND`` request is answered when the service settles its delivery
(at-least-once: accepted is 200, rejected its error, released or modified a retryable one). A dropped
connection fails every request in flight with ConnectionLostError; the next request reconnects.
On close the loop sends an AMQP close and waits (briefly) for the peer's, so that a normal exit is
not a dropped socket to the service.
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
import threading
import uuid
from typing import Any, Callable

import proton
from proton import Condition, Handler
from proton.reactor import ApplicationEvent

from reconciler.amqp.cbs import Cbs
from reconciler.amqp.connector import Connector, condition_text
from reconciler.amqp.deliveries import ResponseCollector, quiet_events
from reconciler.amqp.links import Entity, EntityState, Links, Outbox, detach_error, finish_send
from reconciler.amqp.reactor import Injector, attach_socket, container
from reconciler.amqp.wire import sections
from reconciler.amqp.wire.types import DecodeError
from reconciler.namespace.connection import ConnectionString, Transport
from reconciler.namespace.credentials import TOKEN_REFRESH_MARGIN, TokenProvider
from reconciler.namespace.errors import (
    ClientClosedError,
    ConnectFailed,
    ConnectionLostError,
    ManagementError,
    response_status,
)
from reconciler.namespace.network import DIRECT, Network
from reconciler.namespace.pipeline import Request, Response

log = logging.getLogger("reconciler.amqp")

#: The operation of a request whose body is an encoded message to send to the entity itself.
SEND = "sbrules:send"
#: On close, how long to wait for the peer to answer our AMQP close before dropping the socket.
CLOSE_GRACE_SECONDS = 2.0


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


class Engine(Handler):
    """The AMQP transport of the request pipeline: owns the proton Container thread and the requests
    in flight; ``submit``, ``forget`` and ``close`` are the only methods other threads call."""

    def __init__(
        self,
        conn: ConnectionString,
        transport: Transport,
        tokens: TokenProvider,
        *,
        network: Network = DIRECT,
        link_timeout: float = 60.0,
        refresh_margin: float = TOKEN_REFRESH_MARGIN,
    ) -> None:
        self._inbox: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self._pending: dict[str, Request] = {}
        self._lock = threading.Lock()
        self._wake_pending = False  # a "sbrules_work" event is queued and will drain the inbox
        self._names = itertools.count(1)
        self._closed = False
        self._stopping = False  # closing: an AMQP close is sent, the peer's answer awaited
        self._stopped = False
        self._injector = Injector()
        self._container = container(self)
        # Set before the loop runs or connects: connections report their events to this collector.
        self._container._collector = ResponseCollector(self._on_payload, quiet_events(self))
        self._container.container_id = f"sbrules-{uuid.uuid4().hex[:12]}"
        self._container.selectable(self._injector)
        #: Half a request's time: leaves the other half for a retry on a fresh connection.
        self._connector = Connector(transport, network, self._container, max(0.5, link_timeout / 2))
        self._outbox = Outbox()
        self._cbs = Cbs(conn, tokens, self._container, self._outbox, self._link_name, refresh_margin)
        self._links = Links(self._container, self._outbox, self._link_name, int(link_timeout * 1000), self._is_pending)
        self._thread = threading.Thread(target=self._run, name="sbrules-amqp", daemon=True)
        self._thread.start()

    # -- called from any thread -------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue ``request``; the loop sends it (connecting and authorising first when needed)."""
        fatal = self._connector.fatal
        if fatal is not None:
            request.finish(error=error_copy(fatal))
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
            self._injector.release()
            self._fail_all(lambda: ClientClosedError("the AMQP event loop stopped"))

    def _is_pending(self, request: Request) -> bool:
        with self._lock:
            return request.message_id in self._pending

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
            if self._is_pending(request):
                self._dispatch(request)

    def _shutdown(self) -> None:
        """Fail what waits, close the connection with an AMQP close, and stop once the peer answered."""
        self._fail_all(lambda: ClientClosedError("the management client is closed"))
        connection = self._connector.connection
        if connection is not None and self._connector.opened and connection.state & proton.Endpoint.LOCAL_ACTIVE:
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
        fatal = self._connector.fatal
        if fatal is not None:
            self._fail_all(lambda: error_copy(fatal))
            return
        if self._connector.connection is None and not self._connect():
            return
        entity, new = self._links.entity(request, sends=request.operation == SEND)
        if new:
            self._put_token(entity)
        self._links.submit(entity, request)

    def _connect(self) -> bool:
        """Start connecting (False when the host name does not even resolve)."""
        connection = self._connector.connect()
        if isinstance(connection, ConnectFailed):
            self._drop(self._connector.failed(connection))
            return False
        generation = self._connector.generation
        self._container.schedule(self._connector.connect_timeout, _Callback(self._connect_deadline, generation))
        self._cbs.open(connection)
        return True

    def _connect_deadline(self, generation: int) -> None:
        failure = self._connector.timed_out(generation)
        if failure is not None:
            self._drop(self._connector.failed(failure))

    def _link_name(self, role: str) -> str:
        return f"{self._container.container_id}-{role}-{next(self._names)}"

    def _put_token(self, entity: Entity) -> None:
        error = self._cbs.put_token(entity)
        if error is not None:
            self._fail_entity(entity, error)

    def _schedule_refresh(self, entity: Entity) -> None:
        delay = self._cbs.refresh_delay(entity)
        if delay is not None:
            self._container.schedule(delay, _Callback(self.refresh, entity, self._connector.generation))

    def refresh(self, entity: Entity, generation: int) -> None:
        """Timer callback (loop thread): re-put the entity's token if its links still exist."""
        if generation == self._connector.generation and self._links.current(entity):
            log.debug("refreshing token for %s", entity.address)
            self._put_token(entity)

    def _fail_entity(self, entity: Entity, error: ManagementError) -> None:
        """Forget ``entity`` (next request re-authorises) and fail its queued and in-flight requests."""
        self._links.forget(entity)
        self._fail_all(lambda: error_copy(error), entity=entity.name)

    def _drop(self, error: ManagementError) -> None:
        """The connection is gone: fail everything in flight with ``error``; the next request reconnects."""
        self._links.clear()
        self._cbs.clear()
        self._outbox.clear()
        self._connector.discard()
        log.info("AMQP connection ended: %s", error)
        self._fail_all(lambda: error_copy(error))

    # -- proton events --------------------------------------------------------------------------
    @guarded
    def on_connection_bound(self, event: proton.Event) -> None:
        tunnel = self._connector.tunnel
        if tunnel is not None and self._connector.current(event.connection):
            attach_socket(self._container, event.transport, tunnel.proton_socket)

    @guarded
    def on_connection_remote_open(self, event: proton.Event) -> None:
        if self._connector.current(event.connection):
            self._connector.on_open()

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
        if request is not None:
            finish_send(request, state, condition)

    @guarded
    def on_link_flow(self, event: proton.Event) -> None:
        link = event.link
        if link.is_sender:
            self._outbox.flush(link, link.name)

    @guarded
    def _on_payload(self, receiver: str, payload: bytes) -> None:
        """A complete response on one of our receiver links (from ``ResponseCollector``)."""
        try:
            message = sections.decode_management_message(payload)
        except DecodeError as exc:
            log.warning("dropping an undecodable response on %s: %s", receiver, exc)
            return
        if receiver == self._cbs.receiver_name:
            self._on_cbs_response(message)
            return
        entity = self._links.on_link(receiver)
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
        entity = self._links.at_address(self._cbs.take(message))
        if entity is None:
            return
        error = self._cbs.verdict(entity, message)
        if error is not None:
            self._fail_entity(entity, error)
            return
        if entity.state is EntityState.AUTH:
            assert self._connector.connection is not None
            self._links.attach(entity, self._connector.connection)
        self._schedule_refresh(entity)

    @guarded
    def on_link_remote_close(self, event: proton.Event) -> None:
        link = event.link
        if link.state & proton.Endpoint.LOCAL_ACTIVE:
            link.close()
        condition: Condition | None = link.remote_condition
        if self._cbs.owns(link.name):
            self._drop(self._connector.lost(f"$cbs link closed: {condition_text(condition)}"))
            return
        entity = self._links.on_link(link.name)
        if entity is not None:
            self._fail_entity(entity, detach_error(entity, condition))

    @guarded
    def on_session_remote_close(self, event: proton.Event) -> None:
        if self._connector.current(event.connection) and not self._stopping:
            self._drop(self._connector.lost(f"session closed: {condition_text(event.session.remote_condition)}"))

    @guarded
    def on_connection_remote_close(self, event: proton.Event) -> None:
        if self._stopping:
            self._stop()
        elif self._connector.current(event.connection):
            self._drop(self._connector.ended(event.connection.remote_condition, "closed by the service"))

    @guarded
    def on_transport_error(self, event: proton.Event) -> None:
        if self._connector.current(event.connection) and not self._stopping:
            self._drop(self._connector.ended(event.transport.condition, "transport error"))

    @guarded
    def on_transport_closed(self, event: proton.Event) -> None:
        if self._stopping:
            self._stop()
            return
        connection = event.connection
        if connection is not None and connection.state & proton.Endpoint.LOCAL_ACTIVE and self._connector.current(connection):
            self._drop(self._connector.ended(None, "disconnected"))


class _Callback:
    """A proton timer task calling ``func(*args)``; an exception is logged, never kills the loop."""

    def __init__(self, func: Callable[..., None], *args: Any) -> None:
        self._func, self._args = func, args

    def on_timer_task(self, event: proton.Event) -> None:
        try:
            self._func(*self._args)
        except Exception:
            log.exception("AMQP timer task %s failed", getattr(self._func, "__name__", self._func))


def error_copy(error: ManagementError) -> ManagementError:
    """A fresh exception per waiting caller (raising one instance from many threads mixes tracebacks)."""
    return type(error)(str(error), status=error.status, condition=error.condition, description=error.description)

