"""The one model every part of sbrules speaks: rules, filters, actions, typed values, messages.

Everything here is an immutable value. YAML loading, the AMQP codec, the planner, the emulator and
the Spark translation all convert to and from these classes; nothing else crosses module borders.

Typed values (``reconciler.typed_values``, re-exported here) keep their AMQP type because Service
Bus correlation filters compare with ``object.Equals``: int 3 (32-bit) does not match long 3
(64-bit). The *typed form* is the one spelling of a typed value used in rule files, sample
messages, plans and exports: a plain scalar means string, long, double, bool or null; a one-key map
such as ``{int: 3}`` names the type.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reconciler.names import name_key, same_name
from reconciler.owners import NO_OWNERS, Owners
from reconciler.typed_values import (  # noqa: F401 - the model's typed values live there
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    NonFiniteValueError,
    TypedValue,
    TypedValueError,
    ValueType,
    read_typed_form,
    typed_properties,
)

DEFAULT_RULE_NAME = "$Default"


# ------------------------------------------------------------------------------------------------
# Filters and actions
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlFilter:
    """A SQL filter expression, kept as written; the planner compares canonical forms."""

    expression: str


#: Correlation filter system fields in wire order (the order of the described list on the wire).
CORRELATION_FIELDS = (
    "correlation_id",
    "message_id",
    "to",
    "reply_to",
    "subject",
    "session_id",
    "reply_to_session_id",
    "content_type",
)


@dataclass(frozen=True)
class CorrelationFilter:
    """Exact-match filter on system fields and typed application properties (AND of all set fields)."""

    correlation_id: str | None = None
    message_id: str | None = None
    to: str | None = None
    reply_to: str | None = None
    subject: str | None = None
    session_id: str | None = None
    reply_to_session_id: str | None = None
    content_type: str | None = None
    properties: tuple[tuple[str, TypedValue], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", typed_properties(self.properties))

    @property
    def property_map(self) -> dict[str, TypedValue]:
        return dict(self.properties)

    def system_fields(self) -> dict[str, str]:
        """The set system fields, by model name, in wire order."""
        return {name: getattr(self, name) for name in CORRELATION_FIELDS if getattr(self, name) is not None}

    def is_empty(self) -> bool:
        return not self.system_fields() and not self.properties


@dataclass(frozen=True)
class TrueFilter:
    """Matches every message (``1=1``); the service's ``$Default`` rule uses it."""


@dataclass(frozen=True)
class FalseFilter:
    """Matches no message (``1=0``)."""


Filter = SqlFilter | CorrelationFilter | TrueFilter | FalseFilter


@dataclass(frozen=True)
class SqlRuleAction:
    """A SQL rule action (``SET``/``REMOVE`` statements) applied to the copy a rule delivers."""

    expression: str


@dataclass(frozen=True)
class EmptyAction:
    """No action: the rule delivers the message unchanged."""


Action = SqlRuleAction | EmptyAction
#: The one empty action every rule without an action shares (it is a value: all are equal).
NO_ACTION = EmptyAction()


