"""The emulator's namespace: topics, subscriptions, rules, queues and their message stores.

One lock guards the whole namespace: the AMQP loop and the test API (other threads) both mutate
it, and a namespace holds little enough that finer locking would buy nothing but bugs. Messages
are kept as AMQP-encoded bytes exactly as a sender sent them (plus the copy's rule changes), so
``peek-message`` and receivers hand back real wire messages; broker annotations (sequence
number, enqueued time, lock) are added when a message leaves.
"""

from __future__ import annotations

import datetime as _dt
import threading
import uuid
import zlib
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from reconciler import model
from reconciler.errors import SbrulesError
from reconciler.limits import EntityKind, name_problem
from reconciler.model import DEFAULT_RULE_NAME, PARTITION_SHIFT, EmptyAction, Rule, TrueFilter
from reconciler.names import name_key, same_name

if TYPE_CHECKING:
    from reconciler.emulator.outgoing import OutgoingParts

#: Service Bus defaults: lock duration 60 s, max delivery count 10.
LOCK_DURATION = _dt.timedelta(seconds=60)
MAX_DELIVERY_COUNT = 10

class MessageState(StrEnum):
    """Where a stored message is in its life (the state file keeps these names)."""

    ACTIVE = "active"
    DEFERRED = "deferred"
    SCHEDULED = "scheduled"

    @property
    def code(self) -> int:
        """The value of the ``x-opt-message-state`` annotation (docs/protocol.md §6)."""
        return _STATE_CODES[self]


_STATE_CODES = {MessageState.ACTIVE: 0, MessageState.DEFERRED: 1, MessageState.SCHEDULED: 2}


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


class OperationError(SbrulesError):
    """A request the namespace refuses, with the status and AMQP condition the service uses."""

    def __init__(self, status: int, condition: str, description: str):
        super().__init__(description)
        self.status = status
        self.condition = condition
        self.description = description


def not_found(description: str) -> OperationError:
    return OperationError(404, "amqp:not-found", description)


def lock_lost(description: str) -> OperationError:
    return OperationError(410, "com.microsoft:message-lock-lost", description)


def bad_request(description: str) -> OperationError:
    return OperationError(400, "com.microsoft:argument-error", description)


@dataclass
class StoredMessage:
    """One message in an entity's store; ``payload`` is the AMQP encoding without broker annotations."""

    sequence_number: int
    enqueued_time: _dt.datetime
    payload: bytes
    session_id: str | None = None
    message_id: str | None = None
    state: MessageState = MessageState.ACTIVE
    scheduled_time: _dt.datetime | None = None
    delivery_count: int = 0
    lock_token: uuid.UUID | None = None
    locked_until: _dt.datetime | None = None
    dead_letter_source: str | None = None
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    #: Enqueued time + the message's time-to-live; expired messages are dropped (the service default).
    expires_at: _dt.datetime | None = None
    #: Application properties to set on the next delivery (update-disposition properties-to-modify).
    modified_properties: dict = field(default_factory=dict)
    #: The payload split for writing out (set when stored, else on first use; shared by the copies
    #: of one published message in several subscriptions).
    parts: OutgoingParts | None = field(default=None, compare=False, repr=False)

    def visible(self, now: _dt.datetime) -> bool:
        """Receivable now: active, not expired and not locked by anyone."""
        if self.state is not MessageState.ACTIVE or (self.expires_at is not None and self.expires_at <= now):
            return False
        return self.locked_until is None or self.locked_until <= now


@dataclass
class SessionInfo:
    state: bytes | None = None
    lock_owner: object | None = None
    locked_until: _dt.datetime | None = None
    updated: _dt.datetime = field(default_factory=utcnow)

    def locked(self, now: _dt.datetime) -> bool:
        return self.lock_owner is not None and self.locked_until is not None and self.locked_until > now


