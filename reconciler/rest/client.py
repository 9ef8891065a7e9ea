"""A small client for the Service Bus management REST API: discovery, and rules where AMQP is refused.

Reads only: the namespace's topics, a topic's subscriptions (paged with ``$skip``/``$top``), one
subscription's properties and a subscription's rules. Everything else about it is the AMQP
client's: the same connection string, the same SAS or Entra token providers (the token's audience
is the namespace's ``https://`` URL, as Microsoft's Python SDK signs it), the same TLS rule
(verified TLS; plain HTTP only for ``UseDevelopmentEmulator=true`` on a loopback host), the same
request pipeline (pacing, retry policy; ``reconciler.namespace.pipeline``) under its typed reads, and
the same error classes. Each GET is a management read to the service's credit accounting. The
service wants Manage rights here; a Listen-only key gets 401, raised as UnauthorizedError so that
commands can fall back to declared names.

HTTP is the standard library's ``http.client``: the client only ever GETs, one request per
connection at a time, so a small pool of kept-alive connections is all it needs, and an HTTP library
cost more than it gave (importing httpx took 0.25 s of CPU, and the tier probe of every command that
talks to a namespace imports this module: ``sbrules sample`` of an empty subscription took 0.97 s
with it and 0.68 s without the probe). TLS is verified with an ``ssl.SSLContext``, so the REST client
trusts exactly what the AMQP client trusts (the system's CAs, or the given CA file); a proxy is
reached with the standard library's CONNECT tunnel (``network.http_connection``).
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterator

from reconciler import model
from reconciler.namespace import reach
from reconciler.namespace.connection import ConnectionString
from reconciler.namespace.credentials import JWT_TOKEN_TYPE, Token, TokenProvider, renewal_due, token_provider_for
from reconciler.namespace.credits import MANAGEMENT_CREDITS, wait_hint
from reconciler.namespace.errors import (
    ConnectionLostError,
    ManagementError,
    OperationTimeoutError,
    ServerBusyError,
    UnauthorizedError,
    error_for,
)
from reconciler.namespace.network import DIRECT, Network, http_connection
from reconciler.namespace.pacing import Pacer
from reconciler.namespace.pipeline import Call, Request, RequestPipeline, Response
from reconciler.namespace.retry import RetryPolicy
from reconciler.rest import atom

API_VERSION = "2021-05"
PAGE_SIZE = 100
HTTPS_PORT = 443
HTTP_PORT = 80
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
        network: Network = DIRECT,
        retry: RetryPolicy | None = None,
        pacer: Pacer | None = None,
        page_size: int = PAGE_SIZE,
        clock: Callable[[], float] = time.time,
        base_url: str | None = None,
    ) -> None:
        """``base_url`` overrides where the API is reached (a private endpoint's own name, say);
        https URLs are always verified, against ``network``'s CA file when it has one, and reached
        through its proxy when it has one (either transport: HTTP is what a proxy carries). ``pacer``
        is shared with the namespace's AMQP client when both work for one command."""
        self._conn = (
            connection_string if isinstance(connection_string, ConnectionString)
            else ConnectionString.parse(connection_string)
        )
        self.base_url = (base_url or default_base_url(self._conn)).rstrip("/")
        self._audience = token_audience(self._conn)
        self._tokens = token_provider or token_provider_for(self._conn, auth)
        self._token: Token | None = None
        self._token_due = 0.0  # when the cached token is renewed (credentials.renewal_due)
        self._token_lock = threading.Lock()
        self._clock = clock
        self.page_size = page_size
        tls = network.tls_context() if self.base_url.startswith("https") else None
        self.pipeline = RequestPipeline(
            _HttpTransport(self.base_url, tls, network, self._authorization), retry=retry, pacer=pacer, timeout=timeout
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
            if self._token is None or self._token_due <= self._clock():
                issued = self._clock()
                self._token = self._tokens.get_token(self._audience)
                self._token_due = renewal_due(issued, self._token.expires_at)
            token = self._token
        return f"Bearer {token.value}" if token.token_type == JWT_TOKEN_TYPE else token.value

    def _get(self, path: str, params: dict, what: str) -> bytes:
        """GET through the pipeline (paced, retried); the body on 200, else the error the status stands for."""
        call = Call("/" + path, "GET", {**params, "api-version": API_VERSION}, MANAGEMENT_CREDITS, what=what)
        return self.pipeline.call(call).body


class _HttpTransport:
    """The REST client's transport: each request is one GET, answered on the submitting thread, on a
    kept-alive connection of its own while it runs (the pool lends each to one thread at a time)."""

    def __init__(
        self, base_url: str, tls: ssl.SSLContext | None, network: Network, authorization: Callable[[], str]
    ) -> None:
        url = urllib.parse.urlsplit(base_url)
        self._base_url = base_url
        self._host = url.hostname or ""
        self._port = url.port or (HTTPS_PORT if tls else HTTP_PORT)
        self._proxy = network.proxy_for(self._host)
        self._prefix = url.path
        self._tls = tls
        self._authorization = authorization
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

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
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _get(self, request: Request) -> bytes:
        what = request.context
        try:
            status, reason, headers, body = self._exchange(request)
        except TimeoutError:
            raise OperationTimeoutError(f"{what}: no response in time") from None
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, http.client.BadStatusLine) and not isinstance(exc, http.client.RemoteDisconnected):
                raise reach.not_http(self._base_url, str(exc.args[0] if exc.args else "")) from None  # not HTTP
            proxy, where = self._proxy, reach.host_port(self._host, self._port)
            failure = reach.through_proxy(exc, proxy, where) if proxy else None
            failure = failure or reach.from_os_error(exc, self._host, self._port)
            if failure is not None:
                raise failure from None
            raise ConnectionLostError(f"{what}: {type(exc).__name__}: {exc}") from None
        content_type = headers.get("content-type")
        if "xml" not in (content_type or "") and status not in _STATUS_FROM_ANY_FRONT_END:
            raise reach.not_management_api(self._base_url, status, content_type)
        if status == 200:
            return body
        detail = atom.error_detail(body) or reason or "no description"
        if status in (401, 403):
            raise UnauthorizedError(f"{what}: {detail} (HTTP {status})", status=status, description=detail)
        if status in (429, 503):
            raise ServerBusyError(
                f"{what}: {detail} (HTTP {status})", status=status, description=detail,
                retry_after=_retry_after(headers.get("Retry-After")) or wait_hint(detail),
            )
        raise error_for(status, None, detail, what)

    def _exchange(self, request: Request) -> tuple[int, str, http.client.HTTPMessage, bytes]:
        """One GET: status, reason, headers and body. A kept-alive connection the server has closed
        meanwhile fails at once; the request then goes again on the next one, or a new one."""
        target = f"{self._prefix}{request.entity}?{urllib.parse.urlencode(request.body, safe='$')}"
        headers = {"Accept": "application/atom+xml, application/xml", "Authorization": self._authorization()}
        while True:
            connection, reused = self._connection(request.timeout)
            try:
                if connection.sock is None:
                    self._connect(connection, request.timeout)
                else:
                    connection.sock.settimeout(request.timeout)
                connection.request("GET", target, headers=headers)
                response = connection.getresponse()
                body = response.read()
            except ConnectionError:
                connection.close()
                if reused:
                    continue
                raise
            except BaseException:
                connection.close()
                raise
            if response.will_close:
                connection.close()
            else:
                with self._lock:
                    self._idle.append(connection)
            return response.status, response.reason, response.headers, body

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """An idle kept-alive connection (True), or a new one, not yet connected (False)."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return http_connection(self._host, self._port, tls=self._tls, proxy=self._proxy, timeout=timeout), False

    def _connect(self, connection: http.client.HTTPConnection, timeout: float) -> None:
        """Open the connection (TCP, then TLS): no answer within ``timeout`` is an open timeout."""
        started = time.monotonic()
        try:
            connection.connect()
        except TimeoutError:
            raise reach.open_timeout(
                reach.host_port(self._host, self._port), time.monotonic() - started, "a connection"
            ) from None


def _retry_after(value: Any) -> float | None:
    """An HTTP Retry-After header given in seconds (the date form is not used by the service)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
