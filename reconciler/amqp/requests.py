"""Raw `$management` requests of the AMQP client: one pipelined connection (``engine.py``) under the
request pipeline (``reconciler.namespace.pipeline``: pacing, retries, completions), and the credits
the service charges each operation. The typed operations build on it (``rules.py``, ``messaging.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from reconciler.amqp.engine import Engine
from reconciler.namespace.connection import ConnectionString
from reconciler.namespace.credentials import TokenProvider, token_provider_for
from reconciler.namespace.credits import messages_touched, operation_credits
from reconciler.namespace.errors import ManagementError
from reconciler.namespace.network import DIRECT, Network
from reconciler.namespace.pacing import Pacer
from reconciler.namespace.pipeline import Call, OnAttempt, RequestPipeline, Response
from reconciler.namespace.retry import RetryPolicy

#: One management call of a batch: (entity path, operation, request body).
CallSpec = tuple[str, str, Mapping[str, Any]]

OP_PREFIX = "com.microsoft:"


def entity_path(topic: str, subscription: str | None = None) -> str:
    """``topic`` (or a queue) alone, or ``<topic>/Subscriptions/<subscription>``."""
    return f"{topic}/Subscriptions/{subscription}" if subscription else topic


def management_call(entity: str, operation: str, body: Mapping[str, Any]) -> Call:
    """A `$management` request with the credits the service charges for it: a message operation is
    charged per message it returns or names, so it reserves what it names (a peek or a receive its
    ``message-count``) and is charged what the answer holds."""
    asked = int(body.get("message-count") or 0) or messages_touched(body)
    return Call(
        entity, operation, body, operation_credits(operation, asked),
        lambda response: operation_credits(operation, messages_touched(body, response.body)),
    )


class ManagementRequests:
    """Raw `$management` requests to one namespace (use as a context manager).

    ``pacer`` may be shared with the namespace's other clients (the REST client) so that one
    budget covers them all; by default the client has its own, with ``window`` and ``max_rate``.
    """

    def __init__(
        self,
        connection_string: str | ConnectionString,
        *,
        timeout: float = 30.0,
        window: int = 64,
        max_rate: float | None = None,
        retries: int = 5,
        backoff: float = 0.2,
        max_backoff: float = 10.0,
        retry: RetryPolicy | None = None,
        pacer: Pacer | None = None,
        auth: str = "sas",
        token_provider: TokenProvider | None = None,
        network: Network = DIRECT,
        refresh_margin: float | None = None,
    ) -> None:
        """``network``: AMQP or WebSockets, the proxy and the CAs trusted (``reconciler.namespace.network``)."""
        self._conn = (
            connection_string if isinstance(connection_string, ConnectionString)
            else ConnectionString.parse(connection_string)
        )
        transport = self._conn.transport(websockets=network.websockets)
        tokens = token_provider or token_provider_for(self._conn, auth)
        extra = {"refresh_margin": refresh_margin} if refresh_margin is not None else {}
        engine = Engine(self._conn, transport, tokens, network=network, link_timeout=timeout, **extra)
        self.pipeline = RequestPipeline(
            engine,
            retry=retry or RetryPolicy(retries, backoff, max_backoff),
            pacer=pacer or Pacer(window=window, max_rate=max_rate),
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._conn!s})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.pipeline.close()

    @property
    def pacer(self) -> Pacer:
        return self.pipeline.pacer

    @property
    def retry(self) -> RetryPolicy:
        return self.pipeline.retry

    def request(
        self,
        entity: str,
        operation: str,
        body: Mapping[str, Any],
        *,
        ok: Iterable[int] = (200,),
        timeout: float | None = None,
        empty_ok: bool = False,
        on_attempt: OnAttempt | None = None,
    ) -> Response:
        """One `$management` request through the pipeline; its response when the status is in ``ok``.

        ``empty_ok`` turns 204 and 404 message/session-not-found into an empty response.
        """
        return self.pipeline.call(
            management_call(entity, operation, body), ok=ok, empty_ok=empty_ok, timeout=timeout, on_attempt=on_attempt
        )

    def request_all(
        self,
        calls: Sequence[CallSpec],
        *,
        ok: Iterable[int] = (200,),
        empty_ok: bool = False,
        window: int | None = None,
        timeout: float | None = None,
        on_attempt: OnAttempt | None = None,
    ) -> list[Response | ManagementError]:
        """Pipeline ``calls`` from this thread; one response or error per call, in order."""
        return self.pipeline.call_all(
            [management_call(*c) for c in calls], ok=ok, empty_ok=empty_ok, window=window, timeout=timeout,
            on_attempt=on_attempt,
        )
