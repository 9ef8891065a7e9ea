"""The Service Bus `$management` client: typed operations over one pipelined AMQP connection.

Every method is safe to call from many threads at once; requests share one connection and one
link pair per entity, with at most ``window`` in flight. ``request_all`` (and ``list_rules_many``)
pipeline a whole batch from the calling thread alone, which costs far less than a thread per
request. Transient failures (server busy,
timeouts, internal errors, dropped connections) are retried with capped exponential backoff and
full jitter, reconnecting and re-authenticating as needed; other errors surface at once.
Request and response shapes follow docs/protocol.md §1-§9 (keys and AMQP types exactly).
"""

from __future__ import annotations

import datetime as _dt
import enum
import logging
import heapq
import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from proton import UNDESCRIBED, Array, Data, int32, uint

from reconciler import model
from reconciler.amqp import codec
from reconciler.amqp.connection import ConnectionString
from reconciler.amqp.engine import Engine, Request, Response
from reconciler.amqp.errors import (
    AlreadyExistsError,
    ManagementError,
    NotFoundError,
    OperationTimeoutError,
    error_for,
)
from reconciler.amqp.messages import decode_model_message, encode_model_message
from reconciler.amqp.retry import RetryPolicy
from reconciler.amqp.sas import TokenProvider, token_provider_for

log = logging.getLogger("reconciler.amqp")

#: One management call of a batch: (entity path, operation, request body).
Call = tuple[str, str, Mapping[str, Any]]

OP_PREFIX = "com.microsoft:"
RULES_PAGE_SIZE = 100
ENUMERATE_RULES = OP_PREFIX + "enumerate-rules"
#: NET2 treats these as "nothing there" for reads rather than failures.
_EMPTY_CONDITIONS = {"com.microsoft:message-not-found", "com.microsoft:session-not-found"}


def entity_path(topic: str, subscription: str | None = None) -> str:
    """``topic`` (or a queue) alone, or ``<topic>/Subscriptions/<subscription>``."""
    return f"{topic}/Subscriptions/{subscription}" if subscription else topic


class Disposition(str, enum.Enum):
    """update-disposition statuses; "defered" is the wire spelling (one r) the SDKs send."""

    COMPLETED = "completed"
    DEFERRED = "defered"
    SUSPENDED = "suspended"
    ABANDONED = "abandoned"


class SettleMode(enum.IntEnum):
    """receiver-settle-mode for receive-by-sequence-number (sent as uint)."""

    RECEIVE_AND_DELETE = 0
    PEEK_LOCK = 1


@dataclass(frozen=True)
class PeekedMessage:
    """A message read by peek or receive-by-sequence-number."""

    sequence_number: int
    enqueued_time: _dt.datetime | None
    message: model.Message
    body_size: int
    annotations: Mapping[str, Any]
    lock_token: uuid.UUID | None = None


@dataclass(frozen=True)
class ScheduledMessage:
    """A message to schedule: the model message plus when it should be enqueued."""

    message: model.Message
    enqueue_time: _dt.datetime
    partition_key: str | None = None
    via_partition_key: str | None = None


def _context(entity: str, operation: str) -> str:
    return f"{operation.removeprefix(OP_PREFIX)} on {entity}"


def _long_array(values: Iterable[int]) -> Array:
    return Array(UNDESCRIBED, Data.LONG, *[int(v) for v in values])


def _uuid_array(values: Iterable[uuid.UUID]) -> Array:
    return Array(UNDESCRIBED, Data.UUID, *[uuid.UUID(str(v)) for v in values])


def _elements(value: Any, what: str) -> list[Any]:
    """An AMQP array or list as a Python list."""
    if value is None:
        return []
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, list):
        return value
    raise codec.CodecError(f"{what} is {type(value).__name__}, expected an array")


def _body_map(response: Response, what: str) -> Mapping[str, Any]:
    if not isinstance(response.body, Mapping):
        raise codec.CodecError(f"{what} response body is {type(response.body).__name__}, expected a map")
    return response.body


