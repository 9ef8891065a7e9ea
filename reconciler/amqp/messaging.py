"""The message and session operations of `$management` (docs/protocol.md): peek, receive by sequence
number, lock renewal, dispositions, scheduling, sending, and session state; and the types they take and return."""

from __future__ import annotations

import datetime as _dt
import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from proton import UNDESCRIBED, Array, Data, int32, uint

from reconciler import model
from reconciler.amqp import codec
from reconciler.amqp.engine import SEND
from reconciler.amqp.messages import MessageFields, decode_message_fields, encode_model_message
from reconciler.amqp.requests import OP_PREFIX, ManagementRequests, entity_path
from reconciler.namespace.credits import operation_credits
from reconciler.namespace.errors import ManagementError
from reconciler.namespace.pipeline import Call, Response

PEEK_MESSAGE = OP_PREFIX + "peek-message"


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
    """A message read by peek or receive-by-sequence-number: its decoded fields, and the model view
    made from them when first asked for (the traffic sampler stores the fields and never asks)."""

    sequence_number: int
    enqueued_time: _dt.datetime | None
    fields: MessageFields
    lock_token: uuid.UUID | None = None

    @cached_property
    def message(self) -> model.Message:
        return self.fields.model()

    @property
    def body_size(self) -> int:
        return len(self.fields.body)

    @property
    def annotations(self) -> Mapping[str, Any]:
        return self.fields.annotations


@dataclass(frozen=True)
class ScheduledMessage:
    """A message to schedule: the model message plus when it should be enqueued."""

    message: model.Message
    enqueue_time: _dt.datetime
    partition_key: str | None = None
    via_partition_key: str | None = None


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


class MessageOperations(ManagementRequests):
    """Messages and sessions of a topic, subscription or queue, read and settled over `$management`."""

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
        response = self.request(entity_path(topic, subscription), PEEK_MESSAGE, body, empty_ok=True)
        return self._messages(response, "peek-message")

    def peek_pages(
        self, topic: str, subscription: str | None, starts: Sequence[int], count: int, *, window: int | None = None
    ) -> list[list[PeekedMessage] | ManagementError]:
        """Up to ``count`` messages from each sequence number of ``starts``, the requests pipelined
        from this thread; per start its page (decoded here, not on the network thread) or its error."""
        return [r if isinstance(r, ManagementError) else self._messages(r, "peek-message")
                for r in self._peeks(topic, subscription, starts, count, window)]

    def peek_payloads(
        self, topic: str, subscription: str | None, starts: Sequence[int], count: int, *, window: int | None = None
    ) -> list[list[bytes] | ManagementError]:
        """As ``peek_pages``, the messages left encoded, for a caller that decodes them on another
        thread while the next pages are fetched (``messages.sequence_number`` reads one's number)."""
        return [r if isinstance(r, ManagementError) else [e["message"] for e in self._entries(r, "peek-message")]
                for r in self._peeks(topic, subscription, starts, count, window)]

    def _peeks(
        self, topic: str, subscription: str | None, starts: Sequence[int], count: int, window: int | None
    ) -> list[Response | ManagementError]:
        entity = entity_path(topic, subscription)
        calls = [
            (entity, PEEK_MESSAGE, {"from-sequence-number": int(start), "message-count": int32(count)})
            for start in starts
        ]
        return self.request_all(calls, ok=(200, 204), empty_ok=True, window=window)

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
    def _entries(response: Response, what: str) -> list[Mapping[str, Any]]:
        """The entries of a peek or receive answer, each a map with the message's bytes."""
        if response.status == 204 or response.body is None:
            return []
        entries = _elements(_body_map(response, what).get("messages"), f"{what} 'messages'")
        for index, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("message"), bytes):
                raise codec.CodecError(f"{what} message #{index} has no 'message' binary")
        return entries

    @classmethod
    def _messages(cls, response: Response, what: str) -> list[PeekedMessage]:
        out = []
        for index, entry in enumerate(cls._entries(response, what)):
            fields = decode_message_fields(entry["message"])
            seq = fields.system.get("SequenceNumber")
            if seq is None:
                raise codec.CodecError(f"{what} message #{index} has no x-opt-sequence-number annotation")
            lock = entry.get("lock-token")
            out.append(PeekedMessage(
                sequence_number=int(seq),
                enqueued_time=fields.system.get("EnqueuedTimeUtc"),
                fields=fields,
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

    def send_messages(self, topic: str, messages: Sequence[model.Message]) -> list[ManagementError | None]:
        """Send ``messages`` to a topic or queue over a sender link (at-least-once: each is answered
        when the service settles it); per message, None when accepted or its error. Needs Send rights."""
        calls = [
            Call(topic, SEND, encode_model_message(message), operation_credits(SEND), what=f"send to {topic}")
            for message in messages
        ]
        results = self.pipeline.call_all(calls)
        return [result if isinstance(result, ManagementError) else None for result in results]

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
