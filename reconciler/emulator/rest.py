"""The emulator's management REST API: the reads Microsoft's ServiceBusAdministrationClient makes.

Served over HTTPS (and plain HTTP, for sbrules' own emulator connections) on the emulator's one
port; ``frontdoor.py`` hands each HTTP connection here. Routes (all GET, ``api-version`` accepted
as given):

- ``/$Resources/topics`` — feed of topics, paged with ``$skip``/``$top``;
- ``/{topic}`` — one topic;
- ``/{topic}/subscriptions`` — feed of subscriptions, paged;
- ``/{topic}/subscriptions/{sub}`` — one subscription (forwarding, sessions, ...);
- ``/{topic}/subscriptions/{sub}/rules`` — feed of rules, paged; ``.../rules/{rule}`` — one rule.

A GET of ``/$servicebus/websocket`` that asks for a WebSocket upgrade is AMQP over WebSockets,
which the front door serves. Every other request needs a SAS token in ``Authorization`` whose key has Manage rights (or, when the
emulator has a development Entra ID signing key, ``Bearer`` and a token signed with it), checked
by the same validator as CBS put-token; other methods answer 501 (the emulator's entities come from rule
files, the state file or the in-process API). Documents come from ``reconciler.rest.atom``.
"""

from __future__ import annotations

import io
import logging
import socketserver
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Callable, cast

from reconciler.emulator.auth import MANAGE, TokenRejected, TokenValidator
from reconciler.emulator.faults import Faults
from reconciler.emulator.namespace import Namespace, OperationError, Subscription, Topic, utcnow
from reconciler.emulator.throttling import CreditMeter
from reconciler.names import name_key, same_name
from reconciler.namespace.connection import WEBSOCKET_PATH
from reconciler.namespace.credentials import JWT_TOKEN_TYPE, SAS_TOKEN_TYPE
from reconciler.rest import atom

if TYPE_CHECKING:
    from reconciler.emulator.frontdoor import FrontDoor

log = logging.getLogger("reconciler.emulator")

DEFAULT_TOP = 100
READ_ONLY = (
    "the sbrules emulator serves the management API read-only: its entities come from --rules, the state "
    "file or the in-process API, and rules are changed over AMQP (add-rule/remove-rule)"
)