class _Completions:
    """Finished requests of one batch, handed from the event loop to the thread running the batch.

    The loop wakes that thread once ``wanted`` responses are in, not at every response: waking it
    per response made the two threads trade the GIL at each one, a tenth of a batch's time. The
    wait for more than one is short (``GRACE``), so a batch with stragglers is not held up.
    """

    GRACE = 0.005

    def __init__(self) -> None:
        self._items: deque[tuple[int, Request]] = deque()
        self._enough = threading.Event()
        self._wanted = 1

    def add(self, index: int, request: Request) -> None:
        """Loop thread: one call has finished."""
        self._items.append((index, request))
        if len(self._items) >= self._wanted and not self._enough.is_set():
            self._enough.set()

    def take(self, wanted: int, timeout: float) -> list[tuple[int, Request]]:
        """Every finished call, once ``wanted`` are in (or one, after ``GRACE``); [] after ``timeout``."""
        if wanted > 1:
            self._wanted = wanted
            self._enough.clear()
            if len(self._items) >= wanted or self._enough.wait(min(timeout, self.GRACE)):
                return self._drain()
            timeout = max(0.0, timeout - self.GRACE)
        self._wanted = 1
        self._enough.clear()
        if not self._items:
            self._enough.wait(timeout)
        return self._drain()

    def _drain(self) -> list[tuple[int, Request]]:
        items = []
        while self._items:
            items.append(self._items.popleft())
        return items


