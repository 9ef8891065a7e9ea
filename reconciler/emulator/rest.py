"""The emulator's management REST API: what Microsoft's ServiceBusAdministrationClient reads, and
its writes of subscriptions and rules.

Served over HTTPS (and plain HTTP, for sbrules' own emulator connections) on the emulator's one
port; ``frontdoor.py`` hands each HTTP connection here. GET routes (``api-version`` accepted as
given):

- ``/$Resources/topics`` — feed of topics, paged with ``$skip``/``$top``;
- ``/{topic}`` — one topic;
- ``/{topic}/subscriptions`` — feed of subscriptions, paged;
- ``/{topic}/subscriptions/{sub}`` — one subscription (forwarding, sessions, ...);
- ``/{topic}/subscriptions/{sub}/rules`` — feed of rules, paged; ``.../rules/{rule}`` — one rule.

PUT of ``/{topic}/subscriptions/{sub}`` or ``.../rules/{rule}`` with the ATOM entry a client
sends creates the subscription or rule (201, or 409 when it exists); with ``If-Match: *`` it
updates an existing one (200, or 404). DELETE of either removes it. A rule goes through the same
checks as AMQP add-rule (``rule_checks``: name, SQL, the topic's filter quota), every request is
charged as the management operation it is, and with a state file a write is answered once the
file holds it, as AMQP writes are. Topics and queues are not created here (501).

A GET of ``/$servicebus/websocket`` that asks for a WebSocket upgrade is AMQP over WebSockets,
which the front door serves. Every other request needs a SAS token in ``Authorization`` whose key has Manage rights (or, when the
emulator has a development Entra ID signing key, ``Bearer`` and a token signed with it), checked
by the same validator as CBS put-token. Documents come from ``reconciler.rest.atom``.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import socketserver
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Callable, cast

from reconciler import limits
from reconciler.emulator.auth import MANAGE, TokenRejected, TokenValidator
from reconciler.emulator.faults import Faults
from reconciler.emulator.namespace import Namespace, OperationError, Subscription, Topic, utcnow
from reconciler.emulator.rule_checks import check_rule, check_topic_quota
from reconciler.emulator.throttling import CreditMeter
from reconciler.names import name_key, same_name
from reconciler.namespace.connection import WEBSOCKET_PATH
from reconciler.namespace.credentials import JWT_TOKEN_TYPE, SAS_TOKEN_TYPE
from reconciler.rest import atom

if TYPE_CHECKING:
    from reconciler.emulator.durability import GroupCommit
    from reconciler.emulator.frontdoor import FrontDoor

log = logging.getLogger("reconciler.emulator")

DEFAULT_TOP = 100
NOT_WRITABLE = (
    "the sbrules emulator's management API creates, updates and deletes subscriptions and rules only: "
    "topics and queues come from --rules, the state file or the in-process API"
)
#: How long a write waits for the state file to hold it before it is answered as not done.
COMMIT_TIMEOUT_SECONDS = 30.0


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
        #: With a state file: writes are answered once a save holds them.
        self.commit: GroupCommit | None = None

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

    def put(self, base: str, path: str, body: bytes, if_match: str | None) -> tuple[int, bytes]:
        """Create (201) or, with ``If-Match: *``, update (200) the subscription or rule ``path``
        names from the entry a client PUTs; the answer is the entity's entry."""
        if if_match not in (None, "*"):
            raise ApiError(412, "only If-Match: * (update whatever version exists) is supported")
        topic_name, parts = self._resource(path)
        try:
            entry = atom.parse(body)
        except atom.AtomError:
            raise ApiError(400, "the request body is not an ATOM entry") from None
        with self.namespace.lock:
            topic = self._topic(topic_name)
            try:
                if len(parts) == 3:
                    status, text = self._put_subscription(base, topic, parts[2], entry, if_match is not None)
                else:
                    status, text = self._put_rule(base, topic, parts[2], parts[4], entry, if_match is not None)
            except atom.AtomError as exc:
                raise ApiError(400, str(exc)) from None
            except OperationError as exc:
                raise ApiError(exc.status, exc.description) from None
        self._committed()
        return status, self._document(text)

    def delete(self, path: str) -> None:
        """Delete the subscription or rule ``path`` names."""
        topic_name, parts = self._resource(path)
        with self.namespace.lock:
            topic = self._topic(topic_name)
            sub = self._subscription(topic, parts[2])
            try:
                if len(parts) == 3:
                    self.namespace.delete_subscription(topic.name, sub.name)
                else:
                    self.namespace.remove_rule(topic.name, sub.name, parts[4])
            except OperationError as exc:
                raise ApiError(exc.status, exc.description) from None
        self._committed()

    def _put_subscription(self, base: str, topic: Topic, name: str, entry: Any, update: bool) -> tuple[int, str]:
        info = atom.subscription_from_entry(topic.name, entry, name)
        forward_to, dead_letters_to = (_entity_name(t) for t in (info.forward_to, info.forward_dead_lettered_messages_to))
        if not update:
            if name_key(name) in topic.subscriptions:
                raise ApiError(409, f"The messaging entity '{topic.name}/Subscriptions/{name}' already exists.")
            sub = self.namespace.create_subscription(
                topic.name, name, forward_to=forward_to, forward_dead_lettered_messages_to=dead_letters_to,
                requires_session=info.requires_session,
            )
            return 201, self._subscription_entry(base, topic, sub, True)
        if self._subscription(topic, name).requires_session != info.requires_session:
            raise ApiError(400, "RequiresSession cannot be changed on an existing subscription")
        sub = self.namespace.update_subscription(
            topic.name, name, forward_to=forward_to, forward_dead_lettered_messages_to=dead_letters_to
        )
        return 200, self._subscription_entry(base, topic, sub, True)

    def _put_rule(self, base: str, topic: Topic, sub_name: str, name: str, entry: Any, update: bool) -> tuple[int, str]:
        sub = self._subscription(topic, sub_name)
        rule = dataclasses.replace(atom.rule_from_entry(entry), name=name, created_at=None)
        check_rule(rule)
        current = sub.rules.get(name_key(name))
        if update:
            kind_changes = current is not None and limits.counts_as_sql_filter(current.rule.filter) is not (
                limits.counts_as_sql_filter(rule.filter))
            if kind_changes:
                check_topic_quota(self.namespace, topic.name, rule.filter)
            self.namespace.update_rule(topic.name, sub.name, rule)
        else:
            check_topic_quota(self.namespace, topic.name, rule.filter)
            self.namespace.add_rule(topic.name, sub.name, rule)
        return 200 if update else 201, self._rule_entry(base, sub, sub.rules[name_key(name)], True)

    def _resource(self, path: str) -> tuple[str, list[str]]:
        """The topic and the rest of a path a client may write: a subscription or a rule."""
        parts = [p for p in urllib.parse.unquote(path).strip("/").split("/") if p]
        topic_name, rest = _split_topic(parts) if parts else ("", [""])
        if len(rest) == 3 and same_name(rest[1], "subscriptions"):
            return topic_name, rest
        if len(rest) == 5 and same_name(rest[1], "subscriptions") and same_name(rest[3], "rules"):
            return topic_name, rest
        raise ApiError(501, NOT_WRITABLE)

    def _committed(self) -> None:
        """Return once the state file holds every change so far (at once without a state file)."""
        if self.commit is None:
            return
        done = threading.Event()
        self.commit.after_commit(done.set)
        if not done.wait(COMMIT_TIMEOUT_SECONDS):
            raise ApiError(503, "ServerBusy: the change is made but the emulator's state file does not hold it yet")

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


