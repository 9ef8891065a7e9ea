"""Messages in: a transfer published to a queue or topic, routed through the subscriptions' rules;
messages scheduled for later and cancelled; and the tick that enqueues what is due and expires
what has run out.

Routing follows the service, through the topic's compiled router (``reconciler.sql.router``, which
evaluates only the rules a message could match): one copy when any action-less rule matches, one copy per matching rule
with an action (action applied, ``RuleName`` set by ``reconciler.sql.route_rules``), and a filter
evaluation error dead-letters the message in that subscription
(``EnableDeadLetteringOnFilterEvaluationExceptions`` defaults to true). A published transfer is
decoded once, by the message codec (``reconciler.amqp.messages``), into the model view filters see
and the sections a rule-action copy is re-encoded from.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any, Callable, Iterable

import proton
from proton import symbol

from reconciler import model
from reconciler.amqp import codec, messages
from reconciler.amqp.messages import DecodedMessage
from reconciler.amqp.wire.sections import Sections
from reconciler.emulator.namespace import (
    Address,
    MessageState,
    Namespace,
    OperationError,
    Subscription,
    Topic,
    utcnow,
)
from reconciler.emulator.outgoing import OutgoingParts
from reconciler.model import TypedValue, ValueType
from reconciler.sql.router import TopicRouter

FILTER_ERROR_REASON = "FilterEvaluationException"
#: The annotation a message to be enqueued later carries (the model's system-property table).
SCHEDULED_ANNOTATION = symbol(messages.ANNOTATIONS["ScheduledEnqueueTimeUtc"])


def _decoded(decode: Callable[[bytes], Any], payload: bytes) -> Any:
    """``decode(payload)``, a message that does not decode being a 400 for its sender."""
    try:
        return decode(payload)
    except (codec.CodecError, model.TypedValueError) as exc:
        raise OperationError(400, "amqp:decode-error", f"undecodable message: {exc}") from None


def _decode(payload: bytes) -> DecodedMessage:
    message = _decoded(messages.decode_model_message, payload)
    _refuse_binary_properties(message.message)
    return message


def _refuse_binary_properties(message: model.Message) -> None:
    """The service cannot store a binary application property and refuses the message, with this
    condition and the .NET type's name (docs/protocol.md §10.1)."""
    for name, value in message.user.items():
        if value.type is ValueType.BINARY:
            raise OperationError(
                403, "amqp:link:message-size-exceeded",
                f"Serialization operation failed due to unsupported type System.Byte[] (application property {name!r})",
            )


