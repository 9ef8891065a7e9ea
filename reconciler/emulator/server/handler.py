"""The AMQP 1.0 server: the proton event handler, with the life of each connection and the attaching
of its links; ``nodes.py`` answers `$cbs` and `$management` requests, ``transfers.py`` moves messages.

Every callback is guarded (``_guarded``): an exception in a proton handler would stop the whole
event loop, so a failure is logged and answered with an error response, a rejected delivery or
a closed connection, and the loop keeps serving other clients. Messages are decoded here (not
by proton's stock handler) so an undecodable transfer becomes a rejected delivery.

Link roles (``links.py``), by the address the client attaches to:
- ``$cbs``: put-token requests in, responses out (``status-code`` / ``status-description``).
- ``<entity>/$management``: management requests in, responses out (camelCase status fields).
- ``<topic>``, ``<queue>``: publishing. ``<queue>``, ``<topic>/Subscriptions/<sub>`` (and their
  ``/$DeadLetterQueue``): receiving, peek-lock or receive-and-delete by the attach's settle
  modes, sessions through the ``com.microsoft:session-filter`` source filter.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import time
from typing import Any, Callable

import proton
from proton import Condition, Link, symbol
from proton.handlers import IncomingMessageHandler, MessagingHandler
from proton.reactor import Container

from reconciler.amqp import reactor
from reconciler.amqp.reactor import attach_socket
from reconciler.amqp.wire import sections
from reconciler.amqp.wire.types import DecodeError
from reconciler.emulator.auth import TokenValidator
from reconciler.emulator.broker import Broker
from reconciler.emulator.faults import Faults
from reconciler.emulator.frontdoor import server_transport
from reconciler.emulator.management import ManagementNode
from reconciler.emulator.namespace import (
    Address,
    Namespace,
    OperationError,
    Queue,
    Topic,
    parse_address,
)
from reconciler.emulator.server.links import (
    CBS_NODE,
    CbsRequests,
    ConnectionState,
    LinkRole,
    ManagementRequests,
    Publish,
    Receive,
    Refused,
    Responses,
    close_connection,
)
from reconciler.emulator.server.nodes import RequestNodes
from reconciler.emulator.server.transfers import Transfers, accept, reject
from reconciler.emulator.throttling import CreditMeter
from reconciler.names import name_key

log = logging.getLogger("reconciler.emulator")

SESSION_FILTER = symbol("com.microsoft:session-filter")
LOCKED_UNTIL = symbol("com.microsoft:locked-until-utc")
DATETIMEOFFSET_EPOCH = 621355968000000000  # .NET ticks at the Unix epoch
#: Credit granted to client senders, replenished as transfers arrive.
INCOMING_WINDOW = 500
MAX_MESSAGE_SIZE = 1024 * 1024
TICK_SECONDS = 0.05


def _guarded(func: Callable[..., Any]) -> Callable[..., Any]:
    """Never let an exception leave a proton callback (it would stop the event loop)."""

    @functools.wraps(func)
    def wrapper(self: "ServerHandler", event: proton.Event, *args: Any) -> Any:
        try:
            return func(self, event, *args)
        except UnicodeDecodeError:
            _refuse_undecodable(event)
        except Exception:  # the loop must survive anything a client can cause
            log.exception("emulator: error in %s", func.__name__)
            self.failed()
            close_connection(getattr(event, "connection", None), "amqp:internal-error", "internal emulator error")
        return None

    return wrapper


class LoopGuard:
    """Stands between proton's loop and a handler tree, so that no event can stop the loop.

    ``_guarded`` covers the methods written here; this covers the rest of the tree (the methods
    ``MessagingHandler`` and its children bring, proton's own I/O handler), which read what a client
    sent (names, conditions) without expecting it to be malformed. A failure is counted in
    ``errors``, logged, and ends the connection the event belongs to, as ``_guarded`` does.
    """

    def __init__(self, inner: Any, on_error: Callable[[], None]) -> None:
        self._inner = inner
        self._on_error = on_error

    def __getattr__(self, method: str) -> Callable[[proton.Event], None]:
        if not method.startswith("on_") or method == "on_unhandled":
            raise AttributeError(method)

        def dispatch(event: proton.Event) -> None:
            try:
                event.dispatch(self._inner)
            except UnicodeDecodeError:
                _refuse_undecodable(event)
            except Exception:  # the loop must survive anything a client can cause
                log.exception("emulator: error while handling %s", method)
                self._on_error()
                close_connection(_event_connection(event), "amqp:internal-error", "internal emulator error")

        setattr(self, method, dispatch)  # made once per event type
        return dispatch


def serving_container(handler: "ServerHandler") -> Container:
    """The proton loop ``handler`` serves on: the handler tree and proton's own I/O handler, each behind
    a ``LoopGuard`` reporting to ``handler.failed``."""
    loop = reactor.container(LoopGuard(handler, handler.failed))
    loop.global_handler = LoopGuard(loop.global_handler, handler.failed)
    loop.container_id = "sbrules-emulator"
    return loop


def _refuse_undecodable(event: proton.Event) -> None:
    """proton passes a client's strings and symbols on undecoded, so the first read of one that is
    not UTF-8 fails: that is the client's malformed frame, answered as AMQP answers one (decode-error)."""
    log.info("emulator: closing a connection that sent a string that is not UTF-8")
    close_connection(_event_connection(event), "amqp:decode-error", "a string or symbol the client sent is not valid UTF-8")


def _event_connection(event: proton.Event) -> proton.Connection | None:
    try:
        return event.connection
    except Exception:  # an event of no connection, or one proton cannot wrap
        return None


def _condition_text(transport: proton.Transport) -> str:
    """A transport's error condition for the log, when it may quote undecodable client bytes."""
    try:
        condition = transport.condition
    except UnicodeDecodeError:
        return "an error whose description is not UTF-8 (it quotes what the client sent)"
    if condition is None:
        return "unspecified transport error"
    return f"{condition.name}: {condition.description}"


def _filter_map(terminus: proton.Terminus) -> dict[Any, Any]:
    data = terminus.filter
    data.rewind()
    if not data.next():
        return {}
    value = data.get_object()
    return value if isinstance(value, dict) else {}


def _unwrap(value: Any) -> Any:
    return value.value if isinstance(value, proton.Described) else value


def _ticks(moment: _dt.datetime) -> int:
    return DATETIMEOFFSET_EPOCH + int(moment.timestamp() * 10_000_000)


class _Timer:
    """A proton timer handler calling back into the guarded server handler."""

    def __init__(self, callback: Callable[[proton.Event], None]) -> None:
        self.callback = callback

    def on_timer_task(self, event: proton.Event) -> None:
        self.callback(event)


class ServerHandler(MessagingHandler):
    """The emulator's proton handler (one per emulator, shared by all connections)."""

    def __init__(
        self,
        namespace: Namespace,
        broker: Broker,
        validator: TokenValidator,
        faults: Faults,
        cbs_deadline: float = 20.0,
        token_clock: Callable[[], float] = time.time,
        meter: CreditMeter | None = None,
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        # Incoming transfers are decoded by on_delivery below, inside the guard.
        self.handlers: list[Any] = [h for h in self.handlers if not isinstance(h, IncomingMessageHandler)]
        self.namespace = namespace
        self.broker = broker
        self.faults = faults
        #: The namespace's credits (Standard throttling), charged for every client's work.
        self.meter = meter or CreditMeter(faults)
        self.cbs_deadline = cbs_deadline
        self.token_clock = token_clock
        self.container: proton.reactor.Container | None = None
        self.connections: dict[proton.Connection, ConnectionState] = {}
        #: the role of every link attached and not yet closed
        self.links: dict[proton.Link, LinkRole] = {}
        self.nodes = RequestNodes(
            ManagementNode(namespace, broker, faults), validator, faults, self.meter, self._later, token_clock
        )
        self.transfers = Transfers(broker, self.meter, faults, self.links)
        #: Callbacks that failed inside the guard (tests assert this stays 0).
        self.errors = 0
        self._stopping = False
        #: Transports the listener handed over; ``on_amqp_closed`` is called as each closes (it counts them).
        self._adopted: set[proton.Transport] = set()
        self.on_amqp_closed: Callable[[], None] = lambda: None

    @property
    def requests(self) -> int:
        """Management requests received (answered or refused), for tests that count retries."""
        return self.nodes.requests

    def failed(self) -> None:
        """Count a callback that failed inside a guard (``LoopGuard`` reports here too)."""
        self.errors += 1

    # -- loop lifecycle -------------------------------------------------------------------------
    @_guarded
    def on_reactor_init(self, event: proton.Event) -> None:
        self.container = event.container
        event.container.schedule(TICK_SECONDS, _Timer(self._tick))

    @_guarded
    def on_emulator_adopt(self, event: proton.Event) -> None:
        """An AMQP connection the emulator's listener accepted (see frontdoor.py)."""
        sock, address = event.subject
        if self._stopping or self.container is None:
            sock.close()
            self.on_amqp_closed()
            return
        try:
            transport = server_transport(self.container, address)
            attach_socket(self.container, transport, sock)
        except Exception:
            sock.close()
            self.on_amqp_closed()
            raise
        self._adopted.add(transport)

    @_guarded
    def on_emulator_run(self, event: proton.Event) -> None:
        """Calls another thread made for the loop (responses released by a save, ``durability.py``)."""
        for call in event.subject:
            call()

    @_guarded
    def on_emulator_stop(self, event: proton.Event) -> None:
        self._stopping = True
        for connection in list(self.connections):
            close_connection(connection, "amqp:connection:forced", "the emulator is shutting down")
        if self.container is not None:
            self.container.stop()

    @_guarded
    def _tick(self, event: proton.Event) -> None:
        if self._stopping:
            return
        event.container.schedule(TICK_SECONDS, _Timer(self._tick))
        self.broker.tick()
        self.transfers.pump_all()

    def _later(self, delay: float, func: Callable[[], None]) -> None:
        """Run ``func`` on the loop after ``delay`` seconds, guarded as every callback is (now, before the loop runs)."""
        if self.container is None:
            func()
            return
        self.container.schedule(delay, _Timer(functools.partial(self._run_later, func)))

    @_guarded
    def _run_later(self, func: Callable[[], None], event: proton.Event) -> None:
        func()

    # -- connections ----------------------------------------------------------------------------
    @_guarded
    def on_connection_bound(self, event: proton.Event) -> None:
        transport = event.transport
        transport.require_auth(False)
        sasl = transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        transport.idle_timeout = 120.0

    @_guarded
    def on_connection_opening(self, event: proton.Event) -> None:
        connection = event.connection
        self.connections[connection] = ConnectionState(self.token_clock)
        event.container.schedule(self.cbs_deadline, _Timer(functools.partial(self._cbs_deadline, connection)))

    @_guarded
    def _cbs_deadline(self, connection: proton.Connection, event: proton.Event) -> None:
        state = self.connections.get(connection)
        if state is not None and not state.grants:
            close_connection(connection, "amqp:unauthorized-access", "no valid token was put on $cbs in time")

    @_guarded
    def on_connection_closing(self, event: proton.Event) -> None:
        self._forget(event.connection)

    @_guarded
    def on_connection_closed(self, event: proton.Event) -> None:
        self._forget(event.connection)

    @_guarded
    def on_transport_error(self, event: proton.Event) -> None:
        """proton has already closed the transport with its condition (a client's malformed frames, most often)."""
        log.info("emulator: connection closed on a transport error: %s", _condition_text(event.transport))

    @_guarded
    def on_transport_closed(self, event: proton.Event) -> None:
        if event.transport in self._adopted:
            self._adopted.discard(event.transport)
            self.on_amqp_closed()
        if event.connection is not None:
            self._forget(event.connection)

    def _forget(self, connection: proton.Connection) -> None:
        state = self.connections.pop(connection, None)
        if state is None:
            return
        for link in [lk for lk, role in self.links.items() if role.state is state]:
            self.transfers.release(link)

    # -- links ------------------------------------------------------------------------------------
    @_guarded
    def on_link_opening(self, event: proton.Event) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        state = self.connections.get(link.connection)
        if state is None:  # AMQP 2.4.1: open comes first; a link without it would be held forever
            close_connection(link.connection, "amqp:illegal-state", "a link was attached on a connection that is not open")
            return
        try:
            role = self._open_incoming(link, state) if link.is_receiver else self._open_outgoing(link, state)
        except OperationError as exc:
            # A refused link is attached with a null terminus, then detached with the error (AMQP 2.6.3).
            role = Refused(state, exc.condition, exc.description)
            if link.is_sender:
                link.source.type = proton.Terminus.UNSPECIFIED
            else:
                link.target.type = proton.Terminus.UNSPECIFIED
        self.links[link] = role

    @staticmethod
    def _require_token(state: ConnectionState, address: Address) -> None:
        if not state.authorized(address.node):
            raise OperationError(401, "amqp:unauthorized-access", f"no valid token covers '{address.node}'")

    def _open_incoming(self, link: proton.Link, state: ConnectionState) -> LinkRole:
        target = link.remote_target.address or ""
        link.max_message_size = MAX_MESSAGE_SIZE
        if target == CBS_NODE:
            return CbsRequests(state)
        address = parse_address(target)
        self._require_token(state, address)
        if address.management:
            self.namespace.entity(address)
            return ManagementRequests(state, address)
        entity = self.namespace.entity(address)
        if not isinstance(entity, (Topic, Queue)) or address.dead_letter:
            raise OperationError(400, "amqp:not-allowed", f"cannot send to '{address.node}'")
        return Publish(state, address)

    def _open_outgoing(self, link: proton.Link, state: ConnectionState) -> LinkRole:
        source = link.remote_source.address or ""
        if source == CBS_NODE:
            state.response_links.setdefault(name_key(CBS_NODE), []).append(link)
            return Responses(state, CBS_NODE)
        address = parse_address(source)
        self._require_token(state, address)
        if address.management:
            self.namespace.entity(address)
            state.response_links.setdefault(name_key(address.node), []).append(link)
            return Responses(state, address.node)
        store = self.namespace.store(address)
        role = Receive(state, address, store, peek_lock=link.remote_snd_settle_mode != Link.SND_SETTLED)
        filters = _filter_map(link.remote_source)
        if SESSION_FILTER in filters:
            requested = _unwrap(filters[SESSION_FILTER])
            accepted = self.broker.accept_session(store, None if requested is None else str(requested), link)
            if accepted is None:
                raise OperationError(408, "com.microsoft:timeout", "no session is available to accept")
            role.session_id, until = accepted
            link.source.filter.clear()
            link.source.filter.put_object({SESSION_FILTER: role.session_id})
            link.properties = {LOCKED_UNTIL: _ticks(until)}
        return role

    @_guarded
    def on_link_opened(self, event: proton.Event) -> None:
        link = event.link
        role = self.links.get(link)
        if isinstance(role, Refused):
            link.condition = Condition(role.condition, role.description)
            link.close()
            return
        if link.is_receiver:
            link.flow(INCOMING_WINDOW)
        elif isinstance(role, Receive):
            self.transfers.message_links.add(link)
            self.transfers.pump(link)

    @_guarded
    def on_link_closing(self, event: proton.Event) -> None:
        self.transfers.release(event.link)

    @_guarded
    def on_link_closed(self, event: proton.Event) -> None:
        self.transfers.release(event.link)

    # -- messages -----------------------------------------------------------------------------------
    @_guarded
    def on_sendable(self, event: proton.Event) -> None:
        if isinstance(self.links.get(event.link), Receive):
            self.transfers.pump(event.link)

    @_guarded
    def on_accepted(self, event: proton.Event) -> None:
        self.transfers.accepted(event.delivery)

    @_guarded
    def on_rejected(self, event: proton.Event) -> None:
        self.transfers.rejected(event.delivery)

    @_guarded
    def on_released(self, event: proton.Event) -> None:
        self.transfers.released(event.delivery)

    @_guarded
    def on_settled(self, event: proton.Event) -> None:
        self.transfers.settled(event.delivery)

    # -- incoming transfers -------------------------------------------------------------------------
    @_guarded
    def on_delivery(self, event: proton.Event) -> None:
        delivery = event.delivery
        link = delivery.link
        if not link.is_receiver or not delivery.readable or delivery.partial:
            return
        payload = bytes(link.recv(delivery.pending) or b"")
        link.advance()
        if link.credit < INCOMING_WINDOW // 2:
            link.flow(INCOMING_WINDOW - link.credit)
        role = self.links.get(link)
        if role is None:
            reject(delivery, "amqp:not-allowed", "this link does not accept messages")
            return
        if len(payload) > MAX_MESSAGE_SIZE:
            reject(
                delivery, "amqp:link:message-size-exceeded",
                f"message of {len(payload)} bytes exceeds the {MAX_MESSAGE_SIZE} byte limit",
            )
        elif isinstance(role, (CbsRequests, ManagementRequests)):
            try:
                message = sections.decode_management_message(payload)
            except DecodeError as exc:
                reject(delivery, "amqp:decode-error", f"undecodable message: {exc}")
                return
            accept(delivery)
            if isinstance(role, CbsRequests):
                self.nodes.put_token(role, message)
            else:
                self.nodes.management_request(link, role, message)
        elif isinstance(role, Publish):
            self.transfers.publish(delivery, role, payload)
        else:
            reject(delivery, "amqp:not-allowed", "this link does not accept messages")
        self.transfers.count_operation(link, role.state)
