"""The engine's links to entities: per ``<entity>/$management`` a management link pair (a pre-settled
sender and a receiver whose target is a unique reply-to address), or, for ``SEND``, one unsettled
sender to the entity itself; and the outbox that holds every message until its link has credit.

Runs on the engine's loop thread only (proton is single-threaded).
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable

import proton
from proton import Condition, symbol, uint
from proton.reactor import AtLeastOnce, AtMostOnce, Container, LinkOption

from reconciler.amqp.deliveries import CREDIT
from reconciler.amqp.wire import sections
from reconciler.namespace.errors import ConnectionLostError, ManagementError, error_for
from reconciler.namespace.pipeline import Request, Response

#: Detach conditions on a working management link that a re-authorised retry can recover from.
_RECOVERABLE_DETACH = {"amqp:unauthorized-access", "amqp:link:detach-forced", "amqp:connection:forced"}


class _Attributes(LinkOption):
    """Attach properties the SDKs send on management links (symbol keys)."""

    def __init__(self, timeout_ms: int) -> None:
        self._props = {
            symbol("com.microsoft:timeout"): uint(timeout_ms),
            symbol("com.microsoft:entity-type"): "entity-mgmt",
        }

    def apply(self, link: proton.Link) -> None:
        link.properties = self._props


class EntityState(StrEnum):
    """An entity's link pair: waiting for its CBS token, then ready for requests."""

    AUTH = "auth"
    READY = "ready"


@dataclass(eq=False)
class Entity:
    """Link pair and auth state of one ``<entity>/$management`` node, or the sender to the entity
    itself (``sends``)."""

    name: str
    sends: bool = False
    state: EntityState = EntityState.AUTH
    reply_to: str = field(default_factory=lambda: f"sbrules-reply-{uuid.uuid4().hex}")
    sender: proton.Sender | None = None
    receiver: proton.Receiver | None = None
    backlog: deque[Request] = field(default_factory=deque)
    token_expires_at: float = 0.0
    token_renewal_due: float = 0.0
    token_type: str = ""
    proven: bool = False  # a response arrived over this link pair (attach refusals come as attach+detach)

    #: Link names, kept as strings: reading ``link.name`` is a foreign call on every use.
    sender_name: str | None = None
    receiver_name: str | None = None

    @property
    def address(self) -> str:
        return self.name if self.sends else f"{self.name}/$management"


class Outbox:
    """Encoded messages waiting for credit, by sender link name, each with the message-id of the
    request its settlement answers (None: sent pre-settled). A pre-settled delivery sent without
    credit is lost, so nothing is sent before the link has credit."""

    def __init__(self) -> None:
        self._waiting: dict[str, deque[tuple[bytes, str | None]]] = {}

    def enqueue(self, sender: proton.Sender, name: str, msg: bytes, awaited: str | None = None) -> None:
        self._waiting.setdefault(name, deque()).append((msg, awaited))
        self.flush(sender, name)

    def flush(self, sender: proton.Sender, name: str) -> None:
        waiting = self._waiting.get(name)
        while waiting and sender.credit > 0:
            msg, awaited = waiting.popleft()
            delivery = sender.delivery(sender.delivery_tag())
            sender.send(msg)
            sender.advance()
            if awaited is None:
                delivery.settle()  # management and $cbs links are pre-settled (at most once), as the SDKs send
            else:
                delivery._sbrules_request = awaited

    def discard(self, name: str) -> None:
        self._waiting.pop(name, None)

    def clear(self) -> None:
        self._waiting.clear()


