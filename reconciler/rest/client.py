"""A small client for the Service Bus management REST API: discovery, and rules where AMQP is refused.

Reads only: the namespace's topics, a topic's subscriptions (paged with ``$skip``/``$top``), one
subscription's properties and a subscription's rules. Everything else about it is the AMQP
client's: the same connection string, the same SAS or Entra token providers (the token's audience
is the namespace's ``https://`` URL, as Microsoft's Python SDK signs it), the same TLS rule
(verified TLS; plain HTTP only for ``UseDevelopmentEmulator=true`` on a loopback host), the same
request pipeline (pacing, retry policy; ``reconciler.amqp.pipeline``) under its typed reads, and
the same error classes. Each GET is a management read to the service's credit accounting. The
service wants Manage rights here; a Listen-only key gets 401, raised as UnauthorizedError so that
commands can fall back to declared names.

HTTP is ``httpx``: it takes an ``ssl.SSLContext`` as is, so the REST client trusts exactly what the
AMQP client trusts (the system's CAs, or the given CA file), and it keeps connections alive.
"""

from __future__ import annotations

import ssl
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterator

import httpx

from reconciler import model
from reconciler.amqp import reach
from reconciler.amqp.connection import ConnectionString
from reconciler.amqp.errors import (
    ConnectionLostError,
    ManagementError,
    OperationTimeoutError,
    ServerBusyError,
    UnauthorizedError,
    error_for,
)
from reconciler.amqp.pacing import Pacer
from reconciler.amqp.pipeline import Call, Request, RequestPipeline, Response
from reconciler.amqp.retry import RetryPolicy
from reconciler.amqp.sas import JWT_TOKEN_TYPE, Token, TokenProvider, token_provider_for
from reconciler.credits import MANAGEMENT_CREDITS, wait_hint
from reconciler.rest import atom

API_VERSION = "2021-05"
PAGE_SIZE = 100
HTTPS_PORT = 443
#: Renew a cached token this long before it expires.
TOKEN_MARGIN = 60.0
#: Statuses a gateway or proxy in front of the service may answer without the API's XML; any
#: other answer that is not XML comes from something that is not the management API.
_STATUS_FROM_ANY_FRONT_END = frozenset({401, 403, 429, 500, 502, 503, 504})


def default_base_url(conn: ConnectionString) -> str:
    """Where the management API of ``conn``'s namespace is served.

    A cloud namespace serves it on HTTPS port 443 whatever port AMQP uses. The sbrules emulator
    serves it on its one port, beside AMQP (it tells the protocols apart by their first byte), so
    an emulator connection string (loopback only, as for AMQP) names it as it is: plain HTTP there.
    """
    transport = conn.transport()  # refuses UseDevelopmentEmulator for a non-loopback host
    host = f"[{conn.host}]" if ":" in conn.host else conn.host
    if not transport.tls:
        return f"http://{host}:{transport.port}"
    return f"https://{host}"