def _to_datetime(value: Any) -> _dt.datetime | None:
    if isinstance(value, _dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return codec.timestamp_to_datetime(int(value))
    return None


def _sys_text(message: model.Message, name: str) -> str | None:
    value = message.sys.get(name)
    return None if value is None or value.value is None else str(value.value)


def _ttl_seconds(sections: Sections) -> float | None:
    ttl = sections.header_field(messages.HEADER_FIELDS["TimeToLive"])
    return int(ttl) / 1000 if ttl else None


@dataclasses.dataclass
class Published:
    """What one sent transfer amounted to: its messages, the rule evaluations they took, and the
    sequence numbers of those scheduled for later."""

    messages: int = 0
    filter_evaluations: int = 0
    scheduled: list[int] = dataclasses.field(default_factory=list)


class Routing:
    """The sending side of the broker (thread-safe through the namespace lock)."""

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace
        self.filter_errors = 0
        #: topic name → (key, its router, the subscriptions and rule entries it was made from)
        self._routers: dict[str, tuple[tuple[int, ...], TopicRouter, list[Subscription], list[list[Any]]]] = {}

    def publish(self, address: Address, transfer: bytes | proton.Message, now: _dt.datetime | None = None) -> Published:
        """Accept one transfer sent to a queue or topic: a message or a batch of them (decoded once
        here); says what it took (for the namespace's credits) and the sequence numbers of scheduled ones."""
        now = now or utcnow()
        payload = bytes(transfer.encode()) if isinstance(transfer, proton.Message) else bytes(transfer)
        decoded = _decoded(messages.decode_transfer, payload)
        for message in decoded:
            _refuse_binary_properties(message.message)
        published = Published()
        for message in decoded:
            published.messages += 1
            published.filter_evaluations += self._publish_one(address, message, now, published.scheduled)
        return published

    def _publish_one(self, address: Address, message: DecodedMessage, now: _dt.datetime, scheduled_numbers: list[int]) -> int:
        """Store or route one message; how many rules were evaluated for it."""
        scheduled = _to_datetime(message.annotations.get(SCHEDULED_ANNOTATION))
        session_id, message_id = _sys_text(message.message, "SessionId"), _sys_text(message.message, "MessageId")
        with self.namespace.lock:
            if address.subscription is not None or address.dead_letter:
                raise OperationError(400, "amqp:not-allowed", f"cannot send to '{address.node}'")
            entity = self.namespace.entity(address)
            if scheduled is not None and scheduled > now:
                stored = entity.store.enqueue(
                    message.payload, session_id=session_id, message_id=message_id, scheduled_time=scheduled, now=now,
                )
                self.namespace.touch()
                scheduled_numbers.append(stored.sequence_number)
                return 0
            evaluations = 0
            if isinstance(entity, Topic):
                evaluations = self.route(entity, message, now)
            else:
                entity.store.enqueue(
                    message.payload, session_id=session_id, message_id=message_id,
                    ttl=_ttl_seconds(message.sections), now=now, parts=OutgoingParts.of(message.sections),
                )
            self.namespace.touch()
            return evaluations

    def route(self, topic: Topic, message: DecodedMessage, now: _dt.datetime, number: int | None = None) -> int:
        """Offer one message to every subscription of ``topic``; how many rules it was evaluated against.

        As at the service, the topic numbers the message (``number``: a scheduled message keeps the
        one it got when scheduled) and each subscription's copy carries that number, so a message
        peeked through two subscriptions is recognisably one. A second copy in one subscription (a
        second matching rule with an action) is another message there and takes the topic's next number."""
        view = self._view(message, now)
        message_id, ttl = _sys_text(message.message, "MessageId"), _ttl_seconds(message.sections)
        if number is None:
            number = topic.store.take_number(_sys_text(message.message, "SessionId"))
        parts: OutgoingParts | None = None
        router, subscriptions = self._router(topic)
        for index, result in sorted(router.route(view).items()):
            sub = subscriptions[index]
            errors = [(name, out.error) for name, out in result.rule_results if out.error is not None]
            if errors:
                sub.filter_errors += 1
                self.filter_errors += 1
                description = "; ".join(f"rule {name!r}: {error}" for name, error in errors)
                self._dead_letter_new(sub, message, FILTER_ERROR_REASON, description, now)
            for copy_index, (rule_name, copy) in enumerate(result.copies):
                if rule_name is None:
                    body, parts = message.payload, parts or OutgoingParts.of(message.sections)
                    copy_parts: OutgoingParts | None = parts
                else:
                    body, copy_parts = self._apply_copy(message.sections, copy), None
                session_id = _sys_text(copy, "SessionId")
                sub.store.enqueue(
                    body, session_id=session_id, message_id=message_id, ttl=ttl, now=now, parts=copy_parts,
                    sequence_number=number if copy_index == 0 else topic.store.take_number(session_id),
                )
        return router.rule_count

    def _router(self, topic: Topic) -> tuple[TopicRouter, list[Subscription]]:
        """The topic's compiled router (``reconciler.sql.router``), made again when a subscription
        or rule was added or removed. The key is the identity of each subscription and rule entry;
        the cache keeps them alive, so an identity cannot be reused while it is cached."""
        subscriptions = list(topic.subscriptions.values())
        entries = [list(sub.rules.values()) for sub in subscriptions]
        key = tuple(id(sub) for sub in subscriptions) + tuple(len(e) for e in entries) + tuple(
            id(entry) for listed in entries for entry in listed
        )
        cached = self._routers.get(topic.name)
        if cached is None or cached[0] != key:
            router = TopicRouter([(sub.name, [e.rule for e in listed]) for sub, listed in zip(subscriptions, entries)])
            cached = self._routers[topic.name] = (key, router, subscriptions, entries)
        return cached[1], cached[2]

    @staticmethod
    def _view(message: DecodedMessage, now: _dt.datetime) -> model.Message:
        """The model message filters see, with broker-assigned Size and EnqueuedTimeUtc."""
        sys_props = dict(message.message.sys)
        sys_props["Size"] = TypedValue(ValueType.LONG, message.size)
        sys_props["EnqueuedTimeUtc"] = TypedValue(ValueType.TIMESTAMP, now)
        return model.Message(sys=sys_props, user=message.message.user, body=message.message.body)

    @staticmethod
    def _apply_copy(sections: Sections, copy: model.Message) -> bytes:
        """Write a rule action's result onto the message, keeping everything the model does not carry.

        The copy is mapped by the message codec (the one model → AMQP mapping); its properties
        fields, application properties and TTL replace the original's, while the body keeps its
        AMQP type.
        """
        patched = messages.to_sections(copy)
        result = dataclasses.replace(sections, application_properties=patched.application_properties)
        for field_name in messages.PROPERTY_FIELDS.values():
            result.set_properties_field(field_name, patched.properties_field(field_name))
        ttl = messages.HEADER_FIELDS["TimeToLive"]
        result.set_header_field(ttl, patched.header_field(ttl))
        return result.encode()

    def _dead_letter_new(
        self, sub: Subscription, message: DecodedMessage, reason: str, description: str, now: _dt.datetime
    ) -> None:
        stored = sub.dead_letters.enqueue(
            message.payload, session_id=_sys_text(message.message, "SessionId"),
            message_id=_sys_text(message.message, "MessageId"), now=now,
        )
        stored.dead_letter_reason = reason
        stored.dead_letter_description = description

    # -- schedules -----------------------------------------------------------------------------
    def schedule(self, address: Address, payloads: Iterable[bytes], now: _dt.datetime | None = None) -> list[int]:
        """schedule-message: each payload carries x-opt-scheduled-enqueue-time; returns sequence numbers."""
        now = now or utcnow()
        decoded = [_decode(payload) for payload in payloads]
        numbers = []
        with self.namespace.lock:
            entity = self.namespace.entity(address)
            if isinstance(entity, Subscription):
                raise OperationError(400, "amqp:not-allowed", "messages cannot be scheduled on a subscription")
            for message in decoded:
                when = _to_datetime(message.annotations.get(SCHEDULED_ANNOTATION)) or now
                stored = entity.store.enqueue(
                    message.payload,
                    session_id=_sys_text(message.message, "SessionId"),
                    message_id=_sys_text(message.message, "MessageId"),
                    scheduled_time=when if when > now else now + _dt.timedelta(microseconds=1),
                    now=now,
                )
                numbers.append(stored.sequence_number)
            self.namespace.touch()
        return numbers

    def cancel_scheduled(self, address: Address, numbers: Iterable[int]) -> None:
        with self.namespace.lock:
            store = self.namespace.entity(address).store
            for number in numbers:
                stored = store.messages.get(int(number))
                if stored is None or stored.state is not MessageState.SCHEDULED:
                    raise OperationError(
                        404, "com.microsoft:message-not-found", f"scheduled message {number} was not found"
                    )
            for number in numbers:
                store.remove(int(number))
            self.namespace.touch()

    def tick(self, now: _dt.datetime | None = None) -> bool:
        """Enqueue due scheduled messages and release expired locks; True when anything changed."""
        now = now or utcnow()
        changed = False
        with self.namespace.lock:
            for topic in list(self.namespace.topics.values()):
                for stored in topic.store.due_scheduled(now):
                    topic.store.remove(stored.sequence_number)
                    self.route(topic, _decode(stored.payload), now, stored.sequence_number)
                    changed = True
            for store in list(self.namespace.timed_stores):
                if not store.has_timed_work:
                    self.namespace.timed_stores.discard(store)
                    continue
                for stored in store.due_scheduled(now):
                    store.activate(stored, now, _ttl_seconds(Sections.decode(stored.payload)))
                    changed = True
                if store.drop_expired(now):
                    changed = True
                if store.expire_locks(now):
                    changed = True
            if changed:
                self.namespace.touch()
        return changed
