"""The drift the demo seeds: a live namespace that differs from the rule files in every way a plan
can show — a rule changed out of band (SQL, and a correlation property's type), a rule missing, an
extra rule, the service's ``$Default`` catch-all — plus one difference that must *not* show: the
same SQL re-typed with other whitespace, keyword case and parentheses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from reconciler.model import (
    DEFAULT_RULE_NAME,
    CorrelationFilter,
    DesiredState,
    Rule,
    SqlFilter,
    Subscription,
    TrueFilter,
    TypedValue,
    ValueType,
)

EXTRA_RULE = Rule("legacy-catch-all", SqlFilter("sys.Label LIKE 'order.%'"))
_KEYWORDS = re.compile(r"\b(AND|OR|NOT|IN|LIKE|IS|NULL|EXISTS|ESCAPE|BETWEEN)\b", re.IGNORECASE)
_QUOTED = re.compile(r"('(?:[^']|'')*'|\[[^\]]*\])")


def retype_cosmetically(expression: str) -> str:
    """The same SQL written differently: keyword case flipped, spacing changed, wrapped in parentheses."""
    parts = _QUOTED.split(expression)
    for i in range(0, len(parts), 2):  # even parts are outside literals and [identifiers]
        text = _KEYWORDS.sub(lambda m: m.group(0).swapcase(), parts[i])
        parts[i] = re.sub(r"\s+", "   ", text)
    return "(  " + "".join(parts).strip() + "\n)"


@dataclass
class Drift:
    """One out-of-band difference the demo seeds, and what the plan should say about it."""

    where: str
    what: str
    cosmetic_rule: str | None = None  # a rule that differs only cosmetically: the plan must not list it


def _retype_property(value: TypedValue) -> TypedValue | None:
    if value.type is ValueType.INT:
        return TypedValue(ValueType.LONG, value.value)
    if value.type is ValueType.LONG and -(2**31) <= value.value < 2**31:
        return TypedValue(ValueType.INT, value.value)
    return None


def _candidates(desired: DesiredState) -> Iterator[tuple[int, int, Subscription]]:
    for ti, topic in enumerate(desired.topics):
        for si, sub in enumerate(topic.subscriptions):
            if sub.managed:
                yield ti, si, sub


def drifted_namespace(desired: DesiredState) -> tuple[DesiredState, list[Drift]]:
    """A live state differing from ``desired`` in each way a plan can show (spread over the subscriptions)."""
    topics = [list(t.subscriptions) for t in desired.topics]
    rules = {(ti, si): list(s.rules or ()) for ti, si, s in _candidates(desired)}
    used: set[tuple[int, int]] = set()
    touched: set[tuple[tuple[int, int], str]] = set()
    drifts: list[Drift] = []

    def path(key: tuple[int, int]) -> str:
        return f"{desired.topics[key[0]].name}/{topics[key[0]][key[1]].name}"

    def pick(test: Callable[[Rule, list[Rule]], bool]) -> tuple[tuple[int, int], int] | None:
        fresh = [k for k in rules if k not in used] + [k for k in rules if k in used]
        for key in fresh:
            for i, rule in enumerate(rules[key]):
                if (key, rule.name) not in touched and test(rule, rules[key]):
                    used.add(key)
                    touched.add((key, rule.name))
                    return key, i
        return None

    is_sql = lambda r, _: isinstance(r.filter, SqlFilter)  # noqa: E731
    if found := pick(is_sql):
        key, i = found
        rule = rules[key][i]
        assert isinstance(rule.filter, SqlFilter)
        rules[key][i] = replace(rule, filter=SqlFilter(retype_cosmetically(rule.filter.expression)))
        what = f"rule {rule.name!r} re-typed with other spacing and keyword case — must NOT show"
        drifts.append(Drift(path(key), what, cosmetic_rule=rule.name))
    retypable = lambda r, _: isinstance(r.filter, CorrelationFilter) and any(  # noqa: E731
        _retype_property(v) for _, v in r.filter.properties
    )
    if found := pick(retypable):
        key, i = found
        rule = rules[key][i]
        assert isinstance(rule.filter, CorrelationFilter)
        name, value = next((k, v) for k, v in rule.filter.properties if _retype_property(v))
        retyped = _retype_property(value)
        assert retyped is not None
        props = dict(rule.filter.properties) | {name: retyped}
        rules[key][i] = replace(rule, filter=replace(rule.filter, properties=tuple(props.items())))
        what = f"rule {rule.name!r}: property {name!r} is {props[name].describe()} live → replace"
        drifts.append(Drift(path(key), what))
    if found := pick(lambda r, _: isinstance(r.filter, SqlFilter) and _QUOTED.search(r.filter.expression) is not None):
        key, i = found
        rule = rules[key][i]
        assert isinstance(rule.filter, SqlFilter)
        quoted = _QUOTED.search(rule.filter.expression)
        assert quoted is not None
        literal = quoted.group(0)
        changed = rule.filter.expression.replace(literal, literal[:-1] + "-old'", 1)
        rules[key][i] = replace(rule, filter=SqlFilter(changed))
        drifts.append(Drift(path(key), f"rule {rule.name!r} edited by hand in the portal → replace, with a SQL diff"))
    if found := pick(lambda _, rs: len(rs) >= 2):
        key, _ = found
        missing = rules[key].pop()
        drifts.append(Drift(path(key), f"rule {missing.name!r} is missing → create"))
    if found := pick(lambda _, rs: all(r.name != EXTRA_RULE.name for r in rs)):
        key, _ = found
        rules[key].append(EXTRA_RULE)
        drifts.append(Drift(path(key), f"extra rule {EXTRA_RULE.name!r} added out of band → delete"))
    if found := pick(lambda _, rs: all(r.name != DEFAULT_RULE_NAME for r in rs)):
        key, _ = found
        rules[key].insert(0, Rule(DEFAULT_RULE_NAME, TrueFilter()))
        drifts.append(Drift(path(key), "the service's $Default catch-all is there but not declared → delete (last)"))
    for (ti, si), live in rules.items():
        topics[ti][si] = replace(topics[ti][si], rules=tuple(live))
    state = DesiredState(tuple(replace(t, subscriptions=tuple(subs)) for t, subs in zip(desired.topics, topics)))
    return state, drifts