def token_audience(conn: ConnectionString) -> str:
    """The audience REST tokens are signed for: ``https://`` + the endpoint's host[:port], as
    Microsoft's Python SDK signs them (its administration client's credential policy)."""
    host = f"[{conn.host}]" if ":" in conn.host else conn.host
    return f"https://{host}{f':{conn.port}' if conn.port else ''}"


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class ManagementRestClient:
    """Reads entities and rules over the management REST API (use as a context manager)."""

    def __init__(
        self,
        connection_string: str | ConnectionString,
        *,
        timeout: float = 30.0,
        auth: str = "sas",
        token_provider: TokenProvider | None = None,
        ca_file: str | None = None,
        retry: RetryPolicy | None = None,
        pacer: Pacer | None = None,
        page_size: int = PAGE_SIZE,
        clock: Callable[[], float] = time.time,
        base_url: str | None = None,
    ) -> None:
        """``base_url`` overrides where the API is reached (a private endpoint's own name, say);
        https URLs are always verified, against ``ca_file`` when given. ``pacer`` is shared with
        the namespace's AMQP client when both work for one command."""
        self._conn = (
            connection_string if isinstance(connection_string, ConnectionString)
            else ConnectionString.parse(connection_string)
        )
        self.base_url = (base_url or default_base_url(self._conn)).rstrip("/")
        self._audience = token_audience(self._conn)
        self._tokens = token_provider or token_provider_for(self._conn, auth)
        self._token: Token | None = None
        self._token_lock = threading.Lock()
        self._clock = clock
        self.page_size = page_size
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if self.base_url.startswith("https") else False
        http = httpx.Client(
            base_url=self.base_url, verify=verify, timeout=timeout, trust_env=False,
            headers={"Accept": "application/atom+xml, application/xml"},
        )
        self.pipeline = RequestPipeline(
            _HttpTransport(http, self._authorization), retry=retry, pacer=pacer, timeout=timeout
        )

    def __repr__(self) -> str:
        return f"ManagementRestClient({self._conn!s})"

    def __enter__(self) -> "ManagementRestClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.pipeline.close()

    @property
    def pacer(self) -> Pacer:
        return self.pipeline.pacer

    # -- reads ---------------------------------------------------------------------------------
    def list_topics(self) -> list[str]:
        """The names of every topic in the namespace."""
        return [atom.entry_title(e) for e in self._pages("$Resources/topics", "list topics")]

    def list_subscriptions(self, topic: str) -> list[atom.SubscriptionInfo]:
        """Every subscription of ``topic`` with its properties (NotFoundError when the topic does not exist)."""
        return [
            atom.subscription_from_entry(topic, e)
            for e in self._pages(f"{_quote(topic)}/subscriptions", f"list subscriptions of {topic}")
        ]

    def get_subscription(self, topic: str, subscription: str) -> atom.SubscriptionInfo:
        """One subscription's properties (NotFoundError when it does not exist)."""
        what = f"get subscription {topic}/{subscription}"
        page = atom.page(self._get(f"{_quote(topic)}/subscriptions/{_quote(subscription)}", {}, what))
        if not page.entries:
            raise error_for(404, None, "the subscription does not exist", what)
        return atom.subscription_from_entry(topic, page.entries[0])

    def list_rules(self, topic: str, subscription: str) -> list[model.Rule]:
        """The rules of a subscription, read over REST (works where AMQP enumerate-rules is refused)."""
        return [
            atom.rule_from_entry(e)
            for e in self._pages(
                f"{_quote(topic)}/subscriptions/{_quote(subscription)}/rules", f"list rules of {topic}/{subscription}"
            )
        ]

    def namespace_sku(self) -> str | None:
        """The namespace's tier (``MessagingSKU``: Basic, Standard or Premium); needs Manage rights."""
        page = atom.page(self._get("$namespaceinfo", {}, "read the namespace's properties"))
        return atom.namespace_sku(page.entries[0]) if page.entries else None

    # -- transport -----------------------------------------------------------------------------
    def _pages(self, path: str, what: str) -> Iterator:
        """Every entry of a paged feed: pages of ``page_size`` until a short one."""
        skip = 0
        while True:
            page = atom.page(self._get(path, {"$skip": skip, "$top": self.page_size}, what))
            yield from page.entries
            if len(page.entries) < self.page_size:
                return
            skip += len(page.entries)

    def _authorization(self) -> str:
        with self._token_lock:
            if self._token is None or self._token.expires_at - TOKEN_MARGIN <= self._clock():
                self._token = self._tokens.get_token(self._audience)
            token = self._token
        return f"Bearer {token.value}" if token.token_type == JWT_TOKEN_TYPE else token.value

    def _get(self, path: str, params: dict, what: str) -> bytes:
        """GET through the pipeline (paced, retried); the body on 200, else the error the status stands for."""
        call = Call("/" + path, "GET", {**params, "api-version": API_VERSION}, MANAGEMENT_CREDITS, what=what)
        return self.pipeline.call(call).body


class _HttpTransport:
    """The REST client's transport: each request is one GET, answered on the submitting thread."""

    def __init__(self, http: httpx.Client, authorization: Callable[[], str]) -> None:
        self._http = http
        self._authorization = authorization

    def submit(self, request: Request) -> None:
        try:
            body = self._get(request)
        except ManagementError as exc:
            request.finish(error=exc)
        else:
            request.finish(Response(200, None, None, body, {}))

    def forget(self, request: Request) -> bool:
        return False  # answered before submit returns: nothing is ever outstanding

    def close(self) -> None:
        self._http.close()

    def _get(self, request: Request) -> bytes:
        what = request.context
        url = self._http.base_url
        started = time.monotonic()
        try:
            response = self._http.get(
                request.entity, params=request.body, timeout=request.timeout,
                headers={"Authorization": self._authorization()},
            )
        except httpx.ConnectTimeout:
            raise reach.open_timeout(reach.host_port(url.host, url.port or HTTPS_PORT), time.monotonic() - started,
                                     "a connection") from None
        except httpx.TimeoutException:
            raise OperationTimeoutError(f"{what}: no response in time") from None
        except httpx.TransportError as exc:
            failure = reach.from_os_error(exc, url.host, url.port or HTTPS_PORT)
            if failure is not None:
                raise failure from None
            raise ConnectionLostError(f"{what}: {type(exc).__name__}: {exc}") from None
        content_type = response.headers.get("content-type")
        if "xml" not in (content_type or "") and response.status_code not in _STATUS_FROM_ANY_FRONT_END:
            raise reach.not_management_api(str(url), response.status_code, content_type)
        if response.status_code == 200:
            return response.content
        detail = atom.error_detail(response.content) or response.reason_phrase or "no description"
        status = response.status_code
        if status in (401, 403):
            raise UnauthorizedError(f"{what}: {detail} (HTTP {status})", status=status, description=detail)
        if status in (429, 503):
            raise ServerBusyError(
                f"{what}: {detail} (HTTP {status})", status=status, description=detail,
                retry_after=_retry_after(response.headers.get("Retry-After")) or wait_hint(detail),
            )
        raise error_for(status, None, detail, what)


def _retry_after(value: Any) -> float | None:
    """An HTTP Retry-After header given in seconds (the date form is not used by the service)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