@dataclass(frozen=True)
class Origin:
    """Where a declaration was written: file, 1-based line and column. Never part of equality."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Rule:
    """One subscription rule: a name, a filter and an optional action."""

    name: str
    filter: Filter
    action: Action = NO_ACTION
    origin: Origin | None = field(default=None, compare=False, repr=False)
    #: Locations of the filter / action text (for carets under SQL errors).
    filter_origin: Origin | None = field(default=None, compare=False, repr=False)
    action_origin: Origin | None = field(default=None, compare=False, repr=False)
    #: When the service created the live rule (enumerate-rules' created-at); None for a declared
    #: rule, or where the service did not say. Never part of equality.
    created_at: _dt.datetime | None = field(default=None, compare=False, repr=False)

    @property
    def has_action(self) -> bool:
        return isinstance(self.action, SqlRuleAction)


@dataclass(frozen=True)
class Subscription:
    """A declared subscription. ``rules is None`` means the files state no opinion (unmanaged)."""

    name: str
    rules: tuple[Rule, ...] | None = None
    allow_empty: bool = False
    #: the catch-all subscription ``sbrules sample`` peeks: it receives everything, so routing
    #: analysis does not count it as a receiver (it would hide every routing gap)
    sampling_tap: bool = False
    #: sbrules owns its one rule, generated from the topic's other subscriptions so that it
    #: receives exactly the messages no other subscription receives (reconciler.sql.fallthrough)
    fallthrough: bool = False
    origin: Origin | None = field(default=None, compare=False, repr=False)
    #: The rule-name patterns sbrules owns here (``owns:``); None: the declared rules are the
    #: complete set. Live rules no pattern matches are foreign: never changed, never drift.
    owns: tuple[str, ...] | None = None

    @property
    def managed(self) -> bool:
        return self.rules is not None

    def rule(self, name: str) -> Rule | None:
        for rule in self.rules or ():
            if same_name(rule.name, name):
                return rule
        return None


@dataclass(frozen=True)
class Topic:
    name: str
    subscriptions: tuple[Subscription, ...] = ()
    origin: Origin | None = field(default=None, compare=False, repr=False)
    #: The name the rule files declare, where an environment renames the topic to ``name``.
    declared: str | None = field(default=None, compare=False)

    def subscription(self, name: str) -> Subscription | None:
        for sub in self.subscriptions:
            if same_name(sub.name, name):
                return sub
        return None


@dataclass(frozen=True)
class DesiredState:
    """Everything the rule files declare."""

    topics: tuple[Topic, ...] = ()
    #: sbrules.yaml's ``owners:``: who owns what sbrules does not (labels, and --strict).
    owners: Owners = NO_OWNERS

    def topic(self, name: str) -> Topic | None:
        for topic in self.topics:
            if same_name(topic.name, name):
                return topic
        return None

    def subscriptions(self) -> Iterable[tuple[Topic, Subscription]]:
        for topic in self.topics:
            for sub in topic.subscriptions:
                yield topic, sub


# ------------------------------------------------------------------------------------------------
# The rule-file form of a rule: the one rule document. Rule files, plans, exports and `rules list`
# all write it; JSON and YAML are two serialisations of it.
# ------------------------------------------------------------------------------------------------

#: Rule-file correlation keys (``label`` is accepted as an alias of ``subject``).
CORRELATION_ALIASES = {"label": "subject"}


class RuleFormError(ValueError):
    """A rule document that does not describe a rule; ``path`` names the offending key."""

    def __init__(self, message: str, path: tuple[str | int, ...] = ()):
        super().__init__(message)
        self.path = path


def rule_to_doc(rule: Rule, *, explicit_types: bool = False) -> dict[str, Any]:
    """A rule in the rule files' form: ``name``, one of ``sql`` / ``correlation`` / ``filter``, ``action``.

    Correlation properties are in the typed form: typed where a plain scalar would mislead
    (``{int: 3}``), or every one typed with ``explicit_types`` (``{long: 3}``).
    """
    doc: dict[str, Any] = {"name": rule.name}
    flt = rule.filter
    if isinstance(flt, SqlFilter):
        doc["sql"] = flt.expression
    elif isinstance(flt, (TrueFilter, FalseFilter)):
        doc["filter"] = isinstance(flt, TrueFilter)
    else:
        correlation: dict[str, Any] = dict(flt.system_fields())
        if flt.properties:
            correlation["properties"] = {k: v.to_typed_form(explicit=explicit_types) for k, v in flt.properties}
        doc["correlation"] = correlation
    if isinstance(rule.action, SqlRuleAction):
        doc["action"] = rule.action.expression
    return doc


def _properties_from_doc(props: Mapping[str, Any], path: tuple[str, ...], finite: bool) -> tuple[tuple[str, TypedValue], ...]:
    """Each property's typed value; the first that is not one is a RuleFormError at that property."""
    out = []
    for name, raw in props.items():
        try:
            out.append((str(name), read_typed_form(raw, finite=finite)))
        except TypedValueError as exc:
            raise RuleFormError(f"property {name!r}: {exc}", (*path, name)) from exc
    return tuple(out)


