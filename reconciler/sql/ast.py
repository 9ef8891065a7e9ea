"""The typed AST of the Service Bus SQL filter and rule-action language.

One tree, many walkers: the canonical printer, the Python evaluator and the Spark translator all
walk these nodes. Nodes are frozen (hashable, comparable) so two parses of equivalent text compare
equal. The parser normalises while building: ``!=`` becomes ``<>``, unary ``+`` disappears (the
engine applies no operator for it), a unary minus directly over a numeric literal is folded into
the literal, ``p(...)`` becomes ``property(...)``, ``user.x`` becomes ``x`` (scope ``user``), and
``@parameters`` are replaced by literals that remember the parameter's name.

Expressions (values): Literal, Property, Function, Unary, Binary.
Predicates (three-valued): Comparison, Like, In, IsNull, Exists, And, Or, Not.
Actions: Action of Set / Remove statements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union
from typing import Literal as _L

from reconciler.model import ValueType

Scope = _L["sys", "user"]

#: Binary arithmetic operators, by precedence: additive then multiplicative.
ADDITIVE_OPS = ("+", "-")
MULTIPLICATIVE_OPS = ("*", "/", "%")
#: Comparison operators after normalisation (``!=`` is parsed as ``<>``).
COMPARISON_OPS = ("=", "<>", "<", "<=", ">", ">=")


@dataclass(frozen=True, slots=True)
class Literal:
    """A constant. ``type`` is LONG, DOUBLE, STRING, BOOL or NULL for literals written in the text;
    a substituted parameter may also carry INT, UUID or TIMESTAMP and keeps its (case-folded, ``name_key``)
    name without the ``@`` in ``parameter``."""

    type: ValueType
    value: Any
    parameter: str | None = None


@dataclass(frozen=True, slots=True)
class Property:
    """A property reference: ``sys`` names are canonical BrokeredMessage names (``Label``),
    ``user`` names are kept as written (lookup is case-insensitive at evaluation)."""

    scope: Scope
    name: str


@dataclass(frozen=True, slots=True)
class Function:
    """``newid()`` or ``property(expr)``."""

    name: str
    args: tuple["Expr", ...] = ()


@dataclass(frozen=True, slots=True)
class Unary:
    """Unary minus (the only unary operator left after parsing)."""

    op: str
    operand: "Expr"


@dataclass(frozen=True, slots=True)
class Binary:
    """Arithmetic ``+ - * / %`` (``+`` concatenates when a string is involved)."""

    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True, slots=True)
class Comparison:
    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True, slots=True)
class Like:
    value: "Expr"
    pattern: "Expr"
    escape: "Expr | None" = None
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In:
    value: "Expr"
    items: tuple["Expr", ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    prop: Property
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Exists:
    prop: Property


@dataclass(frozen=True, slots=True)
class And:
    left: "Predicate"
    right: "Predicate"


@dataclass(frozen=True, slots=True)
class Or:
    left: "Predicate"
    right: "Predicate"


@dataclass(frozen=True, slots=True)
class Not:
    operand: "Predicate"


@dataclass(frozen=True, slots=True)
class Set:
    """``SET prop = expr``."""

    prop: Property
    value: "Expr"


@dataclass(frozen=True, slots=True)
class Remove:
    """``REMOVE prop``."""

    prop: Property


@dataclass(frozen=True, slots=True)
class Action:
    """A rule action: 1..32 statements executed in order."""

    statements: tuple[Union[Set, Remove], ...]


Expr = Union[Literal, Property, Function, Unary, Binary]
Predicate = Union[Comparison, Like, In, IsNull, Exists, And, Or, Not]
Statement = Union[Set, Remove]
Node = Union[Expr, Predicate, Statement, Action]

PREDICATE_TYPES = (Comparison, Like, In, IsNull, Exists, And, Or, Not)


#: Fields of each node class that hold child nodes (a node or a tuple of nodes).
CHILD_FIELDS: dict[type, tuple[str, ...]] = {
    Literal: (),
    Property: (),
    Function: ("args",),
    Unary: ("operand",),
    Binary: ("left", "right"),
    Comparison: ("left", "right"),
    Like: ("value", "pattern", "escape"),
    In: ("value", "items"),
    IsNull: ("prop",),
    Exists: ("prop",),
    And: ("left", "right"),
    Or: ("left", "right"),
    Not: ("operand",),
    Set: ("prop", "value"),
    Remove: ("prop",),
    Action: ("statements",),
}


def children(node: Node) -> tuple[Node, ...]:
    """The direct child nodes of ``node`` in source order (for generic walks)."""
    out: list[Node] = []
    for name in CHILD_FIELDS[type(node)]:
        value = getattr(node, name)
        if isinstance(value, tuple):
            out.extend(value)
        elif value is not None:
            out.append(value)
    return tuple(out)


def conjuncts(tree: Predicate) -> list[Predicate]:
    """The terms of ``tree``'s top-level AND chain, in source order (``tree`` itself when it is no AND)."""
    out: list[Predicate] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, And):
            stack += [node.right, node.left]
        else:
            out.append(node)
    return out


def disjuncts(tree: Predicate) -> list[Predicate]:
    """The terms of ``tree``'s top-level OR chain, in source order (``tree`` itself when it is no OR)."""
    out: list[Predicate] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Or):
            stack += [node.right, node.left]
        else:
            out.append(node)
    return out