def _entity_name(target: str | None) -> str | None:
    """A forwarding target as the emulator keeps it: the entity's name (clients may send its URL)."""
    if target is None or "://" not in target:
        return target
    return urllib.parse.urlsplit(target).path.strip("/") or None


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
        if url.path == WEBSOCKET_PATH:  # AMQP over WebSockets: the front door takes the connection over
            cast("FrontDoor", self.server).serve_websocket(self)
            return
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        self._serve(lambda base, path: (200, self.api.get(base, path, query), atom.FEED_CONTENT_TYPE))

    def do_PUT(self) -> None:
        body = self._body()
        if_match = self.headers.get("If-Match")
        self._serve(lambda base, path: (*self.api.put(base, path, body, if_match), atom.XML_CONTENT_TYPE))

    def do_DELETE(self) -> None:
        self._body()

        def answer(base: str, path: str) -> tuple[int, bytes, str]:
            self.api.delete(path)
            return 200, b"", atom.XML_CONTENT_TYPE

        self._serve(answer)

    def _refuse(self) -> None:
        self._body()
        self._send(501, atom.error(501, NOT_WRITABLE).encode("utf-8"), "application/xml; charset=utf-8")

    do_POST = do_PATCH = _refuse

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self, answer: Callable[[str, str], tuple[int, bytes, str]]) -> None:
        """Authorize, charge and answer one request (``answer(base URL, path)``), errors as ATOM errors."""
        path = urllib.parse.urlsplit(self.path).path.strip("/")
        base = f"{self.scheme}://{self.headers.get('Host', 'localhost')}"
        latency = self.api.faults.latency if self.api.faults is not None else 0.0
        if latency > 0:  # the injected round trip, on this connection's own thread
            time.sleep(latency)
        try:
            self.api.authorize(self.headers.get("Authorization"), path)
            self.api.admit()
            status, body, content_type = answer(base, path)
        except ApiError as exc:
            self._send(exc.status, atom.error(exc.status, exc.detail).encode("utf-8"), "application/xml; charset=utf-8")
            return
        except Exception:  # one bad request must not take the server down
            log.exception("management API: %s %s failed", self.command, self.path)
            self._send(500, atom.error(500, "internal error in the emulator").encode("utf-8"), "application/xml")
            return
        self._send(status, body, content_type)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def handler_class(api: ManagementApi, scheme: str) -> type[socketserver.BaseRequestHandler]:
    """A request handler class bound to ``api``, for connections of ``scheme`` (https or http)."""
    return type("ManagementRequestHandler", (_Handler,), {"api": api, "scheme": scheme})