def correlation_from_doc(doc: Mapping[str, Any], *, finite: bool = False) -> CorrelationFilter:
    """A correlation filter from its rule-file form (``finite``: see TypedValue.from_typed_form)."""
    fields: dict[str, Any] = {}
    for key, value in doc.items():
        name = CORRELATION_ALIASES.get(key, key)
        if name == "properties":
            if not isinstance(value, Mapping):
                raise RuleFormError("correlation properties must be a map", ("correlation", key))
            fields["properties"] = _properties_from_doc(value, ("correlation", key), finite)
        elif name in CORRELATION_FIELDS:
            if name in fields:
                raise RuleFormError(f"{key!r} repeats {name!r}", ("correlation", key))
            if value is not None and not isinstance(value, str):
                raise RuleFormError(f"correlation field {key!r} must be a string", ("correlation", key))
            fields[name] = value
        else:
            raise RuleFormError(f"unknown correlation field {key!r}", ("correlation", key))
    return CorrelationFilter(**fields)


def rule_from_doc(
    doc: Mapping[str, Any],
    *,
    finite: bool = False,
    origin: Origin | None = None,
    filter_origin: Origin | None = None,
    action_origin: Origin | None = None,
) -> Rule:
    """Build a Rule from its rule-file form (after schema validation, so errors here are rare);
    ``finite`` refuses NaN and infinities in its values, for rules a person declares, and the
    origins say where it was written."""
    name = doc.get("name")
    if not isinstance(name, str):
        raise RuleFormError("a rule needs a string 'name'", ("name",))
    kinds = [k for k in ("sql", "correlation", "filter") if k in doc]
    if len(kinds) != 1:
        raise RuleFormError(
            f"rule {name!r} needs exactly one of sql, correlation, filter (got {', '.join(kinds) or 'none'})"
        )
    kind = kinds[0]
    flt: Filter
    if kind == "sql":
        flt = SqlFilter(str(doc["sql"]))
    elif kind == "filter":
        if not isinstance(doc["filter"], bool):
            raise RuleFormError("filter: must be true or false", ("filter",))
        flt = TrueFilter() if doc["filter"] else FalseFilter()
    else:
        if not isinstance(doc["correlation"], Mapping):
            raise RuleFormError("correlation: must be a map", ("correlation",))
        flt = correlation_from_doc(doc["correlation"], finite=finite)
    action_text = doc.get("action")
    action: Action = SqlRuleAction(str(action_text)) if action_text is not None else NO_ACTION
    return Rule(name, flt, action, origin, filter_origin, action_origin)


# ------------------------------------------------------------------------------------------------
# Messages (what filters are evaluated against)
# ------------------------------------------------------------------------------------------------

class WireSection(StrEnum):
    """The part of an AMQP message a system property travels in (docs/protocol.md §6, §7)."""

    HEADER = "header"
    PROPERTIES = "properties"
    ANNOTATIONS = "message-annotations"


@dataclass(frozen=True)
class WireField:
    """A field of an AMQP message: its section and its name there (an annotation's key)."""

    section: WireSection
    name: str


@dataclass(frozen=True)
class SystemProperty:
    """One ``sys.`` property: its SQL (BrokeredMessage) name, type, sample column and AMQP field.

    ``wire`` is None for properties the broker computes and never sends. ``settable`` properties
    may be SET by a rule action. ``correlation`` is the CorrelationFilter field that matches it.
    """

    name: str
    type: ValueType
    column: str
    wire: WireField | None
    settable: bool = False
    correlation: str | None = None


def _s(name: str) -> WireField:
    return WireField(WireSection.PROPERTIES, name)


