"""The filter of a fall-through subscription: TRUE exactly when no other rule of the topic is TRUE.

Every other rule ``r`` is rewritten into ``T(r)``, a predicate that is TRUE when ``r`` is TRUE and
FALSE when ``r`` is FALSE *or UNKNOWN*; the generated filter is ``NOT (T(r1) OR T(r2) OR ...)``.
UNKNOWN comes only from an absent application property (a system property is null when unset, and
null compares FALSE), so ``T`` of a comparison, LIKE or IN guards it with ``EXISTS`` on the
properties whose absence would make it UNKNOWN, and ``T``/``F`` ("is FALSE") push through
AND / OR / NOT by Kleene's tables. The rewrite evaluates a subset of the operands the original
evaluates, so it raises an evaluation error only where some other rule raises one
(docs/analyze.md, "A fall-through subscription").

A correlation filter becomes the SQL it equals on every message: ``sys.To = 'v'`` for a system
field, ``p = 'v'`` / ``p = TRUE`` for a string or bool property, ``EXISTS(p) AND p IS NULL`` for
null. A typed number cannot be written: SQL promotes (``p = 3`` is TRUE for int 3, long 3 and
3.0) and has no type test, while correlation compares types strictly.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from reconciler.limits import sql_text_problem
from reconciler.model import (
    CORRELATION_SYS_NAMES,
    CorrelationFilter,
    FalseFilter,
    Rule,
    SqlFilter,
    TrueFilter,
    ValueType,
)
from reconciler.names import name_key
from reconciler.sql import ast
from reconciler.sql.backend import Backend, Unsupported
from reconciler.sql.canonical import canonical
from reconciler.sql.errors import SqlError
from reconciler.sql.parser import parse_filter

FALLTHROUGH_RULE_NAME = "fallthrough"
#: The filters of a topic with a TRUE filter among the others: the fall-through receives nothing.
NOTHING = "1=0"
EVERYTHING = "1=1"

_STRING_TYPES = (ValueType.STRING, ValueType.SYMBOL)


class NotExpressible(Exception):
    """Why no fall-through filter can be written; ``rule`` is the culprit (None: the whole filter)."""

    def __init__(self, rule: Rule | None, cause: str):
        super().__init__(cause)
        self.rule = rule
        self.cause = cause


def fallthrough_filter(others: Iterable[Rule]) -> str:
    """The SQL filter text TRUE exactly when none of ``others`` is TRUE (raises NotExpressible,
    also when the text would pass the service's length limit: it is never truncated)."""
    parts: list[ast.Predicate] = []
    for rule in others:
        flt = rule.filter
        if isinstance(flt, TrueFilter):
            return NOTHING
        if isinstance(flt, FalseFilter):
            continue
        predicate = _predicate_of(rule)
        if predicate is not None:
            parts.append(is_true(predicate, rule))
    if not parts:
        return EVERYTHING
    text = canonical(ast.Not(_chain(ast.Or, parts)))
    too_long = sql_text_problem(text, "the generated filter")
    if too_long is not None:
        raise NotExpressible(None, f"{too_long}; fewer or shorter filters on the other subscriptions would fit")
    try:
        parse_filter(text)
    except SqlError as exc:
        raise NotExpressible(None, f"the generated filter is not valid SQL: {exc}") from exc
    return text


def _predicate_of(rule: Rule) -> ast.Predicate | None:
    flt = rule.filter
    if isinstance(flt, SqlFilter):
        try:
            return parse_filter(flt.expression)
        except SqlError as exc:
            raise NotExpressible(rule, f"its SQL filter does not parse: {exc}") from exc
    assert isinstance(flt, CorrelationFilter)
    return correlation_predicate(flt, rule)


def correlation_predicate(flt: CorrelationFilter, rule: Rule) -> ast.Predicate | None:
    """The SQL predicate equal to ``flt`` on every message (None for an empty filter: no match)."""
    atoms: list[ast.Predicate] = [
        ast.Comparison("=", ast.Property("sys", CORRELATION_SYS_NAMES[name]), ast.Literal(ValueType.STRING, value))
        for name, value in flt.system_fields().items()
    ]
    for name, value in flt.properties:
        prop = ast.Property("user", name)
        if value.type in _STRING_TYPES:
            atoms.append(ast.Comparison("=", prop, ast.Literal(ValueType.STRING, value.value)))
        elif value.type is ValueType.BOOL:
            atoms.append(ast.Comparison("=", prop, ast.Literal(ValueType.BOOL, value.value)))
        elif value.type is ValueType.NULL:
            atoms.append(ast.And(ast.Exists(prop), ast.IsNull(prop)))
        else:
            typed = f"{value.type.value} {value.value}"
            raise NotExpressible(
                rule,
                f"correlation property {name!r} is {typed}, which it matches by type as well as value; "
                f"Service Bus SQL has no type test and promotes numbers, so no SQL filter matches only {typed}",
            )
    return _chain(ast.And, atoms) if atoms else None


def is_true(node: ast.Predicate, rule: Rule) -> ast.Predicate:
    """A predicate TRUE where ``node`` is TRUE and FALSE where it is FALSE or UNKNOWN."""
    return _IS_TRUE[type(node)](node, rule)


def is_false(node: ast.Predicate, rule: Rule) -> ast.Predicate:
    """A predicate TRUE where ``node`` is FALSE and FALSE where it is TRUE or UNKNOWN."""
    return _IS_FALSE[type(node)](node, rule)


_OPERAND = Unsupported("an expression is never TRUE or FALSE by itself: it is guarded as an operand of its predicate")
_STATEMENT = Unsupported("actions: the fall-through filter is made of filters")


def _table(name: str, handlers: dict[type, Callable[[Any, Rule], ast.Predicate]]) -> Backend[ast.Predicate]:
    return Backend(name, {
        ast.Literal: _OPERAND, ast.Property: _OPERAND, ast.Function: _OPERAND, ast.Unary: _OPERAND, ast.Binary: _OPERAND,
        ast.Set: _STATEMENT, ast.Remove: _STATEMENT, ast.Action: _STATEMENT,
        **handlers,
    })


#: The fall-through generator's back end, in two tables: TRUE exactly where a predicate is TRUE, and
#: exactly where it is FALSE (UNKNOWN goes to neither: a missing property guarded by EXISTS).
_IS_TRUE = _table("fall-through generator (TRUE)", {
    ast.And: lambda node, rule: ast.And(is_true(node.left, rule), is_true(node.right, rule)),
    ast.Or: lambda node, rule: ast.Or(is_true(node.left, rule), is_true(node.right, rule)),
    ast.Not: lambda node, rule: is_false(node.operand, rule),
    ast.IsNull: lambda node, rule: node,
    ast.Exists: lambda node, rule: node,
    ast.Comparison: lambda node, rule: _guarded(node, node, rule),
    ast.Like: lambda node, rule: _guarded(node, node, rule),
    ast.In: lambda node, rule: _guarded(node, node, rule),
})
_IS_FALSE = _table("fall-through generator (FALSE)", {
    ast.And: lambda node, rule: ast.Or(is_false(node.left, rule), is_false(node.right, rule)),
    ast.Or: lambda node, rule: ast.And(is_false(node.left, rule), is_false(node.right, rule)),
    ast.Not: lambda node, rule: is_true(node.operand, rule),
    ast.IsNull: lambda node, rule: ast.IsNull(node.prop, not node.negated),
    ast.Exists: lambda node, rule: ast.Not(node),
    ast.Comparison: lambda node, rule: _guarded(node, ast.Not(node), rule),
    ast.Like: lambda node, rule: _guarded(node, ast.Not(node), rule),
    ast.In: lambda node, rule: _guarded(node, ast.Not(node), rule),
})


def _guarded(atom: ast.Predicate, result: ast.Predicate, rule: Rule) -> ast.Predicate:
    """``result`` behind EXISTS on every property whose absence makes ``atom`` UNKNOWN."""
    guards = [ast.Exists(prop) for prop in _unknown_sources(atom, rule)]
    return _chain(ast.And, [*guards, result])


def _unknown_sources(atom: ast.Predicate, rule: Rule) -> list[ast.Property]:
    """The application properties an absent one of which makes ``atom`` UNKNOWN (IN's items raise
    an error instead, so only its left side counts)."""
    if isinstance(atom, ast.Comparison):
        operands: Sequence[ast.Expr | None] = (atom.left, atom.right)
    elif isinstance(atom, ast.Like):
        operands = (atom.value, atom.pattern, atom.escape)
    elif isinstance(atom, ast.In):
        operands = (atom.value,)
    else:
        raise TypeError(f"not an atom: {atom!r}")
    found: dict[str, ast.Property] = {}
    for operand in operands:
        if operand is not None:
            _collect(operand, found, rule)
    return list(found.values())


def _collect(node: ast.Expr, found: dict[str, ast.Property], rule: Rule) -> None:
    if isinstance(node, ast.Property):
        if node.scope == "user":
            found.setdefault(name_key(node.name), node)
        return
    if isinstance(node, ast.Function) and node.name == "property":
        raise NotExpressible(rule, "property() names a property only at run time, so no EXISTS can guard it")
    for child in ast.children(node):
        _collect(child, found, rule)  # type: ignore[arg-type]


def _chain(cls: type[ast.And] | type[ast.Or], items: Sequence[ast.Predicate]) -> ast.Predicate:
    """A left-nested AND / OR chain (a flat chain is not nesting for the parser's depth limit)."""
    out = items[0]
    for item in items[1:]:
        out = cls(out, item)
    return out