class MessageStore:
    """Messages of one entity (a queue, a subscription, a dead-letter queue, a topic's schedule)."""

    def __init__(
        self, path: str, dead_letters: "MessageStore | None" = None, timed: "set[MessageStore] | None" = None,
        partitions: int = 1,
    ) -> None:
        self.path = path
        #: Where dead-lettered messages go (None for dead-letter queues and topics' schedules).
        self.dead_letters = dead_letters
        self.next_sequence = 1
        #: A partitioned entity's partitions (1: not partitioned): see ``take_number``.
        self.partitions = partitions
        self._partition_next = [1] * partitions
        self._round_robin = 0
        self.messages: dict[int, StoredMessage] = {}
        self.locks: dict[uuid.UUID, int] = {}
        self.sessions: dict[str, SessionInfo] = {}
        #: Sequence numbers of scheduled messages (so the broker's tick need not scan every message).
        self.scheduled: set[int] = set()
        #: Sequence numbers of messages with a time-to-live.
        self.expiring: set[int] = set()
        #: The sequence numbers of ``messages`` in order, kept until a message leaves (see ``from_sequence``).
        self._order: list[int] | None = None
        #: The namespace's stores with timed work (scheduled messages, time-to-live, locks), which
        #: this store joins when it gets some: the broker's tick visits only those, not every store.
        self.timed = timed if timed is not None else set()

    @property
    def has_timed_work(self) -> bool:
        return bool(self.scheduled or self.expiring or self.locks)

    def schedule(self, stored: StoredMessage) -> None:
        """Track a stored message's schedule and time-to-live for the broker's tick."""
        if stored.state is MessageState.SCHEDULED:
            self.scheduled.add(stored.sequence_number)
        if stored.expires_at is not None:
            self.expiring.add(stored.sequence_number)
        if self.scheduled or self.expiring:
            self.timed.add(self)

    # -- enqueue ------------------------------------------------------------------------------
    def enqueue(
        self,
        payload: bytes,
        *,
        session_id: str | None = None,
        message_id: str | None = None,
        scheduled_time: _dt.datetime | None = None,
        ttl: float | None = None,
        now: _dt.datetime | None = None,
        parts: OutgoingParts | None = None,
        sequence_number: int | None = None,
    ) -> StoredMessage:
        """Store a message under ``sequence_number``, or the store's next one (a subscription's copy
        carries the number its topic gave the message: ``Routing.route``)."""
        now = now or utcnow()
        stored = StoredMessage(
            sequence_number=self.take_number(session_id) if sequence_number is None else sequence_number,
            enqueued_time=now,
            payload=payload,
            parts=parts,
            session_id=session_id,
            message_id=message_id,
            expires_at=now + _dt.timedelta(seconds=ttl) if ttl else None,
        )
        if scheduled_time is not None and scheduled_time > now:
            stored.state = MessageState.SCHEDULED
            stored.scheduled_time = scheduled_time
        self.restore(stored)
        return stored

    def take_number(self, session_id: str | None) -> int:
        """The next sequence number. In a partitioned entity each partition numbers its own messages
        and the partition's number is the top 16 bits, as at the service; a session's messages share
        a partition, others go round the partitions."""
        if self.partitions == 1:
            self.next_sequence += 1
            return self.next_sequence - 1
        if session_id is not None:
            partition = zlib.crc32(session_id.encode()) % self.partitions
        else:
            partition, self._round_robin = self._round_robin, (self._round_robin + 1) % self.partitions
        self._partition_next[partition] += 1
        return (partition << PARTITION_SHIFT) + self._partition_next[partition] - 1

    def restore(self, stored: StoredMessage) -> None:
        """Put ``stored`` in the store under its own sequence number (enqueue, or loading saved state)."""
        order = self._order
        if order is not None and (not order or order[-1] < stored.sequence_number):
            order.append(stored.sequence_number)
        else:
            self._order = None
        self.messages[stored.sequence_number] = stored
        self.schedule(stored)
        if stored.session_id is not None:
            self.sessions.setdefault(stored.session_id, SessionInfo())

    def from_sequence(self, first: int) -> Iterator[StoredMessage]:
        """The messages numbered ``first`` or more, in order (a peek's scan, without sorting the store
        each time: the order is kept while messages only arrive, and rebuilt after one leaves)."""
        if self._order is None:
            self._order = sorted(self.messages)
        order, messages = self._order, self.messages
        for index in range(bisect_left(order, first), len(order)):
            stored = messages.get(order[index])
            if stored is not None:
                yield stored

    def due_scheduled(self, now: _dt.datetime) -> list[StoredMessage]:
        return [m for m in (self.messages[n] for n in sorted(self.scheduled)) if (m.scheduled_time or now) <= now]

    def activate(self, stored: StoredMessage, now: _dt.datetime, ttl: float | None) -> None:
        """A scheduled message whose time has come becomes an ordinary active message, enqueued now."""
        self.scheduled.discard(stored.sequence_number)
        stored.state = MessageState.ACTIVE
        stored.scheduled_time = None
        stored.enqueued_time = now
        stored.expires_at = now + _dt.timedelta(seconds=ttl) if ttl else None
        self.schedule(stored)

    # -- receive ------------------------------------------------------------------------------
    def drop_expired(self, now: _dt.datetime) -> int:
        """Remove active messages whose time-to-live has passed (locked ones wait for their lock)."""
        candidates = (self.messages[n] for n in sorted(self.expiring) if n in self.messages)
        expired = [
            m.sequence_number for m in candidates
            if m.expires_at is not None and m.expires_at <= now and m.state is MessageState.ACTIVE and m.lock_token is None
        ]
        for number in expired:
            self.remove(number)
        return len(expired)

    def next_visible(
        self, now: _dt.datetime, session_id: str | None = None, sessionful: bool = False
    ) -> StoredMessage | None:
        for stored in self.messages.values():
            if not stored.visible(now):
                continue
            if sessionful and stored.session_id != session_id:
                continue
            if not sessionful and stored.session_id is not None and self._session_locked(stored.session_id, now):
                continue
            return stored
        return None

    def _session_locked(self, session_id: str, now: _dt.datetime) -> bool:
        info = self.sessions.get(session_id)
        return info is not None and info.locked(now)

    def lock(self, stored: StoredMessage, now: _dt.datetime, duration: _dt.timedelta = LOCK_DURATION) -> uuid.UUID:
        token = uuid.uuid4()
        stored.lock_token = token
        stored.locked_until = now + duration
        stored.delivery_count += 1
        self.locks[token] = stored.sequence_number
        self.timed.add(self)
        return token

    def locked_message(self, token: uuid.UUID, now: _dt.datetime | None = None) -> StoredMessage:
        now = now or utcnow()
        seq = self.locks.get(token)
        stored = self.messages.get(seq) if seq is not None else None
        if stored is None or stored.lock_token != token or stored.locked_until is None or stored.locked_until <= now:
            raise lock_lost(
                "The lock supplied is invalid. Either the lock expired, "
                "or the message has already been removed from the queue."
            )
        return stored

    def unlock(self, stored: StoredMessage) -> None:
        if stored.lock_token is not None:
            self.locks.pop(stored.lock_token, None)
        stored.lock_token = None
        stored.locked_until = None

    def remove(self, sequence_number: int) -> StoredMessage | None:
        stored = self.messages.pop(sequence_number, None)
        self._order = None
        self.scheduled.discard(sequence_number)
        self.expiring.discard(sequence_number)
        if stored is not None:
            self.unlock(stored)
        return stored

    def expire_locks(self, now: _dt.datetime) -> list[StoredMessage]:
        locked = (self.messages.get(n) for n in list(self.locks.values()))
        expired = [m for m in locked if m is not None and m.locked_until is not None and m.locked_until <= now]
        for stored in expired:
            self.unlock(stored)
        return expired