def _h(name: str) -> WireField:
    return WireField(WireSection.HEADER, name)


def _a(name: str) -> WireField:
    return WireField(WireSection.ANNOTATIONS, name)

#: The one table of system properties; every other view of them is derived from it.
SYSTEM_PROPERTY_TABLE: tuple[SystemProperty, ...] = (
    SystemProperty("MessageId", ValueType.STRING, "message_id", _s("message-id"), True, "message_id"),
    SystemProperty("CorrelationId", ValueType.STRING, "correlation_id", _s("correlation-id"), True, "correlation_id"),
    SystemProperty("To", ValueType.STRING, "to", _s("to"), True, "to"),
    SystemProperty("ReplyTo", ValueType.STRING, "reply_to", _s("reply-to"), True, "reply_to"),
    SystemProperty("Label", ValueType.STRING, "subject", _s("subject"), True, "subject"),
    SystemProperty("SessionId", ValueType.STRING, "session_id", _s("group-id"), True, "session_id"),
    SystemProperty(
        "ReplyToSessionId", ValueType.STRING, "reply_to_session_id", _s("reply-to-group-id"), True, "reply_to_session_id"
    ),
    SystemProperty("ContentType", ValueType.STRING, "content_type", _s("content-type"), True, "content_type"),
    SystemProperty("PartitionKey", ValueType.STRING, "partition_key", _a("x-opt-partition-key"), True),
    SystemProperty("ViaPartitionKey", ValueType.STRING, "via_partition_key", _a("x-opt-via-partition-key"), True),
    SystemProperty("DeadLetterSource", ValueType.STRING, "dead_letter_source", _a("x-opt-deadletter-source")),
    SystemProperty("SequenceNumber", ValueType.LONG, "sequence_number", _a("x-opt-sequence-number")),
    SystemProperty(
        "EnqueuedSequenceNumber", ValueType.LONG, "enqueued_sequence_number", _a("x-opt-enqueue-sequence-number")
    ),
    SystemProperty("Size", ValueType.LONG, "size", None),
    SystemProperty("DeliveryCount", ValueType.INT, "delivery_count", _h("delivery-count")),
    SystemProperty("EnqueuedTimeUtc", ValueType.TIMESTAMP, "enqueued_time", _a("x-opt-enqueued-time")),
    SystemProperty("ExpiresAtUtc", ValueType.TIMESTAMP, "expires_at", _s("absolute-expiry-time")),
    SystemProperty(
        "ScheduledEnqueueTimeUtc", ValueType.TIMESTAMP, "scheduled_enqueue_time", _a("x-opt-scheduled-enqueue-time"), True
    ),
    SystemProperty("LockedUntilUtc", ValueType.TIMESTAMP, "locked_until", _a("x-opt-locked-until")),
    SystemProperty("LockToken", ValueType.UUID, "lock_token", _a("x-opt-lock-token")),
    SystemProperty("ForcePersistence", ValueType.BOOL, "force_persistence", None, True),
    # seconds, the broker's TimeSpan; milliseconds in the header's ttl
    SystemProperty("TimeToLive", ValueType.DOUBLE, "time_to_live", _h("ttl"), True),
)

#: A partitioned entity's sequence numbers carry the partition's number in their top 16 bits (above
#: this many), each partition numbering its own messages; peeks walk the partitions in that order.
PARTITION_SHIFT = 48

#: System property name → its entry.
SYSTEM_PROPERTY: dict[str, SystemProperty] = {prop.name: prop for prop in SYSTEM_PROPERTY_TABLE}
#: System property name → the type it carries.
SYSTEM_PROPERTIES: dict[str, ValueType] = {prop.name: prop.type for prop in SYSTEM_PROPERTY_TABLE}
#: The system properties a rule action may SET (BrokeredMessage properties with a public setter).
SETTABLE_SYSTEM_PROPERTIES = frozenset(prop.name for prop in SYSTEM_PROPERTY_TABLE if prop.settable)

