"""Claims-based security: the ``$cbs`` link pair of one connection, which puts a token for each
entity before its links attach (audience ``sb://host/<entity>/$management``, or ``sb://host/<entity>``
for a sender to the entity) and again before the token expires.

Runs on the engine's loop thread only (proton is single-threaded).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Callable

import proton
from proton.reactor import AtMostOnce, Container

from reconciler.amqp.deliveries import CREDIT
from reconciler.amqp.links import Entity, Outbox
from reconciler.amqp.wire import sections
from reconciler.namespace.connection import ConnectionString
from reconciler.namespace.credentials import JWT_TOKEN_TYPE, TOKEN_REFRESH_MARGIN, TokenProvider, renewal_due
from reconciler.namespace.errors import AuthenticationError, ManagementError, UnauthorizedError, error_for, response_status
from reconciler.namespace.pipeline import next_message_id

log = logging.getLogger("reconciler.amqp")

CBS_ADDRESS = "$cbs"


class Cbs:
    """The token side of a connection: which put-token waits for which entity, and when to re-put."""

    def __init__(
        self, conn: ConnectionString, tokens: TokenProvider, container: Container, outbox: Outbox,
        link_name: Callable[[str], str], refresh_margin: float = TOKEN_REFRESH_MARGIN,
    ) -> None:
        self._conn = conn
        self._tokens = tokens
        self._container = container
        self._outbox = outbox
        self._link_name = link_name
        self._refresh_margin = refresh_margin
        self._sender: proton.Sender | None = None
        self._sender_name = ""
        self.receiver_name = ""
        self._reply = ""
        self._waiting: dict[str, str] = {}  # put-token message-id → entity address

    def open(self, connection: proton.Connection) -> None:
        """Attach the ``$cbs`` link pair of a new connection."""
        self._reply = f"sbrules-cbs-{uuid.uuid4().hex}"
        self._sender_name = self._link_name("cbs-sender")
        self.receiver_name = self._link_name("cbs-receiver")
        self._sender = self._container.create_sender(
            connection, target=CBS_ADDRESS, name=self._sender_name, options=[AtMostOnce()]
        )
        receiver = self._container.create_receiver(connection, source=CBS_ADDRESS, target=self._reply, name=self.receiver_name)
        receiver.flow(CREDIT)

    def clear(self) -> None:
        """The connection is gone: no put-token is answered any more."""
        self._waiting.clear()

    def owns(self, link_name: str) -> bool:
        return link_name in (self._sender_name, self.receiver_name)

    def put_token(self, entity: Entity) -> ManagementError | None:
        """Send a token for ``entity``; the error instead when the provider has none to give."""
        audience = self._conn.audience(entity.address)
        try:
            token = self._tokens.get_token(audience)
        except ManagementError as exc:  # the provider's own: expired signature, no Entra ID token
            return exc
        except Exception as exc:  # a credential failure must reach the caller
            log.debug("could not get a token for %s", entity.address, exc_info=True)
            return AuthenticationError(
                f"could not get a token for {entity.name}: {type(exc).__name__} (run with -v for the details)"
            )
        entity.token_type = token.token_type
        message_id = next_message_id()
        msg = sections.encode_management_message(
            message_id=message_id,
            reply_to=self._reply,
            body=token.value,
            application_properties={
                "operation": "put-token",
                "type": token.token_type,
                "name": audience,
                "expiration": proton.timestamp(int(token.expires_at * 1000)),
            },
        )
        self._waiting[message_id] = entity.address
        entity.token_expires_at = token.expires_at
        entity.token_renewal_due = renewal_due(time.time(), token.expires_at, self._refresh_margin)
        assert self._sender is not None
        self._outbox.enqueue(self._sender, self._sender_name, msg)
        return None

    def take(self, message: sections.ManagementMessage) -> str | None:
        """The address of the entity a put-token response answers (None: not one this connection awaits)."""
        return self._waiting.pop(str(message.correlation_id), None)

    def verdict(self, entity: Entity, message: sections.ManagementMessage) -> ManagementError | None:
        """None when the put-token response accepted the entity's token, else what its requests fail with."""
        status, description, condition = response_status(message.properties)
        if status in (200, 202):
            return None
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
        return error

    def refresh_delay(self, entity: Entity) -> float | None:
        """Seconds until the entity's token is re-put; None for a given signature that has run out."""
        now = time.time()
        if entity.token_expires_at <= now:
            return None  # nothing fresher to put
        return max(1.0, entity.token_renewal_due - now)
