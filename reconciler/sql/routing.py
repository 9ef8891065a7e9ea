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
from typing import Callable, Container, Sequence

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
from reconciler.sql.evaluator import OUTCOMES, CompiledFilter, MessageView, Outcome
from reconciler.sql.parser import parse_action, parse_filter

RULE_NAME_PROPERTY = "RuleName"
FALSE = OUTCOMES[False]


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
    return rule_check(flt, compiled)(view, message)


#: A filter made ready to evaluate many messages: (the message's view, the message) → its outcome.
RuleCheck = Callable[[MessageView, Message], Outcome]


def rule_check(flt: Filter, compiled: CompiledFilter | None = None) -> RuleCheck:
    """How ``flt`` evaluates, its kind decided and its SQL compiled once (``compiled``: already)."""
    if isinstance(flt, SqlFilter):
        if compiled is None:
            try:
                compiled = compiled_filter(flt.expression)
            except SqlError as exc:
                invalid = Outcome(None, f"invalid filter: {exc}")
                return lambda view, message: invalid
        outcome = compiled.outcome
        return lambda view, message: outcome(view)
    if isinstance(flt, CorrelationFilter):
        return _correlation_check(flt)
    if isinstance(flt, TrueFilter):
        return lambda view, message: OUTCOMES[True]
    if isinstance(flt, FalseFilter):
        return lambda view, message: FALSE
    raise TypeError(f"not a filter: {flt!r}")


def _correlation_check(flt: CorrelationFilter) -> RuleCheck:
    """:func:`correlation_matches` with the filter's fields listed once."""
    if flt.is_empty():
        return lambda view, message: FALSE
    system = [(CORRELATION_SYS_NAMES[name], expected) for name, expected in flt.system_fields().items()]
    properties = flt.properties
    string = ValueType.STRING

    def check(view: MessageView, message: Message) -> Outcome:
        sys_props = message.sys
        for name, expected in system:
            actual = sys_props.get(name)
            if actual is None or actual.type is not string or actual.value != expected:
                return FALSE
        for name, expected_value in properties:
            actual_value = message.user_property(name)
            if actual_value is None or not _object_equals(expected_value, actual_value):
                return FALSE
        return OUTCOMES[True]

    return check


def matches(rule: Rule, message: Message) -> Outcome:
    """How ``rule``'s filter evaluates on ``message`` (only ``Outcome.matched`` delivers)."""
    return _evaluate(rule.filter, MessageView.from_message(message), message)


def run_action(action: SqlRuleAction, message: Message, view: MessageView | None = None) -> Message:
    """The copy of ``message`` after ``action`` (raises SqlEvalError, or SqlError for bad text);
    ``view``: the message's, when made already."""
    return compiled_action(action.expression).apply(message, view)


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
    checks: Sequence[RuleCheck] | None = None,
) -> RouteResult:
    """Evaluate every rule of a subscription on ``message`` and build the delivered copies.

    The rules at the indexes in ``skip`` are known to be FALSE (``reconciler.sql.router`` proved
    it) and are recorded so without being evaluated. ``checks`` holds, per rule, its filter made
    ready (:func:`rule_check`: a router keeps them)."""
    view = view if view is not None else MessageView.from_message(message)
    results: list[tuple[str, Outcome]] = []
    action_copies: list[tuple[str | None, Message]] = []
    plain_match = False
    for index, rule in enumerate(rules):
        if index in skip:
            results.append((rule.name, FALSE))
            continue
        outcome = checks[index](view, message) if checks is not None else _evaluate(rule.filter, view, message)
        if outcome.matched:
            if isinstance(rule.action, SqlRuleAction):
                try:
                    copy = run_action(rule.action, message, view)
                except (SqlEvalError, SqlError) as exc:
                    outcome = Outcome(True, f"action failed: {exc}")
                else:
                    action_copies.append((rule.name, _with_rule_name(copy, rule.name)))
            else:
                plain_match = True
        results.append((rule.name, outcome))
    copies = ([(None, message)] if plain_match else []) + action_copies
    return RouteResult(delivered=bool(copies), rule_results=results, copies=copies)


def _with_rule_name(message: Message, rule_name: str) -> Message:
    # A name's key is as long as the name: the length rules out most keys before their key is made.
    user = {
        k: v for k, v in message.user.items() if len(k) != len(RULE_NAME_PROPERTY) or not same_name(k, RULE_NAME_PROPERTY)
    }
    user[RULE_NAME_PROPERTY] = _rule_name_value(rule_name)
    return Message(sys=dict(message.sys), user=user, body=message.body)


@functools.lru_cache(maxsize=8192)
def _rule_name_value(rule_name: str) -> TypedValue:
    """The ``RuleName`` a rule's copies carry (a typed value is immutable: made once per rule)."""
    return TypedValue(ValueType.STRING, rule_name)
