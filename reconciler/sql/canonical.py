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

from reconciler.model import ValueType
from reconciler.names import name_key
from reconciler.sql import ast
from reconciler.sql.parser import KEYWORDS, RESERVED_WORDS, identifier_problem, parse_action, parse_filter

# Predicate levels: OR < AND < NOT < primary predicate.
_OR, _AND, _NOT, _PRIMARY_PRED = 1, 2, 3, 4
# Expression levels: additive < multiplicative < unary.
_ADDITIVE, _MULTIPLICATIVE, _UNARY = 1, 2, 3


def canonical(node: ast.Node) -> str:
    """The canonical text of a predicate, expression, statement or action."""
    if isinstance(node, ast.Action):
        return "; ".join(_statement(s) for s in node.statements)
    if isinstance(node, (ast.Set, ast.Remove)):
        return _statement(node)
    if isinstance(node, ast.PREDICATE_TYPES):
        return _predicate(node, _OR)
    return _expr(node, _ADDITIVE)


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


def _statement(node: ast.Set | ast.Remove) -> str:
    if isinstance(node, ast.Set):
        return f"SET {_property(node.prop)} = {_expr(node.value, _ADDITIVE)}"
    return f"REMOVE {_property(node.prop)}"


def _predicate(node: ast.Predicate, context: int) -> str:
    if isinstance(node, ast.Or):
        text, level = f"{_predicate(node.left, _OR)} OR {_predicate(node.right, _AND)}", _OR
    elif isinstance(node, ast.And):
        text, level = f"{_predicate(node.left, _AND)} AND {_predicate(node.right, _NOT)}", _AND
    elif isinstance(node, ast.Not):
        text, level = f"NOT {_predicate(node.operand, _NOT)}", _NOT
    else:
        return _primary_predicate(node)
    return f"({text})" if level < context else text


def _primary_predicate(node: ast.Predicate) -> str:
    if isinstance(node, ast.Comparison):
        return f"{_expr(node.left, _ADDITIVE)} {node.op} {_expr(node.right, _ADDITIVE)}"
    if isinstance(node, ast.Like):
        text = f"{_expr(node.value, _ADDITIVE)} {'NOT LIKE' if node.negated else 'LIKE'} {_expr(node.pattern, _ADDITIVE)}"
        if node.escape is not None:
            text += f" ESCAPE {_expr(node.escape, _ADDITIVE)}"
        return text
    if isinstance(node, ast.In):
        items = ", ".join(_expr(item, _ADDITIVE) for item in node.items)
        return f"{_expr(node.value, _ADDITIVE)} {'NOT IN' if node.negated else 'IN'} ({items})"
    if isinstance(node, ast.IsNull):
        return f"{_property(node.prop)} {'IS NOT NULL' if node.negated else 'IS NULL'}"
    if isinstance(node, ast.Exists):
        return f"EXISTS({_property(node.prop)})"
    raise TypeError(f"not a predicate: {node!r}")


def _expr(node: ast.Expr, context: int) -> str:
    if isinstance(node, ast.Binary):
        if node.op in ast.ADDITIVE_OPS:
            level, right_level = _ADDITIVE, _MULTIPLICATIVE
        else:
            level, right_level = _MULTIPLICATIVE, _UNARY
        text = f"{_expr(node.left, level)} {node.op} {_expr(node.right, right_level)}"
        return f"({text})" if level < context else text
    if isinstance(node, ast.Unary):
        operand = node.operand
        inner = _expr(operand, _UNARY)
        if isinstance(operand, ast.Unary) or _is_negative_literal(operand):
            inner = f"({inner})"
        text = f"-{inner}"
        return f"({text})" if context > _UNARY else text
    if isinstance(node, ast.Literal):
        return _literal(node)
    if isinstance(node, ast.Property):
        return _property(node)
    if isinstance(node, ast.Function):
        return f"{node.name}({', '.join(_expr(a, _ADDITIVE) for a in node.args)})"
    raise TypeError(f"not an expression: {node!r}")


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
