"""Service Bus limits and naming rules: the one table lint, plan, the SQL parser and the emulator use.

Each limit says what the broker counts and where the fact is written down (docs/protocol.md §8,
docs/sql-language.md §8). Name checks return the reason a name is refused, or None, so a caller
words the finding its own way (a located diagnostic, a 400 response, a validation error) without
restating the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from reconciler.model import FalseFilter, Filter, Rule, SqlFilter, SqlRuleAction, TrueFilter
from reconciler.names import name_key


@dataclass(frozen=True)
class Limit:
    """One service limit: its value, what the broker counts against it, and the doc that says so."""

    value: int
    counts: str
    source: str


SQL_TEXT = Limit(
    1024,
    "UTF-16 code units of one SQL filter's or SQL action's text (exactly 1,024 is accepted)",
    "docs/sql-language.md §8",
)
ACTION_STATEMENTS = Limit(32, "SET and REMOVE statements in one SQL action", "docs/sql-language.md §8")
SQL_STRING_RESULT = Limit(
    32_767, "UTF-16 code units of a string that an expression builds with +", "docs/sql-language.md §5, §8"
)
SQL_FILTERS_PER_TOPIC = Limit(
    2_000,
    "rules with a SQL, true or false filter, over all subscriptions of one topic",
    "docs/sql-language.md §8",
)
CORRELATION_FILTERS_PER_TOPIC = Limit(
    100_000, "rules with a correlation filter, over all subscriptions of one topic", "docs/sql-language.md §8"
)
RULE_NAME = Limit(50, "UTF-16 code units of a rule name", "docs/protocol.md §8")
SUBSCRIPTION_NAME = Limit(50, "UTF-16 code units of a subscription name", "docs/protocol.md §8")
TOPIC_NAME = Limit(260, "UTF-16 code units of a topic name (its whole path)", "docs/protocol.md §8")
QUEUE_NAME = Limit(260, "UTF-16 code units of a queue name (its whole path)", "docs/protocol.md §8")
SESSION_ID = Limit(128, "UTF-16 code units of a session id", "docs/protocol.md §8")


def dotnet_length(text: str) -> int:
    """A string's length as the service and its SDKs count it against every limit here: .NET's
    ``String.Length``, in UTF-16 code units, so a character outside the Basic Multilingual Plane
    (most emoji, some CJK) counts twice."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ch > "\uffff")


def sql_text_problem(text: str, what: str) -> str | None:
    """Why the service refuses ``text`` as a SQL ``what`` (filter or action) for its length, or None."""
    length = dotnet_length(text)
    if length > SQL_TEXT.value:
        return f"{what} is {length} characters long (UTF-16 code units, as .NET counts); the limit is {SQL_TEXT.value}"
    return None


def counts_as_sql_filter(flt: Filter) -> bool:
    """Whether a rule with ``flt`` counts against :data:`SQL_FILTERS_PER_TOPIC` (true and false filters
    are SQL filters to the broker), rather than against :data:`CORRELATION_FILTERS_PER_TOPIC`."""
    return isinstance(flt, (SqlFilter, TrueFilter, FalseFilter))


class EntityKind(StrEnum):
    """What a name names; each kind has its own length limit and characters."""

    TOPIC = "topic"
    QUEUE = "queue"
    SUBSCRIPTION = "subscription"
    RULE = "rule"


_NAME_LIMITS = {
    EntityKind.TOPIC: TOPIC_NAME,
    EntityKind.QUEUE: QUEUE_NAME,
    EntityKind.SUBSCRIPTION: SUBSCRIPTION_NAME,
    EntityKind.RULE: RULE_NAME,
}
#: Characters no name may contain: ``@ ? #`` are reserved in the URIs entities are addressed by, and
#: ``*`` is refused by the service. Rule and subscription names are single path segments, so ``/``
#: and ``\`` (which the clients turn into ``/``) are refused there too.
_FORBIDDEN = "@?#*"
_SEGMENT_FORBIDDEN = "/\\" + _FORBIDDEN


#: A name every kind accepts: at most 50 of the characters always allowed, not starting with ``/``
#: or ``$`` (the common case, checked first: validate checks 100,000 names at a time).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]{1,50}")


def name_problem(kind: EntityKind, name: str) -> str | None:
    """Why the service refuses ``name`` for a ``kind`` of entity, or None when it accepts it.

    Letters, digits, ``.``, ``_`` and ``-`` are always accepted. Topic and queue names are paths:
    ``/`` separates segments but may not start or end the name, and a leading ``$`` is reserved
    for the service's own nodes (``$management``, ``$cbs``, ``$DeadLetterQueue``). Rule names may
    start with ``$`` (``$Default``).
    """
    if isinstance(name, str) and _PLAIN_NAME.fullmatch(name):
        return None
    label = f"{kind.value} name"
    if not isinstance(name, str) or not name.strip():
        return f"{label} is empty"
    limit = _NAME_LIMITS[kind].value
    length = dotnet_length(name)
    if length > limit:
        return f"{label} {name!r} is {length} characters (UTF-16 code units, as .NET counts); the limit is {limit}"
    forbidden = _FORBIDDEN if kind in (EntityKind.TOPIC, EntityKind.QUEUE) else _SEGMENT_FORBIDDEN
    bad = sorted({ch for ch in name if ch in forbidden})
    if bad:
        allowed = " ".join(forbidden)
        return f"{label} {name!r} contains {' '.join(bad)}; these are not allowed: {allowed}"
    if kind is EntityKind.RULE:
        return None
    path = name.replace("\\", "/")
    if path.startswith("/") or path.endswith("/"):
        return f"{label} {name!r} starts or ends with /"
    if name.startswith("$"):
        return f"{label} {name!r} starts with $, which the service reserves for its own nodes"
    return None


