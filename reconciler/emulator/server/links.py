"""What each link attached to the emulator is for, as typed objects the server keeps per link.

A link's role is decided once, when it attaches, from its address and direction (docs/protocol.md
§4, §5): requests to ``$cbs`` or an entity's ``$management`` node and the responses back,
messages published to a topic or queue, messages received from a queue or subscription. The
server holds one role per link in a dict keyed by the link, so per-link state lives here and not
in attributes set on proton's objects.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable, ClassVar

import proton
from proton import Condition, Endpoint

from reconciler.emulator.auth import Grant, path_parts
from reconciler.emulator.namespace import Address, MessageStore

log = logging.getLogger("reconciler.emulator")

CBS_NODE = "$cbs"


class LinkKind(StrEnum):
    """The roles a link plays, named from the emulator's side."""

    CBS_REQUESTS = "cbs-requests"
    MANAGEMENT_REQUESTS = "management-requests"
    RESPONSES = "responses"
    PUBLISH = "publish"
    RECEIVE = "receive"
    REFUSED = "refused"


class ConnectionState:
    """Per-connection bookkeeping: CBS grants, response links, the operation counter for the
    close-after fault."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        #: Unix time that grants are judged by.
        self.clock = clock
        #: audience path segments → latest expiry granted for it (one entry per entity token).
        self.grants: dict[tuple[str, ...], float] = {}
        #: node path → the latest expiry of a grant covering it (cleared when a token is put).
        self._covered_until: dict[str, float] = {}
        self.operations = 0
        #: (node, reply-to) → the client's receiver link that gets those responses.
        self.reply_links: dict[tuple[str, str | None], proton.Link] = {}
        #: lower-cased node → response links attached from it, in attach order.
        self.response_links: dict[str, list[proton.Link]] = {}

    def grant(self, grant: Grant) -> None:
        key = path_parts(grant.path)
        self.grants[key] = max(grant.expires, self.grants.get(key, 0.0))
        self._covered_until.clear()

    def authorized(self, node_path: str) -> bool:
        """Whether a live token covers the node: a lookup per path prefix, remembered per node."""
        until = self._covered_until.get(node_path)
        if until is None:
            wanted = path_parts(node_path)
            until = max(self.grants.get(wanted[:n], 0.0) for n in range(len(wanted) + 1))
            self._covered_until[node_path] = until
        return until > self.clock()


def close_connection(connection: proton.Connection | None, condition: str, description: str) -> None:
    """End ``connection`` with an error condition (once; never raises: it runs while handling failures)."""
    try:
        if connection is not None and not connection.state & Endpoint.LOCAL_CLOSED:
            connection.condition = Condition(condition, description)
            connection.close()
    except Exception:  # best effort while already handling a failure
        log.exception("emulator: could not close connection")


@dataclass(eq=False)
class LinkRole:
    """A link's role; ``state`` is its connection's (kept here: reaching it through
    ``link.connection`` builds a new proton wrapper on every call)."""

    kind: ClassVar[LinkKind]
    state: ConnectionState


@dataclass(eq=False)
class CbsRequests(LinkRole):
    """The client's sender to ``$cbs``: put-token requests."""

    kind: ClassVar[LinkKind] = LinkKind.CBS_REQUESTS


@dataclass(eq=False)
class ManagementRequests(LinkRole):
    """The client's sender to an entity's ``$management`` node: management requests."""

    kind: ClassVar[LinkKind] = LinkKind.MANAGEMENT_REQUESTS
    address: Address


@dataclass(eq=False)
class Responses(LinkRole):
    """The client's receiver from ``$cbs`` or a ``$management`` node: responses go out on it."""

    kind: ClassVar[LinkKind] = LinkKind.RESPONSES
    node: str


@dataclass(eq=False)
class Publish(LinkRole):
    """The client's sender to a topic or queue: each transfer is published."""

    kind: ClassVar[LinkKind] = LinkKind.PUBLISH
    address: Address


@dataclass(eq=False)
class Receive(LinkRole):
    """The client's receiver from a queue or subscription (or a dead-letter queue)."""

    kind: ClassVar[LinkKind] = LinkKind.RECEIVE
    address: Address
    store: MessageStore
    #: peek-lock (the client settles) or receive-and-delete (sent settled)
    peek_lock: bool
    #: the session this link holds, for session receivers
    session_id: str | None = None
    #: delivery → lock token, for each message sent in peek-lock mode and not yet settled
    locks: dict[proton.Delivery, uuid.UUID] = field(default_factory=dict)


@dataclass(eq=False)
class Refused(LinkRole):
    """A link the emulator refuses: attached with a null terminus, then detached with this error."""

    kind: ClassVar[LinkKind] = LinkKind.REFUSED
    condition: str
    description: str
