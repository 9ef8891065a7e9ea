"""The emulator's request nodes: ``$cbs`` (put-token) and each entity's ``$management`` node. A
request arrives on the client's sender to the node; its response goes out on the client's receiver
from that node, the one whose target is the request's reply-to (docs/protocol.md §4, §5).

Runs on the emulator's loop thread only.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from typing import Callable, Protocol

import proton
from proton import Endpoint

from reconciler.amqp.wire import sections
from reconciler.amqp.wire.sections import ManagementMessage
from reconciler.emulator.auth import TokenRejected, TokenValidator
from reconciler.emulator.faults import Faults
from reconciler.emulator.management import ManagementNode, Response
from reconciler.emulator.server.links import CBS_NODE, CbsRequests, ConnectionState, ManagementRequests, close_connection
from reconciler.emulator.throttling import CreditMeter
from reconciler.names import name_key
from reconciler.namespace.credits import THROTTLED_CONDITION, messages_touched

log = logging.getLogger("reconciler.emulator")

#: Runs a callable on the loop after a delay (seconds), guarded as every callback is.
Later = Callable[[float, Callable[[], None]], None]


class Commit(Protocol):
    """When a write may be acknowledged: ``durability.GroupCommit``, or at once without a state file."""

    @property
    def changes(self) -> int: ...

    def after_commit(self, respond: Callable[[], None]) -> None: ...


class Immediate:
    changes = 0

    def after_commit(self, respond: Callable[[], None]) -> None:
        respond()


class RequestNodes:
    """Answers put-token and management requests; ``later`` delays a response (the latency fault)."""

    def __init__(
        self, management: ManagementNode, validator: TokenValidator, faults: Faults, meter: CreditMeter,
        later: Later, token_clock: Callable[[], float] = time.time,
    ) -> None:
        self.management = management
        self.validator = validator
        self.faults = faults
        self.meter = meter
        self._later = later
        self.token_clock = token_clock
        #: Management requests received (answered or refused), for tests that count retries.
        self.requests = 0
        #: Where a response to a write waits until the write is durable (``durability.py``).
        self.commit: Commit = Immediate()
        #: Delivery tags of responses (settled at once, so they only need to differ from each other).
        self._reply_tags = map(b"%x".__mod__, itertools.count())

    # -- $cbs -------------------------------------------------------------------------------------
    def put_token(self, role: CbsRequests, request: ManagementMessage) -> None:
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
    def management_request(self, link: proton.Link, role: ManagementRequests, request: ManagementMessage) -> None:
        self.requests += 1
        address = role.address
        props = request.properties
        wrote = False
        if self.faults.server_busy():
            response = Response(503, None, "fault injection: the server is busy", "com.microsoft:server-busy")
        elif not role.state.authorized(address.node):
            response = Response(401, None, f"no valid token covers '{address.node}'", "amqp:unauthorized-access")
        elif not self.meter.admit():
            response = Response(503, None, self.meter.refusal(), THROTTLED_CONDITION)
        else:
            operation = props.get("operation")
            if self.faults.drops(operation, "before"):
                close_connection(link.connection, "amqp:connection:forced", f"fault injection: dropped {operation}")
                return
            before = self.commit.changes
            response = self.management.handle(address, operation, request.body)
            wrote = self.commit.changes != before
            if isinstance(operation, str):
                self.meter.charge(self.meter.costs.operation(operation, messages_touched(request.body, response.body)))
            if self.faults.drops(operation, "after"):
                close_connection(link.connection, "amqp:connection:forced", f"fault injection: {operation} done, unanswered")
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
        if wrote:  # acknowledged only once the state file holds it
            send = functools.partial(self.commit.after_commit, send)
        if self.faults.latency > 0:
            self._later(self.faults.latency, send)
        else:
            send()

    # -- responses ----------------------------------------------------------------------------------
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