#: sbrules' own reservation: the suffix of the temporary rule a gapless replace adds (``plan.ops``);
#: plan and apply take any live rule carrying it for the leftover of an interrupted apply, so no
#: declared rule may end with it. Rule names are case-insensitive, so neither is the suffix.
TEMP_RULE_SUFFIX = ".sbrules-tmp"


def is_temp_rule_name(name: str) -> bool:
    """Whether ``name`` is (or would be taken for) a temporary rule of sbrules."""
    return name_key(name).endswith(name_key(TEMP_RULE_SUFFIX))


#: sbrules' other reservation: the rules of the per-subscription apply lock (``reconciler.lock``)
#: are named this prefix and a generation number; plan, drift, export and apply's removal of
#: undeclared rules leave a lock alone, so no declared rule may start with it.
LOCK_RULE_PREFIX = "sbrules-lock."
#: The most digits a lock's generation may have: the name stays within the rule-name limit.
LOCK_GENERATION_DIGITS = RULE_NAME.value - len(LOCK_RULE_PREFIX)
_LOCK_NAME = re.compile(rf"(?ia){re.escape(LOCK_RULE_PREFIX)}([0-9]{{1,{LOCK_GENERATION_DIGITS}}})")
#: One ``SET sbrules_lock_FIELD = 'text'`` of a lock's action; a lock's action is only these.
LOCK_ACTION_FIELD = re.compile(r"\s*SET\s+sbrules_lock_([a-z]+)\s*=\s*'((?:[^']|'')*)'\s*(?:;|$)", re.IGNORECASE | re.ASCII)


def lock_generation(name: str) -> int | None:
    """The generation a lock rule of this name has (``sbrules-lock.`` + ASCII digits, within the
    rule-name limit), or None when no lock may have this name."""
    found = _LOCK_NAME.fullmatch(name)
    return int(found.group(1)) if found else None


def is_lock_rule_name(name: str) -> bool:
    """Whether a lock rule may have this name (the name alone does not make a rule a lock)."""
    return lock_generation(name) is not None


def lock_action_fields(expression: str) -> dict[str, str] | None:
    """The fields of a lock's action text (lower-case names), or None when the text is anything
    else than ``SET sbrules_lock_…`` statements carrying at least the run."""
    fields: dict[str, str] = {}
    at = 0
    for found in LOCK_ACTION_FIELD.finditer(expression):
        if found.start() != at:
            return None
        fields[found.group(1).lower()] = found.group(2).replace("''", "'")
        at = found.end()
    if expression[at:].strip() or "run" not in fields:
        return None
    return fields


def is_lock_rule(rule: Rule) -> bool:
    """Whether ``rule`` is an sbrules lock: a lock's name, the false filter, and sbrules' lock action.
    Anything else, whatever its name, is an ordinary rule."""
    return (
        is_lock_rule_name(rule.name)
        and is_false_filter(rule.filter)
        and isinstance(rule.action, SqlRuleAction)
        and lock_action_fields(rule.action.expression) is not None
    )


def looks_like_lock(rule: Rule) -> bool:
    """An ordinary rule under the lock prefix: shown like any other rule, with a warning."""
    return name_key(rule.name).startswith(name_key(LOCK_RULE_PREFIX)) and not is_lock_rule(rule)


def is_false_filter(flt: Filter) -> bool:
    """The false filter, or a SQL filter written as exactly ``1=0`` (what the service stores for it)."""
    return isinstance(flt, FalseFilter) or (isinstance(flt, SqlFilter) and "".join(flt.expression.split()) == "1=0")


def reserved_rule_name_problem(name: str) -> str | None:
    """Why sbrules refuses ``name`` for a declared rule (one of its own reservations), or None."""
    if is_temp_rule_name(name):
        return (f"rule name {name!r} ends with {TEMP_RULE_SUFFIX!r}, which sbrules reserves for the "
                "temporary rule of a gapless replace (plan and apply would take it for a leftover and remove it)")
    if name_key(name).startswith(name_key(LOCK_RULE_PREFIX)):
        return (f"rule name {name!r} starts with {LOCK_RULE_PREFIX!r}, which sbrules reserves for its apply "
                "lock (a rule named so is easily taken for a lock by people and by older versions of sbrules)")
    return None
