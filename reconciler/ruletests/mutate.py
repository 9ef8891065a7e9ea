"""Mutation testing of the rules (``sbrules test --mutate``): small changes to one rule at a time,
and whether some case notices (kills) each one.

Operators (each applied at every place it fits):

- ``comparison``: ``=`` ↔ ``<>``, ``<`` ↔ ``<=``, ``>`` ↔ ``>=``;
- ``boundary``: a number compared with moved by one (``amount > 1000`` → ``> 999``, ``> 1001``);
- ``and-or``: an AND becomes OR and an OR AND;
- ``drop-not``: NOT removed (``NOT x``, ``NOT IN``, ``NOT LIKE``, ``IS NOT NULL``);
- ``drop-conjunct``: one operand of the filter's top-level AND removed;
- ``remove-rule``: the rule removed;
- ``remove-statement`` / ``change-statement``: an action's SET or REMOVE removed, or a SET's
  literal value changed (a number moved by one, a string suffixed, a bool negated);
- ``correlation-field`` / ``correlation-type``: a correlation field removed (when there are
  others), an ``int`` property value retyped ``long`` and a ``long`` ``int``.

A filter mutant the static prover (``reconciler.sql.static``) proves equivalent to the original
(each covers the other), or a removed rule it proves never matches, cannot be killed by any case
and is not counted in the score. Neither is a removed action statement that changes no copy:

- ``SET p = literal`` where the prover shows the filter matches only messages in which ``p``
  already equals that literal (``tier = 3`` … ``SET tier = 3``, ``sys.Label = 'refund'`` … ``SET
  sys.Label = 'refund'``), and no earlier statement of the action sets or removes ``p``: the copy
  is the same with or without it;
- a statement whose effect a later ``REMOVE p`` undoes, no statement between reading ``p``, that
  cannot fail: a ``REMOVE`` of an application property, or a ``SET p = literal`` where the prover
  shows ``p`` is null or absent (there is no value to convert).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from reconciler.model import (
    NO_ACTION,
    CorrelationFilter,
    DesiredState,
    Origin,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TypedValue,
    ValueType,
)
from reconciler.names import name_key
from reconciler.rulefiles.project import Environment
from reconciler.ruletests.cases import Case
from reconciler.ruletests.run import run_case
from reconciler.sql import ast, canonical, compiled_action, compiled_filter
from reconciler.sql.errors import SqlError
from reconciler.sql.router import TopicRouter

_FLIPPED = {"=": "<>", "<>": "=", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}


@dataclass(frozen=True)
class Mutant:
    """One rule changed (or removed) in one subscription."""

    topic: str
    subscription: str
    rule: str
    operator: str
    description: str
    origin: Origin | None
    #: the rule after the change; None when the mutation removes it
    replacement: Rule | None


@dataclass(frozen=True)
class MutantResult:
    mutant: Mutant
    status: str  # killed / survived / equivalent
    killed_by: str | None = None


def _swap(node: ast.Node, old: ast.Node, new: ast.Node | None) -> ast.Node | None:
    """``node`` with the subtree ``old`` (by identity) replaced by ``new`` (None: removed from an
    AND/OR, which then becomes its other operand)."""
    if node is old:
        return new
    fields = ast.CHILD_FIELDS[type(node)]
    changes: dict[str, Any] = {}
    for name in fields:
        value = getattr(node, name)
        if isinstance(value, tuple):
            items = tuple(_swap(v, old, new) for v in value)
            if items != value:
                changes[name] = tuple(i for i in items if i is not None)
        elif value is not None:
            swapped = _swap(value, old, new)
            if swapped is not value:
                if swapped is None and isinstance(node, ast.And | ast.Or):
                    return node.right if name == "left" else node.left
                changes[name] = swapped
    return dataclasses.replace(node, **changes) if changes else node


def _walk(node: ast.Node) -> Iterator[ast.Node]:
    yield node
    for child in ast.children(node):
        yield from _walk(child)


def _moved(literal: ast.Literal, step: int) -> ast.Literal | None:
    """A number moved by ``step``: integers by one, doubles by a tenth of it."""
    if literal.type in (ValueType.LONG, ValueType.INT):
        return dataclasses.replace(literal, value=literal.value + step)
    if literal.type is ValueType.DOUBLE:
        return dataclasses.replace(literal, value=round(literal.value + step / 10, 12))
    return None


def filter_mutations(node: ast.Predicate) -> Iterator[tuple[str, str, ast.Predicate]]:
    """(operator, description, mutated tree) for each mutation of a SQL filter."""
    for sub in _walk(node):
        text = canonical(sub)
        if isinstance(sub, ast.Comparison):
            flipped = dataclasses.replace(sub, op=_FLIPPED[sub.op])
            yield "comparison", f"`{text}` → `{canonical(flipped)}`", _swap(node, sub, flipped)  # type: ignore[misc]
            for side in ("left", "right"):
                literal = getattr(sub, side)
                for step in (-1, 1):
                    moved = _moved(literal, step) if isinstance(literal, ast.Literal) else None
                    if moved is not None:
                        left, right = (moved, sub.right) if side == "left" else (sub.left, moved)
                        changed = ast.Comparison(sub.op, left, right)
                        yield "boundary", f"`{text}` → `{canonical(changed)}`", _swap(node, sub, changed)  # type: ignore[misc]
        elif isinstance(sub, ast.And | ast.Or):
            other = (ast.Or if isinstance(sub, ast.And) else ast.And)(sub.left, sub.right)
            yield "and-or", f"{type(sub).__name__.upper()} → {type(other).__name__.upper()} in `{text}`", _swap(node, sub, other)  # type: ignore[misc]
        elif isinstance(sub, ast.Not):
            yield "drop-not", f"`{text}` → `{canonical(sub.operand)}`", _swap(node, sub, sub.operand)  # type: ignore[misc]
        elif isinstance(sub, ast.In | ast.Like | ast.IsNull) and sub.negated:
            plain = dataclasses.replace(sub, negated=False)
            yield "drop-not", f"`{text}` → `{canonical(plain)}`", _swap(node, sub, plain)  # type: ignore[misc]
    conjuncts = ast.conjuncts(node)
    if len(conjuncts) > 1:
        for conjunct in conjuncts:
            yield "drop-conjunct", f"`{canonical(conjunct)}` dropped", _swap(node, conjunct, None)  # type: ignore[misc]


def _statement_mutations(action: ast.Action) -> Iterator[tuple[str, str, ast.Action | None]]:
    statements = action.statements
    for i, statement in enumerate(statements):
        rest = statements[:i] + statements[i + 1:]
        yield "remove-statement", f"`{canonical(statement)}` removed", ast.Action(rest) if rest else None
        if isinstance(statement, ast.Set) and isinstance(statement.value, ast.Literal):
            literal = statement.value
            changed: ast.Literal | None = _moved(literal, 1)
            if literal.type is ValueType.STRING:
                changed = dataclasses.replace(literal, value=f"{literal.value}-mutant")
            elif literal.type is ValueType.BOOL:
                changed = dataclasses.replace(literal, value=not literal.value)
            if changed is not None:
                new = dataclasses.replace(statement, value=changed)
                yield "change-statement", f"`{canonical(statement)}` → `{canonical(new)}`", ast.Action(
                    statements[:i] + (new,) + statements[i + 1:]
                )


def _correlation_mutations(flt: CorrelationFilter) -> Iterator[tuple[str, str, CorrelationFilter]]:
    fields = flt.system_fields()
    count = len(fields) + len(flt.properties)
    if count > 1:
        for name in fields:
            yield "correlation-field", f"{name} removed", dataclasses.replace(flt, **{name: None})  # type: ignore[arg-type]
        for name, _value in flt.properties:
            rest = tuple(p for p in flt.properties if p[0] != name)
            yield "correlation-field", f"properties.{name} removed", dataclasses.replace(flt, properties=rest)
    retype = {ValueType.INT: ValueType.LONG, ValueType.LONG: ValueType.INT}
    for name, value in flt.properties:
        if value.type in retype:
            new = TypedValue(retype[value.type], value.value)
            props = tuple((n, new if n == name else v) for n, v in flt.properties)
            yield "correlation-type", f"properties.{name}: {value.describe()} → {new.describe()}", dataclasses.replace(
                flt, properties=props
            )


def rule_mutants(topic: str, subscription: str, rule: Rule) -> Iterator[Mutant]:
    """Every mutant of one rule."""
    origin = rule.filter_origin or rule.origin

    def mutant(operator: str, description: str, replacement: Rule | None) -> Mutant:
        return Mutant(topic, subscription, rule.name, operator, description, origin, replacement)

    yield mutant("remove-rule", "rule removed", None)
    flt = rule.filter
    if isinstance(flt, SqlFilter):
        try:
            node = compiled_filter(flt.expression).node
        except SqlError:
            node = None
        for operator, description, tree in filter_mutations(node) if node is not None else ():
            yield mutant(operator, description, dataclasses.replace(rule, filter=SqlFilter(canonical(tree))))
    elif isinstance(flt, CorrelationFilter):
        for operator, description, changed in _correlation_mutations(flt):
            yield mutant(operator, description, dataclasses.replace(rule, filter=changed))
    if isinstance(rule.action, SqlRuleAction):
        try:
            action = compiled_action(rule.action.expression).node
        except SqlError:
            return
        for operator, description, new_action in _statement_mutations(action):
            replaced = SqlRuleAction(canonical(new_action)) if new_action is not None else NO_ACTION
            yield mutant(operator, description, dataclasses.replace(rule, action=replaced))


def mutants(state: DesiredState) -> list[Mutant]:
    return [
        m for topic, sub in state.subscriptions() for rule in sub.rules or ()
        for m in rule_mutants(topic.name, sub.name, rule)
    ]


def _mutated(state: DesiredState, mutant: Mutant) -> DesiredState:
    topics = []
    for topic in state.topics:
        if topic.name == mutant.topic:
            subs = []
            for sub in topic.subscriptions:
                if sub.name == mutant.subscription and sub.rules is not None:
                    rules = tuple(
                        r for rule in sub.rules
                        for r in ([rule] if rule.name != mutant.rule else [mutant.replacement] if mutant.replacement else [])
                    )
                    sub = dataclasses.replace(sub, rules=rules)
                subs.append(sub)
            topic = dataclasses.replace(topic, subscriptions=tuple(subs))
        topics.append(topic)
    return DesiredState(topics=tuple(topics))


def _equivalent(state: DesiredState, mutant: Mutant) -> bool:
    """Proven by the static prover: the mutant's filter delivers exactly what the original's does
    (and the action is unchanged)."""
    from reconciler.sql import static

    original = next(
        (r for topic, sub in state.subscriptions() if topic.name == mutant.topic and sub.name == mutant.subscription
         for r in sub.rules or () if r.name == mutant.rule),
        None,
    )
    changed = mutant.replacement
    if original is not None and changed is None:
        return static.unsatisfiable(original.filter)  # a rule that never matches changes nothing
    if original is None or changed is None:
        return False
    if changed.action != original.action:
        return changed.filter == original.filter and _same_copies(original, changed)
    return static.covers(original.filter, changed.filter) and static.covers(changed.filter, original.filter)


def _statements(action: Any) -> tuple[ast.Statement, ...] | None:
    if not isinstance(action, SqlRuleAction):
        return ()
    try:
        return compiled_action(action.expression).node.statements
    except SqlError:
        return None


def _same_copies(original: Rule, changed: Rule) -> bool:
    """Proven: ``changed`` (``original`` with one action statement removed) makes the same copy of
    every message the rule delivers (see the module's docstring)."""
    from reconciler.sql import static

    before, after = _statements(original.action), _statements(changed.action)
    if before is None or after is None or len(after) != len(before) - 1:
        return False
    i = next((n for n, (a, b) in enumerate(zip(before, after)) if a != b), len(after))
    if before[:i] + before[i + 1:] != after:
        return False
    removed, target = before[i], _target(before[i].prop)
    if any(_target(s.prop) == target for s in before[:i]):
        return False
    if (
        isinstance(removed, ast.Set) and _pinnable(removed)
        and static.covers(SqlFilter(f"{canonical(removed.prop)} = {canonical(removed.value)}"), original.filter)
    ):
        return True  # the property already holds the value set
    for later in before[i + 1:]:
        if isinstance(later, ast.Set) and _reads(later.value, target):
            return False
        if _target(later.prop) == target:
            if not isinstance(later, ast.Remove):
                return False  # a SET converts to the type the removed statement left: it may differ
            if isinstance(removed, ast.Remove):
                return removed.prop.scope == "user"
            return (
                removed.prop.scope == "user" and isinstance(removed.value, ast.Literal)
                and static.covers(SqlFilter(f"{canonical(removed.prop)} IS NULL"), original.filter)
            )
    return False


def _target(prop: ast.Property) -> tuple[str, str]:
    return prop.scope, name_key(prop.name) if prop.scope == "user" else prop.name


def _pinnable(statement: ast.Set) -> bool:
    """A literal that equals the property's value only if setting it changes nothing: a string for
    a system property (whose type is fixed); a number or bool for an application property, which
    SET converts to the type it holds. Not a string for an application property: an AMQP symbol
    equals it, and SET makes it a string."""
    value = statement.value
    if not isinstance(value, ast.Literal) or value.parameter is not None:
        return False
    if statement.prop.scope == "sys":
        return value.type is ValueType.STRING
    return value.type in (ValueType.LONG, ValueType.DOUBLE, ValueType.BOOL)


def _reads(expr: ast.Node, target: tuple[str, str]) -> bool:
    """Whether ``expr`` may read the property ``target`` (``property(...)`` may read any)."""
    return any(
        isinstance(node, ast.Function) or (isinstance(node, ast.Property) and _target(node) == target)
        for node in _walk(expr)
    )


def run_mutants(
    cases: Sequence[Case], state: DesiredState, environment: Environment | None = None
) -> list[MutantResult]:
    """Each mutant killed (some case that passes on the rules fails on it), survived or equivalent.
    Only the cases of the mutant's topic run, and only those that pass on the original rules."""
    routers: dict[str, TopicRouter] = {}
    passing = [c for c in cases if run_case(c, state, environment, routers).status == "passed"]
    out = []
    for mutant in mutants(state):
        mutated = _mutated(state, mutant)
        topic_cases = [
            c for c in passing
            if (environment.actual_topic(c.topic) if environment is not None else c.topic) == mutant.topic
        ]
        fresh: dict[str, TopicRouter] = {}
        killer = next((c for c in topic_cases if run_case(c, mutated, environment, fresh).status == "failed"), None)
        if killer is not None:
            out.append(MutantResult(mutant, "killed", killer.name))
        elif _equivalent(state, mutant):
            out.append(MutantResult(mutant, "equivalent"))
        else:
            out.append(MutantResult(mutant, "survived"))
    return out


def score(results: Sequence[MutantResult]) -> float:
    counted = [r for r in results if r.status != "equivalent"]
    return 100.0 if not counted else 100.0 * sum(r.status == "killed" for r in counted) / len(counted)


def to_json(results: Sequence[MutantResult]) -> dict[str, Any]:
    def count(status: str) -> int:
        return sum(r.status == status for r in results)

    return {
        "score": round(score(results), 2), "mutants": len(results), "killed": count("killed"),
        "survived": count("survived"), "equivalent": count("equivalent"),
        "survivors": [
            {
                "topic": r.mutant.topic, "subscription": r.mutant.subscription, "rule": r.mutant.rule,
                "operator": r.mutant.operator, "mutation": r.mutant.description,
                "file": r.mutant.origin.file if r.mutant.origin else None,
                "line": r.mutant.origin.line if r.mutant.origin else None,
            }
            for r in results if r.status == "survived"
        ],
    }


def render_text(results: Sequence[MutantResult]) -> str:
    doc = to_json(results)
    lines = [
        f"mutation score: {doc['score']:.1f}% ({doc['killed']} of {doc['mutants'] - doc['equivalent']} mutants killed; "
        f"{doc['equivalent']} proven equivalent, not counted)"
    ]
    for r in results:
        if r.status == "survived":
            where = f"{r.mutant.origin.file}:{r.mutant.origin.line}" if r.mutant.origin else "<input>"
            lines.append(
                f"  {where}: {r.mutant.topic}/{r.mutant.subscription} rule {r.mutant.rule}: "
                f"{r.mutant.operator}: {r.mutant.description} survived"
            )
    return "\n".join(lines)
