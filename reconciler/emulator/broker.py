"""What happens to messages: routing and schedules (``routing.py``), then locks, settlement and
sessions, here.

The broker works on encoded messages and the namespace's stores; the AMQP server calls it from its
event loop and tests may call it from any thread (it takes the namespace lock). A message leaves
the broker re-encoded with the broker's annotations (``outgoing.py``).
"""

from __future__ import annotations

import datetime as _dt
import uuid
from typing import Any, Iterable

import proton
from proton import symbol, ubyte, uint

from reconciler.amqp import codec, messages
from reconciler.amqp.wire.sections import Sections
from reconciler.emulator.namespace import (
    LOCK_DURATION,
    MAX_DELIVERY_COUNT,
    MessageState,
    MessageStore,
    Namespace,
    OperationError,
    SessionInfo,
    StoredMessage,
    bad_request,
    utcnow,
)
from reconciler.emulator.outgoing import OutgoingParts
from reconciler.emulator.routing import SCHEDULED_ANNOTATION, Routing

MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
#: The annotations the broker writes, keyed by system property (the model's system-property table).
_SEQUENCE_NUMBER, _ENQUEUED_TIME, _LOCKED_UNTIL, _DEAD_LETTER_SOURCE = (
    symbol(messages.ANNOTATIONS[name]) for name in ("SequenceNumber", "EnqueuedTimeUtc", "LockedUntilUtc", "DeadLetterSource")
)
#: Not a system property: the SDKs read it as the message's state (active, deferred, scheduled).
_MESSAGE_STATE = symbol("x-opt-message-state")
#: The priority a message without one has (AMQP 1.0 §3.2.1).
_DEFAULT_PRIORITY = ubyte(4)