class ManagementClient:
    """Typed `$management` operations for one namespace (use as a context manager)."""

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
        auth: str = "sas",
        token_provider: TokenProvider | None = None,
        ca_file: str | None = None,
        refresh_margin: float | None = None,
    ) -> None:
        self._conn = (
            connection_string if isinstance(connection_string, ConnectionString)
            else ConnectionString.parse(connection_string)
        )
        transport = self._conn.transport()
        tokens = token_provider or token_provider_for(self._conn, auth)
        self.timeout = timeout
        self.retry = RetryPolicy(retries, backoff, max_backoff)
        self._window_size = window
        self._window = threading.BoundedSemaphore(window)
        self._interval = 1.0 / max_rate if max_rate else 0.0
        self._rate_lock = threading.Lock()
        self._next_slot = 0.0
        extra = {"refresh_margin": refresh_margin} if refresh_margin is not None else {}
        self._engine = Engine(self._conn, transport, tokens, ca_file=ca_file, link_timeout=timeout, **extra)

    def __repr__(self) -> str:
        return f"ManagementClient({self._conn!s})"

    def __enter__(self) -> "ManagementClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._engine.close()

    # -- request/response ----------------------------------------------------------------------
    def request(
        self,
        entity: str,
        operation: str,
        body: Mapping[str, Any],
        *,
        ok: Iterable[int] = (200,),
        timeout: float | None = None,
        empty_ok: bool = False,
    ) -> Response:
        """Send one request with retries; return the response when its status is in ``ok``.

        ``empty_ok`` turns 204 and 404 message/session-not-found into an empty response.
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._attempt(entity, operation, body, tuple(ok), timeout or self.timeout, empty_ok)
            except ManagementError as exc:
                if not self.retry.retryable(exc, attempt):
                    exc.after_retry = attempt > 1
                    raise
                delay = self.retry.delay(attempt)
                log.info("%s on %s failed (%s); retry %d in %.2fs", operation, entity, type(exc).__name__, attempt, delay)
                time.sleep(delay)

    def request_all(
        self,
        calls: Sequence[Call],
        *,
        ok: Iterable[int] = (200,),
        empty_ok: bool = False,
        window: int | None = None,
        timeout: float | None = None,
    ) -> list[Response | ManagementError]:
        """Pipeline ``calls`` from this thread, at most ``window`` in flight; one result per call, in order.

        Each call is retried like ``request``; a call that fails for good yields its error
        instead of a response, so one failure does not hide the others.
        """
        ok, timeout = tuple(ok), timeout or self.timeout
        window = max(1, min(window or self._window_size, self._window_size))
        results: list[Response | ManagementError | None] = [None] * len(calls)
        attempts = [0] * len(calls)
        ready = list(range(len(calls)))[::-1]
        retries: list[tuple[float, int]] = []  # (due, index) heap
        in_flight: dict[int, tuple[Request, float]] = {}
        finished = _Completions()
        while ready or retries or in_flight:
            now = time.monotonic()
            while retries and retries[0][0] <= now:
                ready.append(heapq.heappop(retries)[1])
            while ready and len(in_flight) < window:
                index = ready.pop()
                attempts[index] += 1
                self._throttle()
                if not self._window.acquire(timeout=timeout):  # shared with other threads' requests
                    entity, operation, _ = calls[index]
                    results[index] = OperationTimeoutError(f"{_context(entity, operation)}: no free request slot")
                    continue

                def finished_one(request: Request, index: int = index) -> None:
                    self._window.release()
                    finished.add(index, request)

                request = self._new_request(*calls[index], timeout, finished_one)
                in_flight[index] = (request, time.monotonic() + timeout)
                self._engine.submit(request)
            if not in_flight and not retries:
                continue  # every ready call failed to get a slot: nothing left to wait for
            # Deadlines grow in submission order, so the oldest call in flight times out first.
            oldest = [deadline for _, deadline in itertools.islice(in_flight.values(), 1)]
            wake = min(oldest + [due for due, _ in retries[:1]])
            arrived = finished.take(max(1, min(len(in_flight), window // 8)), max(0.0, wake - time.monotonic()))
            if arrived:
                done = [i for i, request in arrived if in_flight.get(i, (None,))[0] is request]  # else timed out
            else:
                now = time.monotonic()
                done = [i for i, (_, deadline) in in_flight.items() if deadline <= now]
            for index in done:
                request, _ = in_flight.pop(index)
                if not request.done and self._engine.forget(request):
                    self._window.release()  # timed out: no response will release its slot
                entity, operation, _ = calls[index]
                try:
                    results[index] = self._outcome(request, entity, operation, ok, timeout, empty_ok)
                except ManagementError as exc:
                    if self.retry.retryable(exc, attempts[index]):
                        heapq.heappush(retries, (time.monotonic() + self.retry.delay(attempts[index]), index))
                    else:
                        exc.after_retry = attempts[index] > 1
                        results[index] = exc
        return results  # type: ignore[return-value] - every slot is filled when the loop ends

    def _throttle(self) -> None:
        if not self._interval:
            return
        with self._rate_lock:
            now = time.monotonic()
            slot = max(now, self._next_slot)
            self._next_slot = slot + self._interval
        if slot > now:
            time.sleep(slot - now)

    @staticmethod
    def _new_request(
        entity: str, operation: str, body: Mapping[str, Any], timeout: float,
        on_done: Callable[[Request], None] | None = None,
    ) -> Request:
        props = {"operation": operation, "com.microsoft:server-timeout": uint(int(timeout * 1000))}
        return Request(entity, operation, dict(body), props, on_done)

    def _attempt(
        self, entity: str, operation: str, body: Mapping[str, Any], ok: tuple[int, ...], timeout: float, empty_ok: bool
    ) -> Response:
        deadline = time.monotonic() + timeout
        self._throttle()
        if not self._window.acquire(timeout=timeout):
            raise OperationTimeoutError(f"{_context(entity, operation)}: no free request slot within {timeout:g}s")
        try:
            answered = threading.Event()
            request = self._new_request(entity, operation, body, timeout, lambda _: answered.set())
            self._engine.submit(request)
            if not answered.wait(max(0.0, deadline - time.monotonic())) and not self._engine.forget(request):
                answered.wait()  # the loop took it just now: its answer is being filled in
        finally:
            self._window.release()
        return self._outcome(request, entity, operation, ok, timeout, empty_ok)

    def _outcome(
        self, request: Request, entity: str, operation: str, ok: tuple[int, ...], timeout: float, empty_ok: bool
    ) -> Response:
        """The response of a finished request, or the error it stands for (a timeout if unfinished)."""
        context = _context(entity, operation)
        if not request.done:
            raise OperationTimeoutError(f"{context}: no response within {timeout:g}s")
        if request.error is not None:
            raise request.error
        response = request.response
        assert response is not None
        if response.status in ok:
            return response
        if empty_ok and (response.status == 204 or (response.status == 404 and response.condition in _EMPTY_CONDITIONS)):
            return Response(204, response.description, response.condition, None, response.properties)
        raise error_for(response.status, response.condition, response.description, context)

    # -- rules -------------------------------------------------------------------------------
    def list_rules(self, topic: str, subscription: str) -> list[model.Rule]:
        """All rules of a subscription (enumerate-rules, 100 per page until a short page or 204)."""
        result = self.list_rules_many([(topic, subscription)], window=1)[0]
        if isinstance(result, ManagementError):
            raise result
        return result

    def list_rules_many(
        self, targets: Sequence[tuple[str, str]], *, window: int | None = None
    ) -> list[list[model.Rule] | ManagementError]:
        """The rules of every (topic, subscription), pipelined; per target its rules or its error.

        Pages are read in rounds: every target's first page at once, then the next page of those
        whose page was full (100 rules).
        """
        rules: list[list[model.Rule]] = [[] for _ in targets]
        results: list[list[model.Rule] | ManagementError] = list(rules)
        todo = list(range(len(targets)))
        while todo:
            calls = [
                (entity_path(*targets[i]), ENUMERATE_RULES, {"top": int32(RULES_PAGE_SIZE), "skip": int32(len(rules[i]))})
                for i in todo
            ]
            responses = self.request_all(calls, ok=(200, 204), window=window)
            full = []
            for index, response in zip(todo, responses):
                if isinstance(response, ManagementError):
                    results[index] = response
                    continue
                if response.status == 204 or response.body is None:
                    continue
                try:
                    page = codec.decode_enumerate_rules_body(response.body, offset=len(rules[index]))
                except codec.CodecError as exc:
                    raise codec.CodecError(f"{'/'.join(targets[index])}: {exc}") from None
                rules[index].extend(page)
                if len(page) == RULES_PAGE_SIZE:
                    full.append(index)
            todo = full
        return results

    def add_rule(self, topic: str, subscription: str, rule: model.Rule) -> None:
        """Create ``rule``; raises AlreadyExistsError when a rule of that name exists.

        If an earlier attempt of this same call landed before its connection dropped, the retry
        finds the rule already there: when it is this exact rule, that is success.
        """
        entity = entity_path(topic, subscription)
        try:
            self.request(entity, OP_PREFIX + "add-rule", codec.encode_add_rule_body(rule))
        except AlreadyExistsError as exc:
            if exc.after_retry:
                live = {r.name: r for r in self.list_rules(topic, subscription)}
                if live.get(rule.name) == rule:
                    return
            raise

    def remove_rule(self, topic: str, subscription: str, name: str) -> None:
        """Delete the rule ``name``; raises NotFoundError unless an earlier attempt of this call removed it."""
        try:
            self.request(entity_path(topic, subscription), OP_PREFIX + "remove-rule", {"rule-name": name})
        except NotFoundError as exc:
            if not exc.after_retry:
                raise

    # -- messages ----------------------------------------------------------------------------
    def peek_messages(
        self,
        topic: str,
        subscription: str | None,
        from_sequence_number: int,
        count: int,
        session_id: str | None = None,
    ) -> list[PeekedMessage]:
        """Up to ``count`` messages from ``from_sequence_number`` on, without locking (204 = none)."""
        body: dict[str, Any] = {"from-sequence-number": int(from_sequence_number), "message-count": int32(count)}
        if session_id is not None:
            body["session-id"] = session_id
        response = self.request(entity_path(topic, subscription), OP_PREFIX + "peek-message", body, empty_ok=True)
        return self._messages(response, "peek-message")

    def receive_by_sequence_number(
        self,
        topic: str,
        subscription: str | None,
        sequence_numbers: Sequence[int],
        settle_mode: SettleMode = SettleMode.PEEK_LOCK,
        session_id: str | None = None,
    ) -> list[PeekedMessage]:
        """Receive deferred messages by sequence number; each result carries its lock token."""
        body: dict[str, Any] = {
            "sequence-numbers": _long_array(sequence_numbers),
            "receiver-settle-mode": uint(int(settle_mode)),
        }
        if session_id is not None:
            body["session-id"] = session_id
        response = self.request(entity_path(topic, subscription), OP_PREFIX + "receive-by-sequence-number", body)
        return self._messages(response, "receive-by-sequence-number")

    @staticmethod
    def _messages(response: Response, what: str) -> list[PeekedMessage]:
        if response.status == 204 or response.body is None:
            return []
        entries = _elements(_body_map(response, what).get("messages"), f"{what} 'messages'")
        out = []
        for index, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or entry.get("message") is None:
                raise codec.CodecError(f"{what} message #{index} has no 'message' binary")
            decoded = decode_model_message(entry["message"])
            sys_props = decoded.message.sys
            seq = sys_props.get("SequenceNumber")
            if seq is None:
                raise codec.CodecError(f"{what} message #{index} has no x-opt-sequence-number annotation")
            enq = sys_props.get("EnqueuedTimeUtc")
            lock = entry.get("lock-token")
            out.append(PeekedMessage(
                sequence_number=int(seq.value),
                enqueued_time=enq.value if enq else None,
                message=decoded.message,
                body_size=len(decoded.message.body),
                annotations=decoded.annotations,
                lock_token=uuid.UUID(str(lock)) if lock is not None else None,
            ))
        return out

    def renew_lock(self, topic: str, subscription: str | None, lock_tokens: Sequence[uuid.UUID]) -> list[_dt.datetime]:
        """Renew message locks; returns the new expiry of each, in order."""
        response = self.request(entity_path(topic, subscription), OP_PREFIX + "renew-lock",
                                {"lock-tokens": _uuid_array(lock_tokens)})
        values = _elements(_body_map(response, "renew-lock").get("expirations"), "renew-lock 'expirations'")
        return [codec.timestamp_to_datetime(v) for v in values]

    def update_disposition(
        self,
        topic: str,
        subscription: str | None,
        lock_tokens: Sequence[uuid.UUID],
        status: Disposition,
        *,
        deadletter_reason: str | None = None,
        deadletter_description: str | None = None,
        properties_to_modify: Mapping[str, model.TypedValue] | None = None,
        session_id: str | None = None,
    ) -> None:
        """Complete, defer, dead-letter (suspended) or abandon messages by lock token."""
        body: dict[str, Any] = {"lock-tokens": _uuid_array(lock_tokens), "disposition-status": Disposition(status).value}
        if deadletter_reason is not None:
            body["deadletter-reason"] = deadletter_reason
        if deadletter_description is not None:
            body["deadletter-description"] = deadletter_description
        if properties_to_modify:
            body["properties-to-modify"] = {k: codec.to_amqp(v) for k, v in properties_to_modify.items()}
        if session_id is not None:
            body["session-id"] = session_id
        self.request(entity_path(topic, subscription), OP_PREFIX + "update-disposition", body)

    def schedule_messages(self, topic: str, messages: Sequence[ScheduledMessage]) -> list[int]:
        """Schedule messages on a topic or queue; returns their sequence numbers."""
        entries = []
        for item in messages:
            msg_id = item.message.sys.get("MessageId")
            message_id = str(msg_id.value) if msg_id else uuid.uuid4().hex
            sys_props = dict(item.message.sys)
            sys_props["MessageId"] = model.TypedValue(model.ValueType.STRING, message_id)
            payload = encode_model_message(
                model.Message(sys=sys_props, user=item.message.user, body=item.message.body),
                {"x-opt-scheduled-enqueue-time": codec.datetime_to_timestamp(item.enqueue_time)},
            )
            entry: dict[str, Any] = {"message": payload, "message-id": message_id}
            session = sys_props.get("SessionId")
            if session is not None:
                entry["session-id"] = session.value
            if item.partition_key is not None:
                entry["partition-key"] = item.partition_key
            if item.via_partition_key is not None:
                entry["via-partition-key"] = item.via_partition_key
            entries.append(entry)
        response = self.request(topic, OP_PREFIX + "schedule-message", {"messages": entries})
        values = _elements(_body_map(response, "schedule-message").get("sequence-numbers"),
                           "schedule-message 'sequence-numbers'")
        return [int(v) for v in values]

    def cancel_scheduled_messages(self, topic: str, sequence_numbers: Sequence[int]) -> None:
        self.request(topic, OP_PREFIX + "cancel-scheduled-message", {"sequence-numbers": _long_array(sequence_numbers)})

    # -- sessions ----------------------------------------------------------------------------
    def renew_session_lock(self, topic: str, subscription: str | None, session_id: str) -> _dt.datetime:
        response = self.request(entity_path(topic, subscription), OP_PREFIX + "renew-session-lock",
                                {"session-id": session_id})
        expiration = _body_map(response, "renew-session-lock").get("expiration")
        if not isinstance(expiration, int):
            raise codec.CodecError("renew-session-lock response has no 'expiration' timestamp")
        return codec.timestamp_to_datetime(expiration)

    def set_session_state(self, topic: str, subscription: str | None, session_id: str, state: bytes | None) -> None:
        """Store ``state`` for the session (None clears it)."""
        self.request(entity_path(topic, subscription), OP_PREFIX + "set-session-state",
                     {"session-id": session_id, "session-state": bytes(state) if state is not None else None})

    def get_session_state(self, topic: str, subscription: str | None, session_id: str) -> bytes | None:
        response = self.request(entity_path(topic, subscription), OP_PREFIX + "get-session-state",
                                {"session-id": session_id})
        state = _body_map(response, "get-session-state").get("session-state")
        return bytes(state) if state is not None else None

    def get_message_sessions(
        self,
        topic: str,
        subscription: str | None,
        last_updated_time: _dt.datetime,
        skip: int = 0,
        top: int = 100,
    ) -> list[str]:
        """Session ids with state updated since ``last_updated_time`` (response key "sessions-ids")."""
        body = {
            "last-updated-time": codec.datetime_to_timestamp(last_updated_time),
            "skip": int32(skip),
            "top": int32(top),
        }
        response = self.request(entity_path(topic, subscription), OP_PREFIX + "get-message-sessions", body,
                                empty_ok=True)
        if response.status == 204 or response.body is None:
            return []
        ids = _elements(_body_map(response, "get-message-sessions").get("sessions-ids"),
                        "get-message-sessions 'sessions-ids'")
        return [str(v) for v in ids]

