"""A topic's rules compiled into one router that evaluates, for each message, only the rules the
message could match.

Each rule is indexed by what it requires, where a requirement that the message does not meet
makes the filter FALSE without evaluating anything else (so no evaluation error is skipped):

- a correlation filter by one of its system fields (an exact, ordinal string match, and
  correlation filters never raise);
- a SQL filter by its first conjunct when that is ``property = 'text'`` or
  ``property IN ('a', 'b', …)``: AND evaluates left to right and stops at the first FALSE, and a
  string compared with a different string is FALSE;
- a false filter by nothing: it is never a candidate.

A message's value for an indexed property is looked up once: a string selects the rules requiring
that string; any other value (absent, null, a number) makes every rule of that property a candidate
for SQL filters (the comparison would not be FALSE) and none for correlation filters. Every other
rule (true filters, filters that do not start with an equality) is always a candidate. The work per
message grows with the candidates, not the rule count, as in aws event-ruler. A rule not evaluated
is FALSE, exactly what evaluating it would have said; ``tests/sql/test_router.py`` checks that the
router and evaluating every rule never differ.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from reconciler.model import (
    CORRELATION_SYS_NAMES,
    DEFAULT_RULE_NAME,
    SYSTEM_PROPERTIES,
    CorrelationFilter,
    FalseFilter,
    Message,
    Rule,
    SqlFilter,
    Topic,
    TrueFilter,
    ValueType,
)
from reconciler.names import name_key
from reconciler.sql import ast
from reconciler.sql.errors import SqlError
from reconciler.sql.evaluator import CompiledFilter, MessageView, literal_value
from reconciler.sql.routing import RouteResult, compiled_filter, route_rules, rule_check

#: Where a required value is read from a MessageView: ("sys", canonical name) or ("user", name key).
Key = tuple[str, str]


@dataclass(frozen=True)
class Requirement:
    """What a rule requires of one property: one of ``values`` (strings); ``strict`` when any other
    value of that property makes the filter FALSE (correlation), not just a string outside them."""

    key: Key
    values: frozenset[str]
    strict: bool


def requirement(rule: Rule, compiled: CompiledFilter | None = None) -> Requirement | None:
    """What ``rule`` requires of a message, or None when it may match any message (``compiled``:
    its SQL filter, when the caller has compiled it already)."""
    flt = rule.filter
    if isinstance(flt, CorrelationFilter):
        for field_name, expected in flt.system_fields().items():
            name = CORRELATION_SYS_NAMES[field_name]
            if SYSTEM_PROPERTIES[name] is ValueType.STRING:
                return Requirement(("sys", name), frozenset({expected}), strict=True)
        return None
    if isinstance(flt, SqlFilter):
        if compiled is None:
            try:
                compiled = compiled_filter(flt.expression)
            except SqlError:
                return None
        return _first_conjunct_requirement(compiled.node)
    return None


def _first_conjunct_requirement(node: ast.Predicate) -> Requirement | None:
    node = ast.conjuncts(node)[0]
    if isinstance(node, ast.Comparison) and node.op == "=":
        prop, lit = node.left, node.right
        if isinstance(prop, ast.Property) and isinstance(lit, ast.Literal) and lit.type is ValueType.STRING:
            return Requirement(_key(prop), frozenset({literal_value(lit)}), strict=False)
    if isinstance(node, ast.In) and not node.negated and isinstance(node.value, ast.Property):
        items = node.items
        if items and all(isinstance(i, ast.Literal) and i.type is ValueType.STRING for i in items):
            return Requirement(_key(node.value), frozenset(literal_value(i) for i in items), strict=False)  # type: ignore[arg-type]
    return None


def _key(prop: ast.Property) -> Key:
    return ("sys", prop.name) if prop.scope == "sys" else ("user", name_key(prop.name))


def _compiled(rule: Rule) -> CompiledFilter | None:
    if not isinstance(rule.filter, SqlFilter):
        return None
    try:
        return compiled_filter(rule.filter.expression)
    except SqlError:
        return None


class _PropertyIndex:
    """The rules requiring one property, by the string each requires."""

    __slots__ = ("by_value", "loose")

    def __init__(self) -> None:
        self.by_value: dict[str, list[int]] = defaultdict(list)
        #: the SQL rules: candidates whenever the message's value is not a string
        self.loose: list[int] = []


class TopicRouter:
    """One topic's subscriptions (name and rules, in order) compiled for routing many messages."""

    def __init__(self, subscriptions: Sequence[tuple[str, Sequence[Rule]]]):
        self.subscriptions = [(name, tuple(rules)) for name, rules in subscriptions]
        #: global rule id → (subscription index, rule index within it)
        self._place: list[tuple[int, int]] = []
        self._always: list[int] = []
        self._index: dict[Key, _PropertyIndex] = defaultdict(_PropertyIndex)
        #: per subscription, each rule's compiled SQL filter (None: not SQL, or invalid), and its check
        self._compiled = [[_compiled(rule) for rule in rules] for _name, rules in self.subscriptions]
        self._checks = [
            [rule_check(rule.filter, compiled) for rule, compiled in zip(rules, self._compiled[sub_index])]
            for sub_index, (_name, rules) in enumerate(self.subscriptions)
        ]
        for sub_index, (_name, rules) in enumerate(self.subscriptions):
            for rule_index, rule in enumerate(rules):
                rule_id = len(self._place)
                self._place.append((sub_index, rule_index))
                if isinstance(rule.filter, FalseFilter):
                    continue
                needed = requirement(rule, self._compiled[sub_index][rule_index])
                if needed is None:
                    self._always.append(rule_id)
                    continue
                index = self._index[needed.key]
                for value in needed.values:
                    index.by_value[value].append(rule_id)
                if not needed.strict:
                    index.loose.append(rule_id)
        self._index = dict(self._index)

    @property
    def rule_count(self) -> int:
        return len(self._place)

    def candidates(self, view: MessageView) -> dict[int, list[int]]:
        """Subscription index → the indexes of its rules that ``view`` could match, in order."""
        found = list(self._always)
        for (scope, name), index in self._index.items():
            value = view.sys.get(name) if scope == "sys" else view.user.get(name)
            if value.__class__ is str:
                found.extend(index.by_value.get(value, ()))
            else:
                found.extend(index.loose)
        by_sub: dict[int, list[int]] = {}
        for rule_id in sorted(set(found)):
            sub_index, rule_index = self._place[rule_id]
            by_sub.setdefault(sub_index, []).append(rule_index)
        return by_sub

    def route(self, message: Message, view: MessageView | None = None) -> dict[int, RouteResult]:
        """What the subscriptions with candidate rules do with ``message``, by subscription index;
        every other subscription receives nothing. ``rule_results`` list the rules evaluated;
        every other rule was FALSE."""
        view = view if view is not None else MessageView.from_message(message)
        subscriptions = self.subscriptions
        out = {}
        for sub_index, chosen in self.candidates(view).items():
            rules, checks = subscriptions[sub_index][1], self._checks[sub_index]
            out[sub_index] = route_rules([rules[i] for i in chosen], message, view, checks=[checks[i] for i in chosen])
        return out

    def route_every_rule(self, message: Message, view: MessageView | None = None) -> list[RouteResult]:
        """Like :meth:`route`, with every rule in ``rule_results`` (those not evaluated as FALSE)."""
        view = view if view is not None else MessageView.from_message(message)
        by_sub = self.candidates(view)
        results = []
        for sub_index, (_name, rules) in enumerate(self.subscriptions):
            chosen = set(by_sub.get(sub_index, ()))
            skip = [i for i in range(len(rules)) if i not in chosen]
            results.append(route_rules(rules, message, view, skip=frozenset(skip), checks=self._checks[sub_index]))
        return results


def topic_router(topic: Topic) -> TopicRouter:
    """The router of a declared topic; a subscription whose rules the files leave unmanaged is
    routed as if it had ``$Default`` (what it has when nobody changed it)."""
    default = (Rule(DEFAULT_RULE_NAME, TrueFilter()),)
    return TopicRouter([(sub.name, sub.rules if sub.rules is not None else default) for sub in topic.subscriptions])
