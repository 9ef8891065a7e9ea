"""The `$management` node: every operation of docs/protocol.md, request map in, response out.

Pure request → response functions over the namespace and broker; the AMQP server only moves
messages. Responses carry ``statusCode`` (int), ``statusDescription`` and, on errors,
``errorCondition`` (symbol) exactly as the service does; bodies are maps with string keys.
Anything unexpected in a request (wrong body type, missing or mistyped field, oversize value)
becomes a 400 with a description naming the field, never an exception in the loop.
"""

from __future__ import annotations

import datetime as _dt
import functools
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import proton
from proton import Array, Data, symbol

from reconciler import limits, model
from reconciler.amqp import codec
from reconciler.amqp.wire import sections
from reconciler.emulator.broker import Broker
from reconciler.emulator.faults import Faults
from reconciler.emulator.namespace import (
    Address,
    MessageStore,
    Namespace,
    OperationError,
    Subscription,
    bad_request,
)
from reconciler.emulator.rule_checks import check_rule, check_topic_quota

OPERATION_PREFIX = "com.microsoft:"
MAX_PAGE = 2**31 - 1
#: The most messages one peek returns, whatever it asks for.
MAX_PEEK = 10000
#: Descriptions quote request values; keep responses small however large the request was.
MAX_DESCRIPTION = 1024


@dataclass
class Response:
    status: int
    body: Any = None
    description: str = ""
    condition: str | None = None
    #: the body as an already encoded amqp-value section (used instead of ``body`` when set)
    encoded_body: bytes | None = None

    @classmethod
    def error(cls, exc: OperationError) -> "Response":
        return cls(exc.status, None, exc.description, exc.condition)

    def application_properties(self) -> dict[str, Any]:
        description = self.description or _REASONS.get(self.status, "")
        if len(description) > MAX_DESCRIPTION:
            description = description[: MAX_DESCRIPTION - 1] + "…"
        props: dict[str, Any] = {
            "statusCode": proton.int32(self.status),
            "statusDescription": description,
        }
        if self.condition:
            props["errorCondition"] = symbol(self.condition)
        return props


_REASONS = {200: "OK", 202: "Accepted", 204: "No Content"}


# ------------------------------------------------------------------------------------------------
# request field readers
# ------------------------------------------------------------------------------------------------


def _get(body: Mapping[Any, Any], key: str, required: bool = True) -> Any:
    if key in body:
        return body[key]
    if required:
        raise bad_request(f"request body lacks '{key}'")
    return None


def _int(body: Mapping[Any, Any], key: str, default: int | None = None) -> int:
    """The integer ``key`` holds; required unless there is a ``default``."""
    value = _get(body, key, required=default is None)
    if value is None:
        if default is None:
            raise bad_request(f"'{key}' must not be null")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{key}' must be an integer, got {type(value).__name__}")
    return int(value)


def _str(body: Mapping[Any, Any], key: str, limit: int = 4096) -> str:
    """The string ``key`` holds (required)."""
    value = _optional_str(body, key, limit)
    if value is None:
        raise bad_request(f"request body lacks '{key}'" if key not in body else f"'{key}' must not be null")
    return value


def _optional_str(body: Mapping[Any, Any], key: str, limit: int = 4096) -> str | None:
    value = _get(body, key, required=False)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"'{key}' must be a string, got {type(value).__name__}")
    if limits.dotnet_length(value) > limit:
        raise bad_request(f"'{key}' is longer than {limit} characters (UTF-16 code units)")
    return str(value)


def _elements(body: Mapping[Any, Any], key: str) -> list[Any]:
    value = _get(body, key)
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, (list, tuple)):
        return list(value)
    raise bad_request(f"'{key}' must be an array, got {type(value).__name__}")


def _uuids(body: Mapping[Any, Any], key: str) -> list[uuid.UUID]:
    out = []
    for item in _elements(body, key):
        if isinstance(item, uuid.UUID):
            out.append(item)
        elif isinstance(item, (bytes, memoryview)) and len(bytes(item)) == 16:
            out.append(uuid.UUID(bytes_le=bytes(item)))
        else:
            raise bad_request(f"'{key}' must hold lock tokens (uuid), got {type(item).__name__}")
    return out


def _longs(body: Mapping[Any, Any], key: str) -> list[int]:
    out = []
    for item in _elements(body, key):
        if isinstance(item, bool) or not isinstance(item, int):
            raise bad_request(f"'{key}' must hold sequence numbers (long), got {type(item).__name__}")
        out.append(int(item))
    return out