@dataclass
class RuleEntry:
    rule: Rule
    created_at: _dt.datetime


class Subscription:
    def __init__(self, topic: str, name: str, timed: set[MessageStore] | None = None, partitions: int = 1) -> None:
        self.name = name
        self.path = f"{topic}/Subscriptions/{name}"
        self.rules: dict[str, RuleEntry] = {}
        self.created_at = utcnow()
        #: Entity properties the management REST API reports. With ``forward_to`` set the service
        #: refuses to browse the subscription: peek-message and enumerate-rules fail over AMQP.
        self.forward_to: str | None = None
        self.forward_dead_lettered_messages_to: str | None = None
        self.requires_session = False
        self.dead_letters = MessageStore(self.path + "/$DeadLetterQueue", timed=timed, partitions=partitions)
        self.store = MessageStore(self.path, self.dead_letters, timed, partitions)
        self.filter_errors = 0


class Topic:
    def __init__(self, name: str, partitions: int = 1) -> None:
        self.name = name
        self.path = name
        self.created_at = utcnow()
        self.subscriptions: dict[str, Subscription] = {}
        #: Scheduled messages sent to the topic wait here, with the topic's own sequence numbers; its
        #: partitions are the topic's and its subscriptions' (1: not partitioned).
        self.store = MessageStore(name, partitions=partitions)


class Queue:
    def __init__(self, name: str, timed: set[MessageStore] | None = None) -> None:
        self.name = name
        self.path = name
        self.dead_letters = MessageStore(name + "/$DeadLetterQueue", timed=timed)
        self.store = MessageStore(name, self.dead_letters, timed)


