"""The canonical (normal) form of filters and actions: how the planner compares SQL text.

Keywords upper case, single spaces around binary operators, property names in canonical form
(``sys.Label``; user properties bare when they are plain identifiers, else ``[delimited]``),
literals normalised (``1.50`` -> ``1.5``, ``"x"`` never used for strings), and only the
parentheses precedence and left-associativity require. ``parse(canonical(t)) == t`` for every
tree ``t`` the parser produces.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass, replace
from typing import Any

from reconciler.model import ValueType
from reconciler.names import name_key
from reconciler.sql import ast
from reconciler.sql.backend import Backend
from reconciler.sql.parser import KEYWORDS, RESERVED_WORDS, identifier_problem, parse_action, parse_filter

# Predicate levels: OR < AND < NOT < primary predicate.
_OR, _AND, _NOT, _PRIMARY_PRED = 1, 2, 3, 4
# Expression levels: additive < multiplicative < unary.
_ADDITIVE, _MULTIPLICATIVE, _UNARY = 1, 2, 3


def canonical(node: ast.Node) -> str:
    """The canonical text of a predicate, expression, statement or action."""
    return _text(node, _OR)  # the loosest context (_OR is _ADDITIVE): no parentheses around the whole


def canonical_filter(text: str) -> str:
    """Parse a filter and print its canonical form (raises SqlError)."""
    return canonical(parse_filter(text))


def filter_key(text: str) -> str:
    """What two filters are compared by: the canonical form with user property names case-folded as the service
    folds them (``names.name_key``).

    Filters look user properties up case-insensitively, so ``Amount > 1`` and ``amount > 1`` are
    the same filter. Actions are not folded: ``SET Foo = 1`` creates a property named ``Foo``.
    """
    return canonical(_fold_user_case(parse_filter(text)))


def _fold_user_case(node):
    if isinstance(node, ast.Property):
        return replace(node, name=name_key(node.name)) if node.scope == "user" else node
    if isinstance(node, tuple):
        return tuple(_fold_user_case(item) for item in node)
    if is_dataclass(node):
        return replace(node, **{f.name: _fold_user_case(getattr(node, f.name)) for f in fields(node)})
    return node


def canonical_action(text: str) -> str:
    """Parse an action and print its canonical form (raises SqlError)."""
    return canonical(parse_action(text))


def _text(node: ast.Node, context: int) -> str:
    """The text of ``node`` where it stands in an operand of binding ``context`` (its handler from the table)."""
    return _PRINT[type(node)](node, context)


def _action(node: ast.Action, context: int) -> str:
    return "; ".join(_text(statement, context) for statement in node.statements)


def _set(node: ast.Set, context: int) -> str:
    return f"SET {_property(node.prop)} = {_text(node.value, _ADDITIVE)}"


def _remove(node: ast.Remove, context: int) -> str:
    return f"REMOVE {_property(node.prop)}"


def _parenthesised(text: str, level: int, context: int) -> str:
    return f"({text})" if level < context else text


def _or(node: ast.Or, context: int) -> str:
    return _parenthesised(_chain(node, ast.Or, "OR", _OR, _AND), _OR, context)


def _and(node: ast.And, context: int) -> str:
    return _parenthesised(_chain(node, ast.And, "AND", _AND, _NOT), _AND, context)


def _chain(node: Any, cls: type[Any], keyword: str | None, level: int, right_level: int) -> str:
    """A left-nested chain of one operator (``keyword``; None: each Binary's own) printed in a loop:
    a flat chain is as long as the text allows and is not nesting (parser.MAX_DEPTH), so it must not
    cost a frame per link."""
    parts: list[str] = []
    current: Any = node
    while current.__class__ is cls and (cls is not ast.Binary or _level(current) == level):
        parts.append(f" {keyword or current.op} {_text(current.right, right_level)}")
        current = current.left
    return _text(current, level) + "".join(reversed(parts))


def _level(node: ast.Binary) -> int:
    return _ADDITIVE if node.op in ast.ADDITIVE_OPS else _MULTIPLICATIVE


def _not(node: ast.Not, context: int) -> str:
    return _parenthesised(f"NOT {_text(node.operand, _NOT)}", _NOT, context)


def _comparison(node: ast.Comparison, context: int) -> str:
    return f"{_text(node.left, _ADDITIVE)} {node.op} {_text(node.right, _ADDITIVE)}"


def _like(node: ast.Like, context: int) -> str:
    operator = "NOT LIKE" if node.negated else "LIKE"
    text = f"{_text(node.value, _ADDITIVE)} {operator} {_text(node.pattern, _ADDITIVE)}"
    if node.escape is not None:
        text += f" ESCAPE {_text(node.escape, _ADDITIVE)}"
    return text


def _in(node: ast.In, context: int) -> str:
    items = ", ".join(_text(item, _ADDITIVE) for item in node.items)
    return f"{_text(node.value, _ADDITIVE)} {'NOT IN' if node.negated else 'IN'} ({items})"


def _is_null(node: ast.IsNull, context: int) -> str:
    return f"{_property(node.prop)} {'IS NOT NULL' if node.negated else 'IS NULL'}"


def _exists(node: ast.Exists, context: int) -> str:
    return f"EXISTS({_property(node.prop)})"


def _binary(node: ast.Binary, context: int) -> str:
    level = _level(node)
    return _parenthesised(_chain(node, ast.Binary, None, level, level + 1), level, context)


def _unary(node: ast.Unary, context: int) -> str:
    operand = node.operand
    inner = _text(operand, _UNARY)
    if isinstance(operand, ast.Unary) or _is_negative_literal(operand):
        inner = f"({inner})"
    text = f"-{inner}"
    return f"({text})" if context > _UNARY else text


def _function(node: ast.Function, context: int) -> str:
    return f"{node.name}({', '.join(_text(a, _ADDITIVE) for a in node.args)})"


def _is_negative_literal(node: ast.Expr) -> bool:
    return (
        isinstance(node, ast.Literal)
        and node.parameter is None
        and node.type in (ValueType.LONG, ValueType.DOUBLE)
        and math.copysign(1.0, node.value) < 0
    )


def literal_text(node: ast.Literal) -> str:
    """The one literal token for a constant; ValueError for a type the language has no literal for."""
    return _literal(node)


def _literal(node: ast.Literal) -> str:
    if node.parameter is not None:
        return f"@{node.parameter}"
    kind, value = node.type, node.value
    if kind is ValueType.STRING:
        return "'" + value.replace("'", "''") + "'"
    if kind is ValueType.BOOL:
        return "TRUE" if value else "FALSE"
    if kind is ValueType.NULL:
        return "NULL"
    if kind in (ValueType.LONG, ValueType.INT):
        return str(value)
    if kind is ValueType.DOUBLE:
        if not math.isfinite(value):
            raise ValueError(f"{value} has no literal form in the SQL language")
        # repr gives the shortest round-trip text ('1.5', '1e+20', '1.5e-07'): all DOUBLE tokens.
        return repr(value).replace("e", "E")
    raise ValueError(f"a {kind.value} value has no literal form; it can only come from a @parameter")


#: Keywords and reserved words, which are ASCII: no other name is one of them (``lalr.Scanner``).
_WORDS = KEYWORDS | RESERVED_WORDS


def _property(prop: ast.Property) -> str:
    if prop.scope == "sys":
        return f"sys.{prop.name}"
    name = prop.name
    if name and identifier_problem(name) is None and not (name.isascii() and name.upper() in _WORDS):
        return name
    return "[" + name.replace("]", "]]") + "]"


_PRINT: Backend[str] = Backend("canonical printer", {
    ast.Literal: lambda node, context: _literal(node),
    ast.Property: lambda node, context: _property(node),
    ast.Function: _function,
    ast.Unary: _unary,
    ast.Binary: _binary,
    ast.Comparison: _comparison,
    ast.Like: _like,
    ast.In: _in,
    ast.IsNull: _is_null,
    ast.Exists: _exists,
    ast.And: _and,
    ast.Or: _or,
    ast.Not: _not,
    ast.Set: _set,
    ast.Remove: _remove,
    ast.Action: _action,
})