def _binary(value: Any, key: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise bad_request(f"'{key}' must be binary, got {type(value).__name__}")


def _array(kind: int, values: list[Any]) -> Array:
    return Array(proton.UNDESCRIBED, kind, *values)


def _refuse_browsing(sub: Subscription) -> None:
    """The service cannot browse (peek, enumerate rules of) an auto-forwarding subscription."""
    if sub.forward_to:
        raise OperationError(
            400, "amqp:not-allowed", "Cannot create a message browser on an entity with auto-forwarding enabled."
        )


# ------------------------------------------------------------------------------------------------
# the node
# ------------------------------------------------------------------------------------------------


class ManagementNode:
    """Answers `$management` requests for any entity of one namespace."""

    def __init__(self, namespace: Namespace, broker: Broker, faults: Faults | None = None) -> None:
        self.namespace = namespace
        self.broker = broker
        self.faults = faults
        self._ops: dict[str, Callable[[Address, Mapping[Any, Any]], Response]] = {
            "enumerate-rules": self.enumerate_rules,
            "add-rule": self.add_rule,
            "remove-rule": self.remove_rule,
            "peek-message": self.peek_message,
            "renew-lock": self.renew_lock,
            "schedule-message": self.schedule_message,
            "cancel-scheduled-message": self.cancel_scheduled_message,
            "renew-session-lock": self.renew_session_lock,
            "set-session-state": self.set_session_state,
            "get-session-state": self.get_session_state,
            "get-message-sessions": self.get_message_sessions,
            "receive-by-sequence-number": self.receive_by_sequence_number,
            "update-disposition": self.update_disposition,
            "batch-delete-messages": self.batch_delete_messages,
        }

    def handle(self, address: Address, operation: Any, body: Any) -> Response:
        """One request → one response; never raises."""
        try:
            if not isinstance(operation, str):
                raise bad_request("the request has no 'operation' application property")
            name = operation[len(OPERATION_PREFIX):] if operation.startswith(OPERATION_PREFIX) else None
            handler = self._ops.get(name) if name else None
            if handler is None:
                return Response(501, None, f"operation {operation[:200]!r} is not supported", "amqp:not-implemented")
            if not isinstance(body, Mapping):
                raise bad_request(f"the request body must be a map, got {type(body).__name__}")
            return handler(address, body)
        except OperationError as exc:
            return Response.error(exc)
        except codec.CodecError as exc:
            return Response(400, None, str(exc), "com.microsoft:argument-error")
        except (TypeError, ValueError, OverflowError, model.TypedValueError) as exc:
            return Response(400, None, f"malformed request: {exc}", "com.microsoft:argument-error")

    # -- helpers -----------------------------------------------------------------------------
    def _subscription(self, address: Address) -> Subscription:
        if address.subscription is None or address.dead_letter:
            raise OperationError(
                400, "amqp:not-allowed", f"rules exist only on subscriptions, not on '{address.entity_path}'"
            )
        return self.namespace.subscription(address.topic or "", address.subscription)

    def _store(self, address: Address) -> MessageStore:
        return self.namespace.store(address)

    # -- rules -------------------------------------------------------------------------------
    def enumerate_rules(self, address: Address, body: Mapping[Any, Any]) -> Response:
        top = _int(body, "top")
        skip = _int(body, "skip")
        if top < 0 or skip < 0:
            raise bad_request("'top' and 'skip' must not be negative")
        sub = self._subscription(address)
        _refuse_browsing(sub)
        with self.namespace.lock:
            entries = list(sub.rules.values())[skip: skip + top]
        if not entries:
            return Response(204, None, "No Content")
        return Response(200, encoded_body=_rules_page(tuple((e.rule, e.created_at) for e in entries)))

    def add_rule(self, address: Address, body: Mapping[Any, Any]) -> Response:
        rule = codec.decode_add_rule_body(body)
        check_rule(rule)
        sub = self._subscription(address)
        with self.namespace.lock:
            check_topic_quota(self.namespace, address.topic or "", rule.filter)
            self.namespace.add_rule(address.topic or "", sub.name, rule)
        return Response(200)

    def remove_rule(self, address: Address, body: Mapping[Any, Any]) -> Response:
        name = _str(body, "rule-name", limit=1024)
        sub = self._subscription(address)
        self.namespace.remove_rule(address.topic or "", sub.name, name)
        return Response(200)

    # -- messages ------------------------------------------------------------------------------
    def peek_message(self, address: Address, body: Mapping[Any, Any]) -> Response:
        start = _int(body, "from-sequence-number")
        count = _int(body, "message-count")
        session_id = _optional_str(body, "session-id")
        if count <= 0:
            raise bad_request("'message-count' must be positive")
        if address.subscription is not None and not address.dead_letter:
            _refuse_browsing(self._subscription(address))
        store = self._store(address)
        limit = self.faults.peek_limit if self.faults is not None and self.faults.peek_limit else MAX_PEEK
        if store.partitions > 1:
            limit = 1  # a partitioned entity answers a peek with one message, whatever was asked
        payloads = self.broker.peek(store, start, min(count, limit), session_id)
        if not payloads:
            return Response(204, None, "No Content")
        return Response(200, {"messages": [{"message": p} for p in payloads]})

    def renew_lock(self, address: Address, body: Mapping[Any, Any]) -> Response:
        expirations = self.broker.renew_lock(self._store(address), _uuids(body, "lock-tokens"))
        stamps = [codec.datetime_to_timestamp(t) for t in expirations]
        return Response(200, {"expirations": _array(Data.TIMESTAMP, stamps)})

    def schedule_message(self, address: Address, body: Mapping[Any, Any]) -> Response:
        payloads = []
        entries = _get(body, "messages")
        if not isinstance(entries, (list, tuple)):
            raise bad_request("'messages' must be a list of maps")
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise bad_request("each scheduled message must be a map")
            payload = _binary(_get(entry, "message"), "message")
            if payload is None:
                raise bad_request("'message' must not be null")
            payloads.append(payload)
        numbers = self.broker.schedule(address, payloads)
        return Response(200, {"sequence-numbers": _array(Data.LONG, numbers)})

    def cancel_scheduled_message(self, address: Address, body: Mapping[Any, Any]) -> Response:
        self.broker.cancel_scheduled(address, _longs(body, "sequence-numbers"))
        return Response(200)

    def receive_by_sequence_number(self, address: Address, body: Mapping[Any, Any]) -> Response:
        numbers = _longs(body, "sequence-numbers")
        mode = _int(body, "receiver-settle-mode", default=1)
        session_id = _optional_str(body, "session-id")
        found = self.broker.receive_by_sequence(self._store(address), numbers, mode != 0, session_id)
        messages = []
        for payload, token in found:
            entry: dict[str, Any] = {"message": payload}
            if token is not None:
                entry["lock-token"] = token
            messages.append(entry)
        return Response(200, {"messages": messages})

    def update_disposition(self, address: Address, body: Mapping[Any, Any]) -> Response:
        tokens = _uuids(body, "lock-tokens")
        status = _str(body, "disposition-status")
        reason = _optional_str(body, "deadletter-reason")
        description = _optional_str(body, "deadletter-description")
        modify = _get(body, "properties-to-modify", required=False)
        if modify is not None and not isinstance(modify, Mapping):
            raise bad_request("'properties-to-modify' must be a map")
        properties = {str(k): v for k, v in (modify or {}).items()}
        self.broker.update_disposition(self._store(address), tokens, status, reason, description, properties)
        return Response(200)

    def batch_delete_messages(self, address: Address, body: Mapping[Any, Any]) -> Response:
        count = _int(body, "message-count")
        before = _get(body, "enqueued-time-utc")
        if not isinstance(before, (int, _dt.datetime)) or isinstance(before, bool):
            raise bad_request("'enqueued-time-utc' must be a timestamp")
        if count <= 0:
            raise bad_request("'message-count' must be positive")
        cutoff = before if isinstance(before, _dt.datetime) else codec.timestamp_to_datetime(int(before))
        deleted = self.broker.delete_messages(
            self._store(address), count, cutoff, _optional_str(body, "session-id")
        )
        if not deleted:
            return Response(204, None, "No Content", "com.microsoft:message-not-found")
        return Response(200, {"message-count": proton.int32(deleted)})

    # -- sessions ------------------------------------------------------------------------------
    def renew_session_lock(self, address: Address, body: Mapping[Any, Any]) -> Response:
        until = self.broker.renew_session_lock(self._store(address), _str(body, "session-id", limit=limits.SESSION_ID.value))
        return Response(200, {"expiration": codec.datetime_to_timestamp(until)})

    def set_session_state(self, address: Address, body: Mapping[Any, Any]) -> Response:
        session_id = _str(body, "session-id", limit=limits.SESSION_ID.value)
        state = _binary(_get(body, "session-state", required=False), "session-state")
        self.broker.set_session_state(self._store(address), session_id, state)
        return Response(200)

    def get_session_state(self, address: Address, body: Mapping[Any, Any]) -> Response:
        state = self.broker.get_session_state(self._store(address), _str(body, "session-id", limit=limits.SESSION_ID.value))
        return Response(200, {"session-state": state})

    def get_message_sessions(self, address: Address, body: Mapping[Any, Any]) -> Response:
        skip = _int(body, "skip", default=0)
        top = _int(body, "top", default=MAX_PAGE)
        updated = _get(body, "last-updated-time", required=False)
        if updated is not None and not isinstance(updated, (int, _dt.datetime)):
            raise bad_request("'last-updated-time' must be a timestamp")
        if skip < 0 or top < 0:
            raise bad_request("'top' and 'skip' must not be negative")
        ids = self.broker.list_sessions(self._store(address), skip, top)
        if not ids:
            return Response(204, None, "No Content", "com.microsoft:session-not-found")
        return Response(200, {"skip": proton.int32(skip + len(ids)), "sessions-ids": _array(Data.STRING, ids)})


@functools.lru_cache(maxsize=4096)
def _rules_page(entries: tuple[tuple[model.Rule, Any], ...]) -> bytes:
    """An enumerate-rules page, encoded once per distinct content (rules change rarely, reads repeat)."""
    return sections.encode_value_section(codec.encode_enumerate_rules_body(list(entries)))
