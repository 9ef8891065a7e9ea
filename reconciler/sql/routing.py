"""Which rules of a subscription match a message, and the copies the subscription receives.

``matches`` is the one entry point for all filter kinds (SQL, correlation, true, false); SQL
filters and actions are parsed and compiled once per distinct text. ``route_rules`` applies the
broker's delivery rule: action-less matching rules together yield one unchanged copy; each
matching rule with an action yields its own copy, with the action applied and a ``RuleName``
property naming the rule. Evaluation errors are recorded and deliver nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Container, Sequence

from reconciler.model import (
    CORRELATION_SYS_NAMES,
    CorrelationFilter,
    FalseFilter,
    Filter,
    Message,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.names import same_name
from reconciler.sql import values
from reconciler.sql.actions import CompiledAction
from reconciler.sql.errors import SqlError, SqlEvalError
from reconciler.sql.evaluator import CompiledFilter, MessageView, Outcome
from reconciler.sql.parser import parse_action, parse_filter

RULE_NAME_PROPERTY = "RuleName"
FALSE = Outcome(False)


@functools.lru_cache(maxsize=8192)
def compiled_filter(text: str) -> CompiledFilter:
    """The compiled form of a SQL filter text (raises SqlError)."""
    return CompiledFilter(parse_filter(text))


@functools.lru_cache(maxsize=8192)
def compiled_action(text: str) -> CompiledAction:
    """The compiled form of a SQL action text (raises SqlError)."""
    return CompiledAction(parse_action(text))


def correlation_matches(flt: CorrelationFilter, message: Message) -> bool:
    """AND of exact matches: ordinal strings for system fields, ``object.Equals`` for properties
    (type-strict: string '2' is not long 2, long 2 is not int 2); property names case-insensitive."""
    if flt.is_empty():
        return False
    for field_name, expected in flt.system_fields().items():
        actual = message.sys.get(CORRELATION_SYS_NAMES[field_name])
        if actual is None or actual.type is not ValueType.STRING or actual.value != expected:
            return False
    for name, expected_value in flt.properties:
        actual_value = message.user_property(name)
        if actual_value is None or not _object_equals(expected_value, actual_value):
            return False
    return True


def _object_equals(a: TypedValue, b: TypedValue) -> bool:
    return values.object_equals(values.from_typed(a), values.from_typed(b))


def _evaluate(flt: Filter, view: MessageView, message: Message, compiled: CompiledFilter | None = None) -> Outcome:
    if isinstance(flt, SqlFilter):
        if compiled is None:
            try:
                compiled = compiled_filter(flt.expression)
            except SqlError as exc:
                return Outcome(None, f"invalid filter: {exc}")
        return compiled.outcome(view)
    if isinstance(flt, CorrelationFilter):
        return Outcome(correlation_matches(flt, message))
    if isinstance(flt, TrueFilter):
        return Outcome(True)
    if isinstance(flt, FalseFilter):
        return Outcome(False)
    raise TypeError(f"not a filter: {flt!r}")


def matches(rule: Rule, message: Message) -> Outcome:
    """How ``rule``'s filter evaluates on ``message`` (only ``Outcome.matched`` delivers)."""
    return _evaluate(rule.filter, MessageView.from_message(message), message)


def run_action(action: SqlRuleAction, message: Message) -> Message:
    """The copy of ``message`` after ``action`` (raises SqlEvalError, or SqlError for bad text)."""
    return compiled_action(action.expression).apply(message)


@dataclass(frozen=True)
class RouteResult:
    """What one subscription does with one message."""

    delivered: bool
    rule_results: list[tuple[str, Outcome]] = field(default_factory=list)
    copies: list[tuple[str | None, Message]] = field(default_factory=list)


def route_rules(
    rules: Sequence[Rule],
    message: Message,
    view: MessageView | None = None,
    skip: Container[int] = (),
    compiled: Sequence[CompiledFilter | None] | None = None,
) -> RouteResult:
    """Evaluate every rule of a subscription on ``message`` and build the delivered copies.

    The rules at the indexes in ``skip`` are known to be FALSE (``reconciler.sql.router`` proved
    it) and are recorded so without being evaluated. ``compiled`` holds, per rule, its SQL filter
    already compiled (a router keeps them, beyond what the compiled-text cache holds)."""
    view = view if view is not None else MessageView.from_message(message)
    results: list[tuple[str, Outcome]] = []
    action_copies: list[tuple[str | None, Message]] = []
    plain_match = False
    for index, rule in enumerate(rules):
        if index in skip:
            results.append((rule.name, FALSE))
            continue
        outcome = _evaluate(rule.filter, view, message, compiled[index] if compiled is not None else None)
        if outcome.matched and isinstance(rule.action, SqlRuleAction):
            try:
                copy = run_action(rule.action, message)
            except (SqlEvalError, SqlError) as exc:
                outcome = Outcome(True, f"action failed: {exc}")
            else:
                action_copies.append((rule.name, _with_rule_name(copy, rule.name)))
        elif outcome.matched:
            plain_match = True
        results.append((rule.name, outcome))
    copies = ([(None, message)] if plain_match else []) + action_copies
    return RouteResult(delivered=bool(copies), rule_results=results, copies=copies)


def _with_rule_name(message: Message, rule_name: str) -> Message:
    user = {k: v for k, v in message.user.items() if not same_name(k, RULE_NAME_PROPERTY)}
    user[RULE_NAME_PROPERTY] = TypedValue(ValueType.STRING, rule_name)
    return Message(sys=dict(message.sys), user=user, body=message.body)
