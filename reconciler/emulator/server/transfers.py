"""Messages over the emulator's links: transfers published by a client's sender, messages pumped to a
client's receiver while it has credit, and the dispositions that settle a peek-lock delivery.

Every message published or delivered is charged to the namespace's credits (``throttling.py``) and
counted for the close-after-operations fault. Runs on the emulator's loop thread only.
"""

from __future__ import annotations

import uuid
from typing import Callable

import proton
from proton import Condition, Delivery, Endpoint, symbol

from reconciler.emulator.broker import Broker
from reconciler.emulator.faults import Faults
from reconciler.emulator.namespace import MessageStore, OperationError
from reconciler.emulator.server.links import ConnectionState, LinkRole, Publish, Receive, close_connection
from reconciler.emulator.throttling import CreditMeter
from reconciler.namespace.credits import THROTTLED_CONDITION

TRACKING_ID = symbol("com.microsoft:tracking-id")


def accept(delivery: proton.Delivery) -> None:
    if not delivery.settled:
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()


def reject(delivery: proton.Delivery, condition: str, description: str) -> None:
    # With an info map, as the service sends (a tracking id): Microsoft's SDK reads the error as
    # a full (condition, description, info) triple, and proton leaves an empty map out.
    delivery.local.condition = Condition(condition, description, {TRACKING_ID: str(uuid.uuid4())})
    delivery.update(Delivery.REJECTED)
    delivery.settle()


class Transfers:
    """The message side of the server: ``links`` is the server's role of every attached link."""

    def __init__(self, broker: Broker, meter: CreditMeter, faults: Faults, links: dict[proton.Link, LinkRole]) -> None:
        self.broker = broker
        self.meter = meter
        self.faults = faults
        self._links = links
        #: receivers that messages may be pumped to
        self.message_links: set[proton.Link] = set()

    def count_operation(self, link: proton.Link, state: ConnectionState) -> None:
        state.operations += 1
        limit = self.faults.close_after_ops
        if limit is not None and state.operations >= limit:
            close_connection(
                link.connection, "amqp:connection:forced", f"fault injection: closed after {limit} operations"
            )

    def release(self, link: proton.Link) -> None:
        """The link closed (or its connection did): forget its role, and give back the session it held."""
        self.message_links.discard(link)
        role = self._links.pop(link, None)
        if isinstance(role, Receive) and role.session_id is not None:
            self.broker.release_session(role.store, role.session_id, link)

    # -- outgoing messages ------------------------------------------------------------------------
    def pump_all(self) -> None:
        for link in list(self.message_links):
            self.pump(link)

    def pump(self, link: proton.Link) -> None:
        """Send stored messages while the receiver has credit."""
        role = self._links.get(link)
        if not isinstance(role, Receive):
            return
        if not (link.state & Endpoint.LOCAL_ACTIVE and link.state & Endpoint.REMOTE_ACTIVE):
            return
        if not role.state.authorized(role.address.node):
            # The service detaches links whose token expired without being renewed.
            link.condition = Condition("amqp:unauthorized-access", f"the token for '{role.address.node}' expired")
            link.close()
            self.release(link)
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
            self.count_operation(link, role.state)
        if link.drain_mode and link.credit > 0:
            link.drained()

    # -- dispositions -----------------------------------------------------------------------------
    def accepted(self, delivery: proton.Delivery) -> None:
        self._settle(delivery, lambda store, token: self.broker.complete(store, token))

    def rejected(self, delivery: proton.Delivery) -> None:
        info = {}
        condition = delivery.remote.condition
        if condition is not None and isinstance(condition.info, dict):
            info = condition.info
        reason = info.get("DeadLetterReason")
        description = info.get("DeadLetterErrorDescription")
        self._settle(
            delivery,
            lambda store, token: self.broker.dead_letter(
                store, token, None if reason is None else str(reason), None if description is None else str(description)
            ),
        )

    def released(self, delivery: proton.Delivery) -> None:
        remote = delivery.remote
        properties = dict(remote.annotations or {}) if delivery.remote_state == Delivery.MODIFIED else {}
        properties = {str(k): v for k, v in properties.items()}
        if delivery.remote_state == Delivery.MODIFIED and remote.undeliverable:
            self._settle(delivery, lambda store, token: self.broker.defer(store, token, properties))
        else:
            self._settle(delivery, lambda store, token: self.broker.abandon(store, token, properties))

    def settled(self, delivery: proton.Delivery) -> None:
        if self._take_lock(delivery) is not None:
            delivery.settle()

    def _take_lock(self, delivery: proton.Delivery) -> tuple[Receive, uuid.UUID] | None:
        """The receiver role and lock token of a delivery not settled yet, forgotten from now on."""
        role = self._links.get(delivery.link)
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

    # -- incoming transfers -----------------------------------------------------------------------
    def publish(self, delivery: proton.Delivery, role: Publish, payload: bytes) -> None:
        address = role.address
        if not role.state.authorized(address.node):
            reject(delivery, "amqp:unauthorized-access", f"the token for '{address.node}' has expired")
            return
        if not self.meter.admit():
            reject(delivery, THROTTLED_CONDITION, self.meter.refusal())
            return
        try:
            published = self.broker.publish(address, payload)
        except OperationError as exc:
            self.meter.charge(self.meter.costs.message)
            reject(delivery, exc.condition, exc.description)
            return
        self.meter.charge(self.meter.costs.send(published.messages, published.filter_evaluations))
        accept(delivery)
        self.pump_all()