class Links:
    """The entities of the current connection, by address and by link name: attaching their links,
    sending requests over them once authorised, and forgetting them when they fail."""

    def __init__(
        self, container: Container, outbox: Outbox, link_name: Callable[[str], str], link_timeout_ms: int,
        is_pending: Callable[[Request], bool],
    ) -> None:
        self._container = container
        self._outbox = outbox
        self._link_name = link_name
        self._link_timeout_ms = link_timeout_ms
        self._is_pending = is_pending
        self._entities: dict[str, Entity] = {}  # by address
        self._by_link: dict[str, Entity] = {}  # by link name: a scan per response was O(entities)

    def entity(self, request: Request, sends: bool) -> tuple[Entity, bool]:
        """The entity ``request`` goes to, and whether it is new (then it needs a token first)."""
        address = request.entity if sends else f"{request.entity}/$management"
        entity = self._entities.get(address)
        if entity is not None:
            return entity, False
        entity = self._entities[address] = Entity(request.entity, sends)
        return entity, True

    def current(self, entity: Entity) -> bool:
        """Whether ``entity`` is still the one its address is known by (not failed or dropped since)."""
        return self._entities.get(entity.address) is entity

    def at_address(self, address: str | None) -> Entity | None:
        return self._entities.get(address) if address else None

    def on_link(self, name: str) -> Entity | None:
        return self._by_link.get(name)

    def submit(self, entity: Entity, request: Request) -> None:
        """Send ``request`` now if the entity's links are attached, else when they are."""
        if entity.state is EntityState.READY:
            self.send(entity, request)
        else:
            entity.backlog.append(request)

    def send(self, entity: Entity, request: Request) -> None:
        assert entity.sender is not None and entity.sender_name is not None
        if entity.sends:
            self._outbox.enqueue(entity.sender, entity.sender_name, request.body, request.message_id)
            return
        msg = sections.encode_management_message(
            message_id=request.message_id, reply_to=entity.reply_to, body=request.body,
            application_properties={
                "operation": request.operation, "com.microsoft:server-timeout": uint(int(request.timeout * 1000)),
            },
        )
        self._outbox.enqueue(entity.sender, entity.sender_name, msg)

    def attach(self, entity: Entity, connection: proton.Connection) -> None:
        """Open the entity's links (its token was accepted) and send what waited for them."""
        if entity.sends:
            entity.sender_name = self._link_name(f"{entity.name}-sender")
            entity.sender = self._container.create_sender(
                connection, target=entity.address, name=entity.sender_name, options=[AtLeastOnce()],
            )
            self._by_link[entity.sender_name] = entity
            self._ready(entity)
            return
        options = [_Attributes(self._link_timeout_ms)]
        entity.sender_name = self._link_name(f"{entity.name}-mgmt-sender")
        entity.receiver_name = self._link_name(f"{entity.name}-mgmt-receiver")
        entity.sender = self._container.create_sender(
            connection, target=entity.address, name=entity.sender_name, options=[AtMostOnce(), *options],
        )
        entity.receiver = self._container.create_receiver(
            connection, source=entity.address, target=entity.reply_to, name=entity.receiver_name,
            options=options,
        )
        entity.receiver.flow(CREDIT)
        self._by_link[entity.sender_name] = self._by_link[entity.receiver_name] = entity
        self._ready(entity)

    def _ready(self, entity: Entity) -> None:
        entity.state = EntityState.READY
        while entity.backlog:
            request = entity.backlog.popleft()
            if self._is_pending(request):
                self.send(entity, request)

    def forget(self, entity: Entity) -> None:
        """Forget ``entity`` (its next request re-authorises) and close its links; its requests are the caller's to fail."""
        if self._entities.get(entity.address) is entity:
            del self._entities[entity.address]
        for name in (entity.sender_name, entity.receiver_name):
            if name is not None:  # None until the entity's links were opened
                self._by_link.pop(name, None)
        for link in (entity.sender, entity.receiver):
            if link is not None and link.state & proton.Endpoint.LOCAL_ACTIVE:
                link.close()
        entity.backlog.clear()
        if entity.sender_name is not None:
            self._outbox.discard(entity.sender_name)

    def clear(self) -> None:
        """The connection is gone, and its links with it."""
        self._entities.clear()
        self._by_link.clear()


def detach_error(entity: Entity, condition: Condition | None) -> ManagementError:
    """What the requests of ``entity`` fail with when the service closed one of its links."""
    name = str(condition.name) if condition else "amqp:internal-error"
    description = condition.description if condition else "the service closed the management link"
    context = f"{'sender' if entity.sends else 'management'} link for {entity.name}"
    if entity.proven and name in _RECOVERABLE_DETACH:
        # A link that worked was detached (token expired, service rebalancing): the next
        # attempt re-authorises and re-attaches; a refused attach surfaces as it is.
        return ConnectionLostError(f"{context} closed by the service: {name}: {description}")
    return error_for(None, name, description, context)


def finish_send(request: Request, state: object, condition: Condition | None) -> None:
    """Answer a ``SEND`` request by its delivery's settlement (at-least-once): accepted is 200, rejected
    its error, released or modified a retryable one (the service did not take it, another try may)."""
    if state == proton.Delivery.ACCEPTED:
        request.finish(Response(200, None, None, None, {}))
    elif state == proton.Delivery.REJECTED:
        name = str(condition.name) if condition is not None else "amqp:internal-error"
        description = condition.description if condition is not None else "the service rejected the message"
        request.finish(error=error_for(None, name, description, request.context or f"send to {request.entity}"))
    else:
        request.finish(error=ConnectionLostError(f"send to {request.entity}: the service did not take the message ({state})"))
