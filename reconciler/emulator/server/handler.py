"""The AMQP 1.0 server: proton event handler for `$cbs`, `$management` nodes, senders and receivers.

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
import itertools
import logging
import time
import uuid
from typing import Any, Callable

import proton
from proton import Condition, Delivery, Endpoint, Link, symbol
from proton.handlers import IncomingMessageHandler, MessagingHandler

from reconciler.amqp.wire import sections
from reconciler.amqp.wire.sections import ManagementMessage
from reconciler.amqp.wire.types import DecodeError
from reconciler.emulator.auth import TokenRejected, TokenValidator
from reconciler.emulator.broker import Broker
from reconciler.emulator.faults import Faults
from reconciler.emulator.frontdoor import adopt_amqp
from reconciler.emulator.management import ManagementNode, Response
from reconciler.emulator.namespace import (
    Address,
    MessageStore,
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
)
from reconciler.emulator.throttling import CreditMeter
from reconciler.names import name_key
from reconciler.namespace.credits import THROTTLED_CONDITION, messages_touched

log = logging.getLogger("reconciler.emulator")

SESSION_FILTER = symbol("com.microsoft:session-filter")
TRACKING_ID = symbol("com.microsoft:tracking-id")
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
            _close_connection(getattr(event, "connection", None), "amqp:internal-error", "internal emulator error")
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
                _close_connection(_event_connection(event), "amqp:internal-error", "internal emulator error")

        setattr(self, method, dispatch)  # made once per event type
        return dispatch


def _refuse_undecodable(event: proton.Event) -> None:
    """proton passes a client's strings and symbols on undecoded, so the first read of one that is
    not UTF-8 fails: that is the client's malformed frame, answered as AMQP answers one (decode-error)."""
    log.info("emulator: closing a connection that sent a string that is not UTF-8")
    _close_connection(_event_connection(event), "amqp:decode-error", "a string or symbol the client sent is not valid UTF-8")


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