class Broker(Routing):
    """Message operations over a Namespace (thread-safe through the namespace lock)."""

    def __init__(self, namespace: Namespace, lock_duration: _dt.timedelta = LOCK_DURATION) -> None:
        super().__init__(namespace)
        self.lock_duration = lock_duration

    # -- receiving -----------------------------------------------------------------------------
    def receive(
        self, store: MessageStore, *, peek_lock: bool, session_id: str | None = None, sessionful: bool = False,
        now: _dt.datetime | None = None,
    ) -> tuple[StoredMessage, bytes] | None:
        """Take the next visible message: lock it (peek-lock) or remove it (receive-and-delete)."""
        now = now or utcnow()
        with self.namespace.lock:
            while True:
                stored = store.next_visible(now, session_id, sessionful)
                if stored is None:
                    return None
                if stored.delivery_count >= MAX_DELIVERY_COUNT and store.dead_letters is not None:
                    self._move_to_dead_letters(store, stored, MAX_DELIVERY_REASON, "delivery count exceeded", now)
                    continue
                if peek_lock:
                    store.lock(stored, now, self.lock_duration)
                else:
                    store.remove(stored.sequence_number)
                    stored.delivery_count += 1
                self.namespace.touch()
                return stored, self.wire(stored, store, delivered=True)

    def wire(self, stored: StoredMessage, store: MessageStore, *, delivered: bool) -> bytes:
        """The message as it leaves the broker, with broker annotations (docs/protocol.md §6)."""
        parts = stored.parts
        if parts is None:
            parts = stored.parts = OutgoingParts.of(Sections.decode(stored.payload))
        ann = {
            _SEQUENCE_NUMBER: int(stored.sequence_number),
            _ENQUEUED_TIME: codec.datetime_to_timestamp(stored.enqueued_time),
        }
        if stored.locked_until is not None:
            ann[_LOCKED_UNTIL] = codec.datetime_to_timestamp(stored.locked_until)
        if stored.scheduled_time is not None:
            ann[SCHEDULED_ANNOTATION] = codec.datetime_to_timestamp(stored.scheduled_time)
        if stored.state is not MessageState.ACTIVE:
            ann[_MESSAGE_STATE] = proton.int32(stored.state.code)
        if stored.dead_letter_source is not None:
            ann[_DEAD_LETTER_SOURCE] = stored.dead_letter_source
        props: dict[Any, Any] = {}
        if stored.dead_letter_reason is not None:
            props["DeadLetterReason"] = stored.dead_letter_reason
        if stored.dead_letter_description is not None:
            props["DeadLetterErrorDescription"] = stored.dead_letter_description
        props.update(stored.modified_properties)
        delivery_count = max(stored.delivery_count - 1, 0) if delivered else stored.delivery_count
        # Every header field written out, delivery-count included even when 0: without it the
        # Python SDK reports None where the service says 0.
        header = [
            True,
            _DEFAULT_PRIORITY if parts.priority is None else parts.priority,
            parts.ttl or None,
            parts.first_acquirer,
            uint(delivery_count),
        ]
        return parts.encode(header, ann, props)

    def peek(
        self, store: MessageStore, from_sequence: int, count: int, session_id: str | None = None
    ) -> list[bytes]:
        with self.namespace.lock:
            out = []
            for stored in store.from_sequence(from_sequence):
                if session_id is not None and stored.session_id != session_id:
                    continue
                out.append(self.wire(stored, store, delivered=False))
                if len(out) >= count:
                    break
            return out

    # -- settlement ----------------------------------------------------------------------------
    def complete(self, store: MessageStore, token: uuid.UUID) -> None:
        with self.namespace.lock:
            stored = store.locked_message(token)
            store.remove(stored.sequence_number)
            self.namespace.touch()

    def abandon(self, store: MessageStore, token: uuid.UUID, properties: dict | None = None) -> None:
        with self.namespace.lock:
            stored = store.locked_message(token)
            stored.modified_properties.update(properties or {})
            store.unlock(stored)
            self.namespace.touch()

    def defer(self, store: MessageStore, token: uuid.UUID, properties: dict | None = None) -> None:
        with self.namespace.lock:
            stored = store.locked_message(token)
            stored.modified_properties.update(properties or {})
            store.unlock(stored)
            stored.state = MessageState.DEFERRED
            self.namespace.touch()

    def dead_letter(
        self, store: MessageStore, token: uuid.UUID, reason: str | None, description: str | None,
        properties: dict | None = None,
    ) -> None:
        with self.namespace.lock:
            stored = store.locked_message(token)
            stored.modified_properties.update(properties or {})
            self._move_to_dead_letters(store, stored, reason, description, utcnow())
            self.namespace.touch()

    def _move_to_dead_letters(
        self, store: MessageStore, stored: StoredMessage, reason: str | None, description: str | None,
        now: _dt.datetime,
    ) -> None:
        target = store.dead_letters
        if target is None:
            raise OperationError(400, "amqp:not-allowed", "messages in a dead-letter queue cannot be dead-lettered")
        store.remove(stored.sequence_number)
        moved = target.enqueue(
            stored.payload, session_id=stored.session_id, message_id=stored.message_id, now=now, parts=stored.parts
        )
        moved.delivery_count = stored.delivery_count
        moved.modified_properties = dict(stored.modified_properties)
        moved.dead_letter_reason = reason
        moved.dead_letter_description = description

    def renew_lock(self, store: MessageStore, tokens: Iterable[uuid.UUID]) -> list[_dt.datetime]:
        now = utcnow()
        with self.namespace.lock:
            expirations = []
            for token in tokens:
                stored = store.locked_message(token, now)
                stored.locked_until = now + self.lock_duration
                expirations.append(stored.locked_until)
            return expirations

    def receive_by_sequence(
        self, store: MessageStore, numbers: Iterable[int], peek_lock: bool, session_id: str | None = None
    ) -> list[tuple[bytes, uuid.UUID | None]]:
        """receive-by-sequence-number: deferred messages, locked (or removed in receive-and-delete)."""
        now = utcnow()
        with self.namespace.lock:
            found = []
            for number in numbers:
                stored = store.messages.get(int(number))
                wrong_session = session_id is not None and stored is not None and stored.session_id != session_id
                if stored is None or stored.state is not MessageState.DEFERRED or wrong_session:
                    raise OperationError(
                        404, "com.microsoft:message-not-found", f"deferred message {number} was not found"
                    )
                found.append(stored)
            out: list[tuple[bytes, uuid.UUID | None]] = []
            for stored in found:
                if peek_lock:
                    token = store.lock(stored, now, self.lock_duration)
                    out.append((self.wire(stored, store, delivered=True), token))
                else:
                    store.remove(stored.sequence_number)
                    stored.delivery_count += 1
                    out.append((self.wire(stored, store, delivered=True), None))
            self.namespace.touch()
            return out

    def delete_messages(
        self, store: MessageStore, count: int, before: _dt.datetime, session_id: str | None = None
    ) -> int:
        """batch-delete-messages: up to ``count`` unlocked messages enqueued before ``before``."""
        now = utcnow()
        if before.tzinfo is None:
            before = before.replace(tzinfo=_dt.timezone.utc)
        with self.namespace.lock:
            doomed = [
                m.sequence_number for m in store.messages.values()
                if m.enqueued_time < before and (m.locked_until is None or m.locked_until <= now)
                and (session_id is None or m.session_id == session_id)
            ][:count]
            for number in doomed:
                store.remove(number)
            if doomed:
                self.namespace.touch()
            return len(doomed)

    def update_disposition(
        self, store: MessageStore, tokens: Iterable[uuid.UUID], status: str, reason: str | None = None,
        description: str | None = None, properties: dict | None = None,
    ) -> None:
        action = status.lower()
        for token in tokens:
            if action == "completed":
                self.complete(store, token)
            elif action == "abandoned":
                self.abandon(store, token, properties)
            elif action in ("defered", "deferred"):
                self.defer(store, token, properties)
            elif action == "suspended":
                self.dead_letter(store, token, reason, description, properties)
            else:
                raise bad_request(f"unknown disposition-status {status!r}")

    # -- sessions ------------------------------------------------------------------------------
    def accept_session(
        self, store: MessageStore, session_id: str | None, owner: object
    ) -> tuple[str, _dt.datetime] | None:
        """Lock a session for a receiver link: the named one, or the first unlocked one with messages."""
        now = utcnow()
        with self.namespace.lock:
            if session_id is None:
                candidates = [
                    m.session_id for m in store.messages.values() if m.session_id is not None and m.visible(now)
                ]
                session_id = next((s for s in candidates if not store.sessions[s].locked(now)), None)
                if session_id is None:
                    return None
            info = store.sessions.setdefault(session_id, SessionInfo())
            if info.locked(now) and info.lock_owner != owner:
                raise OperationError(
                    410, "com.microsoft:session-cannot-be-locked",
                    f"The requested session '{session_id}' cannot be accepted. It may be locked by another receiver.",
                )
            info.lock_owner = owner
            info.locked_until = now + self.lock_duration
            return session_id, info.locked_until

    def release_session(self, store: MessageStore, session_id: str, owner: object) -> None:
        with self.namespace.lock:
            info = store.sessions.get(session_id)
            if info is not None and info.lock_owner == owner:
                info.lock_owner = None
                info.locked_until = None
            for stored in store.messages.values():
                if stored.session_id == session_id and stored.lock_token is not None:
                    store.unlock(stored)

    def renew_session_lock(self, store: MessageStore, session_id: str) -> _dt.datetime:
        now = utcnow()
        with self.namespace.lock:
            info = self._locked_session(store, session_id, now)
            info.locked_until = now + self.lock_duration
            return info.locked_until

    def _locked_session(self, store: MessageStore, session_id: str, now: _dt.datetime) -> SessionInfo:
        info = store.sessions.get(session_id)
        if info is None or not info.locked(now):
            raise OperationError(
                410, "com.microsoft:session-lock-lost",
                f"The session lock has expired on the MessageSession '{session_id}'. Accept a new MessageSession.",
            )
        return info

    def set_session_state(self, store: MessageStore, session_id: str, state: bytes | None) -> None:
        with self.namespace.lock:
            info = self._locked_session(store, session_id, utcnow())
            info.state = state
            info.updated = utcnow()
            self.namespace.touch()

    def get_session_state(self, store: MessageStore, session_id: str) -> bytes | None:
        with self.namespace.lock:
            return self._locked_session(store, session_id, utcnow()).state

    def list_sessions(self, store: MessageStore, skip: int, top: int) -> list[str]:
        """Sessions with state or messages (the service's "active" sessions), in first-seen order."""
        with self.namespace.lock:
            live = {m.session_id for m in store.messages.values() if m.session_id is not None}
            ids = [sid for sid, info in store.sessions.items() if sid in live or info.state is not None]
            return ids[skip: skip + top]