@dataclass(frozen=True)
class Address:
    """A parsed link address: the entity and which node of it (messages, dead letters, $management)."""

    entity_path: str  # "topic", "topic/Subscriptions/sub", "queue"
    topic: str | None
    subscription: str | None
    queue_or_topic: str
    dead_letter: bool = False
    management: bool = False

    @property
    def node(self) -> str:
        suffix = "/$DeadLetterQueue" if self.dead_letter else ""
        return self.entity_path + suffix + ("/$management" if self.management else "")


def address_path(address: str) -> str:
    """The path part of a link address or audience: ``amqps://host:port/a/b`` → ``a/b``."""
    text = address.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
        text = text.split("/", 1)[1] if "/" in text else ""
    return text.strip("/")


def parse_address(address: str) -> Address:
    """Parse an entity address; raises OperationError(404) for shapes Service Bus does not have.

    Topic and queue names are paths (``a/b``), as the service's are: an address is a subscription's
    when its last-but-one segment is ``Subscriptions`` (the topic being every segment before it),
    otherwise the whole path is a topic's or queue's."""
    parts = [p for p in address_path(address).split("/") if p]
    management = bool(parts) and same_name(parts[-1], "$management")
    if management:
        parts = parts[:-1]
    dead_letter = bool(parts) and same_name(parts[-1], "$deadletterqueue")
    if dead_letter:
        parts = parts[:-1]
    if len(parts) >= 3 and same_name(parts[-2], "subscriptions"):
        topic = "/".join(parts[:-2])
        return Address(f"{topic}/Subscriptions/{parts[-1]}", topic, parts[-1], topic, dead_letter, management)
    if len(parts) == 1 or (parts and not any(p.startswith("$") for p in parts)):
        path = "/".join(parts)
        return Address(path, None, None, path, dead_letter, management)
    raise not_found(f"The messaging entity '{address}' could not be found.")