class ApiError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class ManagementApi:
    """Request path → ATOM document over one namespace; pure, so it is easy to test and reason about."""

    def __init__(
        self, namespace: Namespace, validator: TokenValidator, meter: CreditMeter | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.namespace = namespace
        self.validator = validator
        self.meter = meter
        self.faults = faults
        self.started = utcnow()

    def admit(self) -> None:
        """Charge a read of the namespace's entities as the management operation it is, or refuse
        it as throttled when the namespace's credits are spent."""
        if self.meter is None:
            return
        if not self.meter.admit():
            raise ApiError(503, self.meter.refusal())
        self.meter.charge(self.meter.costs.management)

    def authorize(self, header: str | None, path: str) -> None:
        """Refuse a request without a valid SAS token of a key with Manage rights for ``path``."""
        if not header:
            raise ApiError(401, "MissingToken: the request to the management API needs an Authorization header")
        bearer = header.startswith("Bearer ")
        try:
            if bearer:
                grant = self.validator.validate(header.removeprefix("Bearer "), JWT_TOKEN_TYPE, None)
            else:
                grant = self.validator.validate(header, SAS_TOKEN_TYPE, None)
        except TokenRejected as exc:
            raise ApiError(401, f"InvalidSignature: {exc}") from None
        if not grant.covers(path):
            raise ApiError(401, "the token's audience does not cover this entity")
        if MANAGE not in grant.rights:
            raise ApiError(401, "Manage,EntityRead claims required for this operation")

    def get(self, base: str, path: str, query: dict[str, str]) -> bytes:
        """The document for GET ``path``; raises ApiError (404, 400, 501) otherwise."""
        parts = [p for p in urllib.parse.unquote(path).strip("/").split("/") if p]
        if parts == ["$namespaceinfo"]:
            return self._document(self._namespace_entry(base))
        with self.namespace.lock:
            if len(parts) == 2 and parts[0] == "$Resources":
                if not same_name(parts[1], "topics"):
                    raise ApiError(501, f"listing {parts[1]} is not emulated (only topics)")
                topics = sorted(self.namespace.topics.values(), key=lambda t: name_key(t.name))
                return self._feed(base, path, query, "Topics", topics, lambda t: self._topic_entry(base, t, False))
            if not parts:
                raise ApiError(404, f"no management resource at '/{path}'")
            topic_name, parts = _split_topic(parts)
            topic = self._topic(topic_name)
            if len(parts) == 1:
                return self._document(self._topic_entry(base, topic, True))
            if not same_name(parts[1], "subscriptions"):
                raise ApiError(404, f"no management resource at '/{path}'")
            if len(parts) == 2:
                subs = sorted(topic.subscriptions.values(), key=lambda s: name_key(s.name))
                return self._feed(base, path, query, "Subscriptions", subs,
                                  lambda s: self._subscription_entry(base, topic, s, False))
            sub = self._subscription(topic, parts[2])
            if len(parts) == 3:
                return self._document(self._subscription_entry(base, topic, sub, True))
            if not same_name(parts[3], "rules"):
                raise ApiError(404, f"no management resource at '/{path}'")
            entries = list(sub.rules.values())
            if len(parts) == 4:
                return self._feed(base, path, query, "Rules", entries,
                                  lambda e: self._rule_entry(base, sub, e, False))
            for entry in entries:
                if same_name(entry.rule.name, parts[4]):
                    return self._document(self._rule_entry(base, sub, entry, True))
            raise ApiError(404, f"The messaging entity '{sub.path}|{parts[4]}' could not be found.")

    # -- helpers ---------------------------------------------------------------------------------
    def _topic(self, name: str) -> Topic:
        if name_key(name) in self.namespace.queues:
            raise ApiError(501, f"'{name}' is a queue; queues are not served by the emulator's management API")
        try:
            return self.namespace.topic(name)
        except OperationError as exc:
            raise ApiError(404, exc.description) from None

    @staticmethod
    def _subscription(topic: Topic, name: str) -> Subscription:
        sub = topic.subscriptions.get(name_key(name))
        if sub is None:
            raise ApiError(404, f"The messaging entity '{topic.name}/Subscriptions/{name}' could not be found.")
        return sub

    @staticmethod
    def _document(text: str) -> bytes:
        return ('<?xml version="1.0" encoding="utf-8"?>' + text).encode("utf-8")

    def _feed(self, base: str, path: str, query: dict[str, str], title: str, items: list,
              render: Callable[[Any], str]) -> bytes:
        try:
            skip = int(query.get("$skip", 0))
            top = int(query.get("$top", DEFAULT_TOP))
        except ValueError:
            raise ApiError(400, "$skip and $top must be integers") from None
        if skip < 0 or top < 1:
            raise ApiError(400, "$skip must be >= 0 and $top >= 1")
        version = query.get("api-version", "")
        link = f"{base}/{path.strip('/')}?$skip={{}}&$top={top}&api-version={urllib.parse.quote(version)}"
        chosen = items[skip: skip + top]
        next_href = link.format(skip + top) if skip + top < len(items) else None
        return atom.feed(link.format(skip), title, [render(i) for i in chosen], utcnow(), next_href).encode("utf-8")

    def _namespace_entry(self, base: str) -> str:
        """A namespace with credit throttling is a Standard one; without, it has no credits, as Premium."""
        sku = "Standard" if self.meter is not None and self.meter.on else "Premium"
        name = urllib.parse.urlsplit(base).hostname or "localhost"
        description = atom.namespace_description(name, sku, self.started)
        return atom.entry(base, "$namespaceinfo", name, description, self.started, standalone=True)

    def _topic_entry(self, base: str, topic: Topic, standalone: bool) -> str:
        description = atom.topic_description(len(topic.subscriptions), topic.created_at)
        return atom.entry(base, topic.name, topic.name, description, topic.created_at, standalone=standalone)

    def _subscription_entry(self, base: str, topic: Topic, sub: Subscription, standalone: bool) -> str:
        info = atom.SubscriptionInfo(
            topic.name, sub.name, forward_to=sub.forward_to,
            forward_dead_lettered_messages_to=sub.forward_dead_lettered_messages_to,
            requires_session=sub.requires_session,
        )
        description = atom.subscription_description(info, sub.created_at, len(sub.store.messages))
        return atom.entry(base, f"{topic.name}/subscriptions/{sub.name}", sub.name, description, sub.created_at,
                          standalone=standalone)

    def _rule_entry(self, base: str, sub: Subscription, entry, standalone: bool) -> str:
        description = atom.rule_description(entry.rule, entry.created_at)
        return atom.entry(base, f"{sub.path}/rules/{entry.rule.name}", entry.rule.name, description,
                          entry.created_at, standalone=standalone)


def _split_topic(parts: list[str]) -> tuple[str, list[str]]:
    """A path's topic (its name may have ``/`` segments, as the service's may) and the rest, the
    rest starting with a stand-in for the topic: ``a/b/subscriptions/s`` → ``a/b``, ``[_, subscriptions, s]``.
    The topic ends before the first ``subscriptions`` segment that leaves a resource shape after it."""
    for index in range(1, len(parts)):
        rest = parts[index:]
        if same_name(rest[0], "subscriptions") and (len(rest) <= 2 or (len(rest) <= 4 and same_name(rest[2], "rules"))):
            return "/".join(parts[:index]), ["", *rest]
    return "/".join(parts), [""]


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; every answer has a Content-Length."""

    protocol_version = "HTTP/1.1"
    server_version = "sbrules-emulator"
    api: ManagementApi
    scheme: str

    def log_message(self, format: str, *args: object) -> None:  # `format` is the base class's parameter name
        log.debug("management API: " + format, *args)

    def handle_one_request(self) -> None:
        """Wait for a request as long as a keep-alive connection may idle, then give its line and
        headers the front door's ``header_deadline``: a client that trickles them is cut, not waited for."""
        door = cast("FrontDoor", self.server)
        door.headers_by(self.connection, None)
        if not cast(io.BufferedReader, self.rfile).peek(1):
            self.close_connection = True
            return
        door.headers_by(self.connection, time.monotonic() + door.header_deadline)
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        cast("FrontDoor", self.server).headers_by(self.connection, None)
        return ok

    def do_GET(self) -> None:  # http.server's naming
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.strip("/")
        if url.path == WEBSOCKET_PATH:  # AMQP over WebSockets: the front door takes the connection over
            cast("FrontDoor", self.server).serve_websocket(self)
            return
        base = f"{self.scheme}://{self.headers.get('Host', 'localhost')}"
        latency = self.api.faults.latency if self.api.faults is not None else 0.0
        if latency > 0:  # the injected round trip, on this connection's own thread
            time.sleep(latency)
        try:
            self.api.authorize(self.headers.get("Authorization"), path.split("?")[0])
            self.api.admit()
            body = self.api.get(base, path, query)
        except ApiError as exc:
            self._send(exc.status, atom.error(exc.status, exc.detail).encode("utf-8"), "application/xml; charset=utf-8")
            return
        except Exception:  # one bad request must not take the server down
            log.exception("management API: GET %s failed", self.path)
            self._send(500, atom.error(500, "internal error in the emulator").encode("utf-8"), "application/xml")
            return
        self._send(200, body, atom.FEED_CONTENT_TYPE)

    def _refuse_write(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._send(501, atom.error(501, READ_ONLY).encode("utf-8"), "application/xml; charset=utf-8")

    do_PUT = do_DELETE = do_POST = do_PATCH = _refuse_write

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def handler_class(api: ManagementApi, scheme: str) -> type[socketserver.BaseRequestHandler]:
    """A request handler class bound to ``api``, for connections of ``scheme`` (https or http)."""
    return type("ManagementRequestHandler", (_Handler,), {"api": api, "scheme": scheme})