#: Correlation-filter model field → system property name.
CORRELATION_SYS_NAMES = {prop.correlation: prop.name for prop in SYSTEM_PROPERTY_TABLE if prop.correlation}
assert set(CORRELATION_SYS_NAMES) == set(CORRELATION_FIELDS), "every correlation field matches a system property"

_SYS_BY_KEY = {name_key(name): name for name in SYSTEM_PROPERTIES}
_SYS_BY_KEY[name_key("subject")] = "Label"


def system_property_name(name: str) -> str | None:
    """The canonical BrokeredMessage name for ``name`` (case-insensitive), or None if unknown."""
    return _SYS_BY_KEY.get(name_key(name))


@dataclass(frozen=True)
class Message:
    """A message as filters see it: system properties and application (user) properties, typed.

    ``sys`` is keyed by canonical system property name (see SYSTEM_PROPERTIES); an unset system
    property is simply absent here and reads as null. ``user`` keeps the publisher's key case; a
    key absent from ``user`` is a *missing* property (UNKNOWN in SQL), a key mapped to a NULL
    TypedValue is present-with-null.
    """

    sys: Mapping[str, TypedValue] = field(default_factory=dict)
    user: Mapping[str, TypedValue] = field(default_factory=dict)
    body: bytes = b""

    def user_property(self, name: str) -> TypedValue | None:
        """Case-insensitive lookup; None when the property does not exist."""
        if name in self.user:
            return self.user[name]
        wanted = name_key(name)
        for key, value in self.user.items():
            if name_key(key) == wanted:
                return value
        return None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Message":
        """Read ``{"sys": {...}, "user": {...}}`` with values in the typed form."""
        if not isinstance(doc, Mapping):
            raise TypedValueError('a message is an object {"sys": {...}, "user": {...}}')
        unknown = set(doc) - {"sys", "user", "body"}
        if unknown:
            raise TypedValueError(f"unknown message keys: {', '.join(sorted(unknown))} (expected sys, user)")
        sys_in = doc.get("sys") or {}
        user_in = doc.get("user") or {}
        if not isinstance(sys_in, Mapping) or not isinstance(user_in, Mapping):
            raise TypedValueError("'sys' and 'user' must be objects")
        sys_props: dict[str, TypedValue] = {}
        for key, raw in sys_in.items():
            canonical = system_property_name(str(key))
            if canonical is None:
                raise TypedValueError(f"unknown system property {key!r}")
            tv = TypedValue.from_typed_form(raw)
            if tv.type is ValueType.NULL:
                continue
            expected = SYSTEM_PROPERTIES[canonical]
            if tv.type is not expected:
                tv = _retype_system_value(canonical, expected, tv)
            sys_props[canonical] = tv
        user_props = {str(k): TypedValue.from_typed_form(v) for k, v in user_in.items()}
        body = doc.get("body") or ""
        return cls(sys=sys_props, user=user_props, body=str(body).encode())

    def to_json(self) -> dict[str, Any]:
        return {
            "sys": {k: v.to_typed_form() for k, v in self.sys.items()},
            "user": {k: v.to_typed_form() for k, v in self.user.items()},
        }


def _retype_system_value(name: str, expected: ValueType, tv: TypedValue) -> TypedValue:
    """System properties have fixed types; accept the obvious plain spellings (e.g. 5 for an int)."""
    try:
        if expected in (ValueType.INT, ValueType.LONG, ValueType.DOUBLE) and tv.type in (
            ValueType.INT,
            ValueType.LONG,
            ValueType.DOUBLE,
        ):
            return TypedValue(expected, tv.value if expected is ValueType.DOUBLE else int(tv.value))
        if expected in (ValueType.TIMESTAMP, ValueType.UUID) and tv.type is ValueType.STRING:
            return TypedValue(expected, tv.value)
    except TypedValueError:
        pass
    raise TypedValueError(f"system property {name} is a {expected.value}, got {tv.describe()}")