class Namespace:
    """A Service Bus namespace in memory. Every public method is thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.topics: dict[str, Topic] = {}
        self.queues: dict[str, Queue] = {}
        #: Stores of subscriptions and queues that have timed work (see MessageStore.timed).
        self.timed_stores: set[MessageStore] = set()
        self._listeners: list[Callable[[], None]] = []

    # -- change notification (persistence, receivers waiting for messages) -------------------
    def on_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def touch(self) -> None:
        for callback in self._listeners:
            callback()

    # -- entities ----------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1) -> Topic:
        """Create a topic (``partitions`` > 1: a partitioned one; not kept in the state file)."""
        _check_name(name, EntityKind.TOPIC)
        with self.lock:
            key = name_key(name)
            if key in self.queues:
                raise OperationError(409, "com.microsoft:entity-already-exists", f"'{name}' is a queue")
            topic = self.topics.setdefault(key, Topic(name, partitions))
            self.touch()
            return topic

    def create_queue(self, name: str) -> Queue:
        _check_name(name, EntityKind.QUEUE)
        with self.lock:
            key = name_key(name)
            if key in self.topics:
                raise OperationError(409, "com.microsoft:entity-already-exists", f"'{name}' is a topic")
            queue = self.queues.get(key) or self.queues.setdefault(key, Queue(name, self.timed_stores))
            self.touch()
            return queue

    def create_subscription(
        self,
        topic: str,
        name: str,
        rules: Iterable[Rule] | None = None,
        *,
        forward_to: str | None = None,
        forward_dead_lettered_messages_to: str | None = None,
        requires_session: bool = False,
    ) -> Subscription:
        """Create (or reset the rules and properties of) a subscription; with ``rules=None`` it gets ``$Default``."""
        _check_name(name, EntityKind.SUBSCRIPTION)
        for target in (forward_to, forward_dead_lettered_messages_to):
            if target is not None:
                _check_name(target, EntityKind.QUEUE)
        with self.lock:
            top = self.topics.get(name_key(topic)) or self.create_topic(topic)
            sub = top.subscriptions.get(name_key(name))
            if sub is None:
                sub = top.subscriptions[name_key(name)] = Subscription(top.name, name, self.timed_stores, top.store.partitions)
            now = utcnow()
            chosen = list(rules) if rules is not None else [Rule(DEFAULT_RULE_NAME, TrueFilter(), EmptyAction())]
            sub.rules = {name_key(r.name): RuleEntry(r, now) for r in chosen}
            sub.forward_to = forward_to
            sub.forward_dead_lettered_messages_to = forward_dead_lettered_messages_to
            sub.requires_session = requires_session
            self.touch()
            return sub

    def update_subscription(
        self, topic: str, name: str, *, forward_to: str | None, forward_dead_lettered_messages_to: str | None
    ) -> Subscription:
        """Change where an existing subscription forwards to; its rules and messages stay."""
        for target in (forward_to, forward_dead_lettered_messages_to):
            if target is not None:
                _check_name(target, EntityKind.QUEUE)
        with self.lock:
            sub = self.subscription(topic, name)
            sub.forward_to, sub.forward_dead_lettered_messages_to = forward_to, forward_dead_lettered_messages_to
            self.touch()
            return sub

    def delete_subscription(self, topic: str, name: str) -> None:
        with self.lock:
            top = self.topic(topic)
            sub = top.subscriptions.pop(name_key(name), None)
            if sub is None:
                raise not_found(f"The messaging entity '{topic}/Subscriptions/{name}' could not be found.")
            self.timed_stores.difference_update((sub.store, sub.dead_letters))
            self.touch()

    def seed(self, desired: model.DesiredState) -> None:
        """Create every declared topic and subscription; subscriptions without rules get ``$Default``."""
        with self.lock:
            for topic, sub in desired.subscriptions():
                self.create_subscription(topic.name, sub.name, sub.rules)
            for topic in desired.topics:
                self.create_topic(topic.name)

    def topic(self, name: str) -> Topic:
        with self.lock:
            top = self.topics.get(name_key(name))
            if top is None:
                raise not_found(f"The messaging entity '{name}' could not be found.")
            return top

    def subscription(self, topic: str, name: str) -> Subscription:
        with self.lock:
            sub = self.topic(topic).subscriptions.get(name_key(name))
            if sub is None:
                raise not_found(f"The messaging entity '{topic}/Subscriptions/{name}' could not be found.")
            return sub

    def queue(self, name: str) -> Queue:
        with self.lock:
            queue = self.queues.get(name_key(name))
            if queue is None:
                raise not_found(f"The messaging entity '{name}' could not be found.")
            return queue

    def entity(self, address: Address) -> Topic | Subscription | Queue:
        """The entity an address names (404 when it does not exist)."""
        with self.lock:
            if address.subscription is not None:
                return self.subscription(address.topic or "", address.subscription)
            key = name_key(address.entity_path)
            if key in self.queues:
                return self.queues[key]
            return self.topic(address.entity_path)

    def store(self, address: Address) -> MessageStore:
        """The message store a receiver or peek on ``address`` reads."""
        entity = self.entity(address)
        if address.dead_letter:
            if isinstance(entity, Topic):
                raise not_found(f"The messaging entity '{address.node}' could not be found.")
            return entity.dead_letters
        return entity.store

    # -- rules -------------------------------------------------------------------------------
    def rules(self, topic: str, subscription: str) -> list[Rule]:
        """The subscription's rules in creation order (test API)."""
        with self.lock:
            return [entry.rule for entry in self.subscription(topic, subscription).rules.values()]

    def add_rule(self, topic: str, subscription: str, rule: Rule) -> None:
        with self.lock:
            sub = self.subscription(topic, subscription)
            key = name_key(rule.name)
            if key in sub.rules:
                raise OperationError(
                    409,
                    "com.microsoft:entity-already-exists",
                    f"The messaging entity '{sub.path}|{rule.name}' already exists.",
                )
            sub.rules[key] = RuleEntry(rule, utcnow())
            self.touch()

    def update_rule(self, topic: str, subscription: str, rule: Rule) -> None:
        """Give an existing rule a new filter and action; it keeps its name and creation time."""
        with self.lock:
            sub = self.subscription(topic, subscription)
            key = name_key(rule.name)
            entry = sub.rules.get(key)
            if entry is None:
                raise not_found(f"The messaging entity '{sub.path}|{rule.name}' could not be found.")
            sub.rules[key] = RuleEntry(replace(rule, name=entry.rule.name), entry.created_at)  # a new entry: routers see it
            self.touch()

    def remove_rule(self, topic: str, subscription: str, name: str) -> None:
        with self.lock:
            sub = self.subscription(topic, subscription)
            if sub.rules.pop(name_key(name), None) is None:
                raise not_found(f"The messaging entity '{sub.path}|{name}' could not be found.")
            self.touch()


def _check_name(name: str, kind: EntityKind) -> None:
    problem = name_problem(kind, name)
    if problem:
        raise bad_request(problem)