def _close_connection(connection: proton.Connection | None, condition: str, description: str) -> None:
    try:
        if connection is not None and not connection.state & Endpoint.LOCAL_CLOSED:
            connection.condition = Condition(condition, description)
            connection.close()
    except Exception:  # best effort while already handling a failure
        log.exception("emulator: could not close connection")


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
        self.management = ManagementNode(namespace, broker, faults)
        self.validator = validator
        self.faults = faults
        #: The namespace's credits (Standard throttling), charged for every client's work.
        self.meter = meter or CreditMeter(faults)
        self.cbs_deadline = cbs_deadline
        self.token_clock = token_clock
        self.container: proton.reactor.Container | None = None
        self.connections: dict[proton.Connection, ConnectionState] = {}
        #: the role of every link attached and not yet closed
        self.links: dict[proton.Link, LinkRole] = {}
        #: receivers that messages may be pumped to
        self.message_links: set[proton.Link] = set()
        #: Callbacks that failed inside the guard (tests assert this stays 0).
        self.errors = 0
        #: Management requests received (answered or refused), for tests that count retries.
        self.requests = 0
        self._stopping = False
        #: Delivery tags of responses (settled at once, so they only need to differ from each other).
        self._reply_tags = map(b"%x".__mod__, itertools.count())

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
            return
        try:
            adopt_amqp(self.container, sock, address)
        except Exception:
            sock.close()
            raise

    @_guarded
    def on_emulator_stop(self, event: proton.Event) -> None:
        self._stopping = True
        for connection in list(self.connections):
            _close_connection(connection, "amqp:connection:forced", "the emulator is shutting down")
        if self.container is not None:
            self.container.stop()

    @_guarded
    def _tick(self, event: proton.Event) -> None:
        if self._stopping:
            return
        event.container.schedule(TICK_SECONDS, _Timer(self._tick))
        self.broker.tick()
        self.pump_all()

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
            _close_connection(connection, "amqp:unauthorized-access", "no valid token was put on $cbs in time")

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
        if event.connection is not None:
            self._forget(event.connection)

    def _forget(self, connection: proton.Connection) -> None:
        state = self.connections.pop(connection, None)
        if state is None:
            return
        for link in [lk for lk, role in self.links.items() if role.state is state]:
            self._release_link(link)

    # -- links ------------------------------------------------------------------------------------
    @_guarded
    def on_link_opening(self, event: proton.Event) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        state = self.connections.get(link.connection) or ConnectionState(self.token_clock)
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
            self.message_links.add(link)
            self.pump(link)

    @_guarded
    def on_link_closing(self, event: proton.Event) -> None:
        self._release_link(event.link)

    @_guarded
    def on_link_closed(self, event: proton.Event) -> None:
        self._release_link(event.link)

    def _release_link(self, link: proton.Link) -> None:
        self.message_links.discard(link)
        role = self.links.pop(link, None)
        if isinstance(role, Receive) and role.session_id is not None:
            self.broker.release_session(role.store, role.session_id, link)

    # -- outgoing messages ------------------------------------------------------------------------
    @_guarded
    def on_sendable(self, event: proton.Event) -> None:
        if isinstance(self.links.get(event.link), Receive):
            self.pump(event.link)

    def pump_all(self) -> None:
        for link in list(self.message_links):
            self.pump(link)

    def pump(self, link: proton.Link) -> None:
        """Send stored messages while the receiver has credit."""
        role = self.links.get(link)
        if not isinstance(role, Receive):
            return
        if not (link.state & Endpoint.LOCAL_ACTIVE and link.state & Endpoint.REMOTE_ACTIVE):
            return
        if not role.state.authorized(role.address.node):
            # The service detaches links whose token expired without being renewed.
            link.condition = Condition("amqp:unauthorized-access", f"the token for '{role.address.node}' expired")
            link.close()
            self._release_link(link)
            return
        session_id = role.session_id
        meter = self.meter
        while link.credit > 0 and meter.available():  # a throttled receiver waits for the next second
            taken = self.broker.receive(
                role.store, peek_lock=role.peek_lock, session_id=session_id, sessionful=session_id is not None
            )
            if taken is None:
                break
            stored, payload = taken
            tag = stored.lock_token.bytes_le if stored.lock_token is not None else uuid.uuid4().bytes
            delivery = link.delivery(tag)
            link.send(payload)
            link.advance()
            if stored.lock_token is None:
                delivery.settle()
            else:
                role.locks[delivery] = stored.lock_token
            meter.charge(meter.costs.message)
            self._count_operation(link, role.state)
        if link.drain_mode and link.credit > 0:
            link.drained()

    @_guarded
    def on_accepted(self, event: proton.Event) -> None:
        self._settle(event.delivery, lambda store, token: self.broker.complete(store, token))

    @_guarded
    def on_rejected(self, event: proton.Event) -> None:
        info = {}
        condition = event.delivery.remote.condition
        if condition is not None and isinstance(condition.info, dict):
            info = condition.info
        reason = info.get("DeadLetterReason")
        description = info.get("DeadLetterErrorDescription")
        self._settle(
            event.delivery,
            lambda store, token: self.broker.dead_letter(
                store, token, None if reason is None else str(reason), None if description is None else str(description)
            ),
        )

    @_guarded
    def on_released(self, event: proton.Event) -> None:
        delivery = event.delivery
        remote = delivery.remote
        properties = dict(remote.annotations or {}) if delivery.remote_state == Delivery.MODIFIED else {}
        properties = {str(k): v for k, v in properties.items()}
        if delivery.remote_state == Delivery.MODIFIED and remote.undeliverable:
            self._settle(delivery, lambda store, token: self.broker.defer(store, token, properties))
        else:
            self._settle(delivery, lambda store, token: self.broker.abandon(store, token, properties))

    @_guarded
    def on_settled(self, event: proton.Event) -> None:
        delivery = event.delivery
        if self._take_lock(delivery) is not None:
            delivery.settle()

    def _take_lock(self, delivery: proton.Delivery) -> tuple[Receive, uuid.UUID] | None:
        """The receiver role and lock token of a delivery not settled yet, forgotten from now on."""
        role = self.links.get(delivery.link)
        if not isinstance(role, Receive):
            return None
        token = role.locks.pop(delivery, None)
        return None if token is None else (role, token)

    def _settle(self, delivery: proton.Delivery, action: Callable[[MessageStore, uuid.UUID], None]) -> None:
        lock = self._take_lock(delivery)
        if lock is None:
            return
        link = delivery.link
        role, token = lock
        try:
            action(role.store, token)
        except OperationError as exc:
            delivery.local.condition = Condition(exc.condition, exc.description)
            delivery.update(Delivery.REJECTED)
        else:
            # Echo the outcome in the settling disposition: peek-lock receivers wait for it.
            delivery.update(delivery.remote_state)
        delivery.settle()
        self.pump(link)

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
            self._reject(delivery, "amqp:not-allowed", "this link does not accept messages")
            return
        if len(payload) > MAX_MESSAGE_SIZE:
            self._reject(
                delivery, "amqp:link:message-size-exceeded",
                f"message of {len(payload)} bytes exceeds the {MAX_MESSAGE_SIZE} byte limit",
            )
        elif isinstance(role, (CbsRequests, ManagementRequests)):
            try:
                message = sections.decode_management_message(payload)
            except DecodeError as exc:
                self._reject(delivery, "amqp:decode-error", f"undecodable message: {exc}")
                return
            self._accept(delivery)
            if isinstance(role, CbsRequests):
                self._put_token(link, role, message)
            else:
                self._management_request(link, role, message)
        elif isinstance(role, Publish):
            self._publish(delivery, role, payload)
        else:
            self._reject(delivery, "amqp:not-allowed", "this link does not accept messages")
        self._count_operation(link, role.state)

    @staticmethod
    def _accept(delivery: proton.Delivery) -> None:
        if not delivery.settled:
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()

    @staticmethod
    def _reject(delivery: proton.Delivery, condition: str, description: str) -> None:
        # With an info map, as the service sends (a tracking id): Microsoft's SDK reads the error as
        # a full (condition, description, info) triple, and proton leaves an empty map out.
        delivery.local.condition = Condition(condition, description, {TRACKING_ID: str(uuid.uuid4())})
        delivery.update(Delivery.REJECTED)
        delivery.settle()

    def _publish(self, delivery: proton.Delivery, role: Publish, payload: bytes) -> None:
        address = role.address
        if not role.state.authorized(address.node):
            self._reject(delivery, "amqp:unauthorized-access", f"the token for '{address.node}' has expired")
            return
        if not self.meter.admit():
            self._reject(delivery, THROTTLED_CONDITION, self.meter.refusal())
            return
        try:
            published = self.broker.publish(address, payload)
        except OperationError as exc:
            self.meter.charge(self.meter.costs.message)
            self._reject(delivery, exc.condition, exc.description)
            return
        self.meter.charge(self.meter.costs.send(published.messages, published.filter_evaluations))
        self._accept(delivery)
        self.pump_all()

    def _count_operation(self, link: proton.Link, state: ConnectionState) -> None:
        state.operations += 1
        limit = self.faults.close_after_ops
        if limit is not None and state.operations >= limit:
            _close_connection(
                link.connection, "amqp:connection:forced", f"fault injection: closed after {limit} operations"
            )

    # -- $cbs -------------------------------------------------------------------------------------
    def _put_token(self, link: proton.Link, role: CbsRequests, request: ManagementMessage) -> None:
        props = request.properties
        if str(props.get("operation")) != "put-token":
            status, description = 400, "unsupported $cbs operation"
        elif self.faults.refuse_cbs:
            status, description = 401, "fault injection: CBS refused"
        else:
            try:
                grant = self.validator.validate(
                    request.body, props.get("type"), props.get("name"), now=self.token_clock()
                )
            except TokenRejected as exc:
                status, description = 401, f"Unauthorized: {exc}"
            else:
                role.state.grant(grant)
                status, description = 202, "Accepted"
        reply = sections.encode_management_message(
            to=request.reply_to,
            correlation_id=request.message_id,
            application_properties={"status-code": proton.int32(status), "status-description": description},
        )
        self._respond(role.state, CBS_NODE, request.reply_to, reply)

    # -- $management ---------------------------------------------------------------------------------
    def _management_request(self, link: proton.Link, role: ManagementRequests, request: ManagementMessage) -> None:
        self.requests += 1
        address = role.address
        props = request.properties
        if self.faults.server_busy():
            response = Response(503, None, "fault injection: the server is busy", "com.microsoft:server-busy")
        elif not role.state.authorized(address.node):
            response = Response(401, None, f"no valid token covers '{address.node}'", "amqp:unauthorized-access")
        elif not self.meter.admit():
            response = Response(503, None, self.meter.refusal(), THROTTLED_CONDITION)
        else:
            operation = props.get("operation")
            if self.faults.drops(operation, "before"):
                _close_connection(link.connection, "amqp:connection:forced", f"fault injection: dropped {operation}")
                return
            response = self.management.handle(address, operation, request.body)
            if isinstance(operation, str):
                self.meter.charge(self.meter.costs.operation(operation, messages_touched(request.body, response.body)))
            if self.faults.drops(operation, "after"):
                _close_connection(link.connection, "amqp:connection:forced", f"fault injection: {operation} done, unanswered")
                return
        reply_properties = response.application_properties()
        tracking = props.get("com.microsoft:tracking-id")
        if tracking is not None:
            reply_properties["com.microsoft:tracking-id"] = tracking
        reply = sections.encode_management_message(
            to=request.reply_to,
            correlation_id=request.message_id if request.message_id is not None else request.correlation_id,
            application_properties=reply_properties,
            body=response.body,
        ) + (response.encoded_body or b"")
        send = functools.partial(self._respond, role.state, address.node, request.reply_to, reply)
        if self.faults.latency > 0 and self.container is not None:
            self.container.schedule(self.faults.latency, _Timer(functools.partial(self._send_later, send)))
        else:
            send()

    @_guarded
    def _send_later(self, send: Callable[[], None], event: proton.Event) -> None:
        send()

    def _respond(self, state: ConnectionState, node: str, reply_to: str | None, reply: bytes) -> None:
        """Send an encoded response on the client's receiver link for ``node`` (matching reply-to when given)."""
        cache = state.reply_links
        target = cache.get((node, reply_to))
        if target is None or not target.state & Endpoint.LOCAL_ACTIVE:
            target = self._find_reply_link(state, node, reply_to)
            if target is None:
                log.info("emulator: no response link for %s; response dropped", node)
                return
            cache[(node, reply_to)] = target
        delivery = target.delivery(next(self._reply_tags))
        target.send(reply)
        target.advance()
        delivery.settle()

    @staticmethod
    def _find_reply_link(state: ConnectionState, node: str, reply_to: str | None) -> proton.Link | None:
        """The client's response link for ``node``: found in the per-connection index, not by a scan."""
        links = state.response_links.get(name_key(node), [])
        links[:] = [lk for lk in links if not lk.state & Endpoint.LOCAL_CLOSED]
        candidates = [lk for lk in links if lk.state & Endpoint.LOCAL_ACTIVE]
        if reply_to:
            exact = [lk for lk in candidates if lk.remote_target.address == reply_to or lk.name == reply_to]
            candidates = exact or candidates
        return candidates[0] if candidates else None
