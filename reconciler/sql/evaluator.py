"""Compile a filter AST once into Python closures; evaluate them against many messages.

A compiled predicate is called with a :class:`MessageView` and returns True, False or None
(UNKNOWN), or raises :class:`SqlEvalError` (the broker's filter evaluation exception). The common
shapes (property compared with a literal, IN over string literals, LIKE with a constant pattern)
get specialised closures; everything else goes through the generic operators in ``values``.
Evaluation order follows the reference engine: all operands first, then the UNKNOWN check, then the
operator; AND/OR short-circuit left to right.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from reconciler.model import Message, TypedValue, ValueType
from reconciler.names import name_key
from reconciler.sql import arithmetic, ast, like, values
from reconciler.sql.backend import Backend, Unsupported
from reconciler.sql.errors import SqlEvalError
from reconciler.sql.values import MISSING, Int32

Evaluator = Callable[["MessageView"], Any]


class MessageView:
    """What a filter reads: user properties keyed by lower-cased name, sys properties by canonical
    name, both as runtime values. Build it once per message and evaluate any number of filters."""

    __slots__ = ("sys", "user")

    def __init__(self, sys: dict[str, Any], user: dict[str, Any]):
        self.sys = sys
        self.user = user

    @classmethod
    def from_message(cls, message: Message) -> "MessageView":
        user: dict[str, Any] = {}
        for key, tv in message.user.items():
            user.setdefault(name_key(key), values.from_typed(tv))
        return cls({k: values.from_typed(tv) for k, tv in message.sys.items()}, user)

    @classmethod
    def from_plain(cls, sys: Mapping[str, Any] | None = None, user: Mapping[str, Any] | None = None) -> "MessageView":
        """From plain or typed-form values (``{"int": 3}``), as tests and samples write them."""
        message = Message.from_json({"sys": dict(sys or {}), "user": dict(user or {})})
        return cls.from_message(message)


@dataclass(frozen=True)
class Outcome:
    """The result of a filter on one message: TRUE/FALSE/UNKNOWN (None) or an evaluation error."""

    result: bool | None
    error: str | None = None

    @property
    def matched(self) -> bool:
        return self.result is True and self.error is None

    @property
    def label(self) -> str:
        """``true`` / ``false`` / ``unknown`` / ``error``."""
        if self.error is not None:
            return "error"
        return {True: "true", False: "false", None: "unknown"}[self.result]


#: The error-free outcomes, made once (an outcome is immutable): TRUE, FALSE and UNKNOWN by result.
OUTCOMES = {result: Outcome(result) for result in (True, False, None)}


class CompiledFilter:
    """A filter compiled to closures. Call it with a MessageView (raises SqlEvalError)."""

    __slots__ = ("_fn", "node")

    def __init__(self, node: ast.Predicate):
        self.node = node
        self._fn = compile_predicate(node)

    def __call__(self, view: MessageView) -> bool | None:
        return self._fn(view)

    def outcome(self, view: MessageView) -> Outcome:
        try:
            return OUTCOMES[self._fn(view)]
        except SqlEvalError as exc:
            return Outcome(None, str(exc))


# ---------------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------------


def literal_value(node: ast.Literal) -> Any:
    """The runtime value of a literal (Int32 parameters keep their tag)."""
    return values.from_typed(TypedValue(node.type, node.value))


def compile_expr(node: ast.Expr) -> Evaluator:
    """A closure computing the value of ``node`` (MISSING for an absent user property)."""
    return _COMPILE(node)


def _literal(node: ast.Literal) -> Evaluator:
    constant = literal_value(node)
    return lambda view: constant


def _unary(node: ast.Unary) -> Evaluator:
    operand = _COMPILE(node.operand)

    def negate(view: MessageView) -> Any:
        value = operand(view)
        return MISSING if value is MISSING else arithmetic.negate(value)

    return negate


def _property_getter(node: ast.Property) -> Evaluator:
    if node.scope == "sys":
        name = node.name
        return lambda view: view.sys.get(name)
    key = name_key(node.name)
    return lambda view: view.user.get(key, MISSING)


def _binary(node: ast.Binary) -> Evaluator:
    """A left-nested chain (``1 + 2 - 3 * x``) compiled as one loop, not one closure per operator:
    a flat chain is as long as the text allows and is not nesting (see parser.MAX_DEPTH)."""
    steps: list[tuple[Callable[[Any, Any], Any], Evaluator]] = []
    current: ast.Expr = node
    while isinstance(current, ast.Binary):
        steps.append((arithmetic.ARITHMETIC[current.op], _COMPILE(current.right)))
        current = current.left
    first = _COMPILE(current)
    steps.reverse()

    def binary(view: MessageView) -> Any:
        a = first(view)
        for operation, right in steps:
            b = right(view)
            a = MISSING if a is MISSING or b is MISSING else operation(a, b)
        return a

    return binary


def _function(node: ast.Function) -> Evaluator:
    if node.name == "newid":
        return lambda view: uuid.uuid4()
    argument = _COMPILE(node.args[0])

    def property_function(view: MessageView) -> Any:
        name = argument(view)
        if name.__class__ is not str:
            raise SqlEvalError(f"property() needs a string name, got {values.describe(name)}")
        return view.user.get(name_key(name), MISSING)

    return property_function


# ---------------------------------------------------------------------------------------------
# Predicates
# ---------------------------------------------------------------------------------------------


def compile_predicate(node: ast.Predicate) -> Evaluator:
    """A closure returning True / False / None (UNKNOWN) for ``node``."""
    return _COMPILE(node)


def _not(node: ast.Not) -> Evaluator:
    operand = _COMPILE(node.operand)

    def negation(view: MessageView) -> bool | None:
        result = operand(view)
        return None if result is None else not result

    return negation


def _exists(node: ast.Exists) -> Evaluator:
    if node.prop.scope == "sys":
        return lambda view: True
    key = name_key(node.prop.name)
    return lambda view: key in view.user


def _flatten(node: ast.And | ast.Or, cls: type[ast.And] | type[ast.Or]) -> list[ast.Predicate]:
    """Left-nested chains as a list; equivalent because evaluation is left to right either way."""
    out: list[ast.Predicate] = []
    stack: list[ast.Predicate] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cls):
            stack.append(current.right)
            stack.append(current.left)
        else:
            out.append(current)
    return out


def _and(operands: list[Evaluator]) -> Evaluator:
    if len(operands) == 2:
        first, second = operands

        def and2(view: MessageView) -> bool | None:
            a = first(view)
            if a is False:
                return False
            b = second(view)
            if a is True or b is False:
                return b
            return None

        return and2

    def and_n(view: MessageView) -> bool | None:
        unknown = False
        for operand in operands:
            result = operand(view)
            if result is False:
                return False
            if result is None:
                unknown = True
        return None if unknown else True

    return and_n


def _or(operands: list[Evaluator]) -> Evaluator:
    if len(operands) == 2:
        first, second = operands

        def or2(view: MessageView) -> bool | None:
            a = first(view)
            if a is True:
                return True
            b = second(view)
            if a is False or b is True:
                return b
            return None

        return or2

    def or_n(view: MessageView) -> bool | None:
        unknown = False
        for operand in operands:
            result = operand(view)
            if result is True:
                return True
            if result is None:
                unknown = True
        return None if unknown else False

    return or_n


def _negated(fn: Evaluator, negated: bool) -> Evaluator:
    if not negated:
        return fn

    def negation(view: MessageView) -> bool | None:
        result = fn(view)
        return None if result is None else not result

    return negation


def _comparison(node: ast.Comparison) -> Evaluator:
    fast = _fast_comparison(node)
    if fast is not None:
        return fast
    left, right = _COMPILE(node.left), _COMPILE(node.right)
    op = node.op
    compare = values.compare

    def comparison(view: MessageView) -> bool | None:
        a = left(view)
        b = right(view)
        if a is MISSING or b is MISSING:
            return None
        return compare(op, a, b)

    return comparison


def _fast_comparison(node: ast.Comparison) -> Evaluator | None:
    """Specialised closures for ``property OP literal`` with a string or number literal."""
    prop, lit = node.left, node.right
    if not (isinstance(prop, ast.Property) and isinstance(lit, ast.Literal)):
        return None
    op = node.op
    constant = literal_value(lit)
    slow = values.compare
    if lit.type is ValueType.STRING and op in ("=", "<>"):
        equal = op == "="
        if prop.scope == "user":
            key = name_key(prop.name)

            def user_string(view: MessageView) -> bool | None:
                value = view.user.get(key, MISSING)
                if value.__class__ is str:
                    return (value == constant) is equal
                if value is MISSING:
                    return None
                return slow(op, value, constant)

            return user_string
        name = prop.name

        def sys_string(view: MessageView) -> bool | None:
            value = view.sys.get(name)
            if value.__class__ is str:
                return (value == constant) is equal
            return slow(op, value, constant)

        return sys_string
    if lit.type in (ValueType.LONG, ValueType.DOUBLE) and prop.scope == "user":
        key = name_key(prop.name)
        as_float = float(constant)
        compare = {"=": _eq, "<>": _ne, "<": _lt, "<=": _le, ">": _gt, ">=": _ge}[op]
        if lit.type is ValueType.LONG:
            # Python compares int with float exactly; C# first converts the long to double.
            def user_number(view: MessageView) -> bool | None:
                value = view.user.get(key, MISSING)
                cls = value.__class__
                if cls is int or cls is Int32:
                    return compare(value, constant)
                if cls is float:
                    return compare(value, as_float)
                if value is MISSING:
                    return None
                return slow(op, value, constant)

            return user_number

        def user_double(view: MessageView) -> bool | None:
            value = view.user.get(key, MISSING)
            cls = value.__class__
            if cls is float or cls is int or cls is Int32:
                return compare(float(value), constant)
            if value is MISSING:
                return None
            return slow(op, value, constant)

        return user_double
    return None


def _eq(a: Any, b: Any) -> bool:
    return a == b


def _ne(a: Any, b: Any) -> bool:
    return a != b


def _lt(a: Any, b: Any) -> bool:
    return a < b


def _le(a: Any, b: Any) -> bool:
    return a <= b


def _gt(a: Any, b: Any) -> bool:
    return a > b


def _ge(a: Any, b: Any) -> bool:
    return a >= b


def _like(node: ast.Like) -> Evaluator:
    value = _COMPILE(node.value)
    if isinstance(node.pattern, ast.Literal) and (node.escape is None or isinstance(node.escape, ast.Literal)):
        pattern_text = values.to_string(literal_value(node.pattern))
        escape_text = "" if node.escape is None else values.to_string(literal_value(node.escape))
        match = like.like_regex(pattern_text, escape_text).match
        units, to_string = like.utf16_units, values.to_string

        def like_constant(view: MessageView) -> bool | None:
            subject = value(view)
            if subject.__class__ is str:
                return match(subject if subject.isascii() else units(subject)) is not None
            if subject is MISSING:
                return None
            return match(units(to_string(subject))) is not None

        return like_constant
    pattern = _COMPILE(node.pattern)
    escape = _COMPILE(node.escape) if node.escape is not None else None

    def like_dynamic(view: MessageView) -> bool | None:
        subject = value(view)
        pattern_value = pattern(view)
        escape_value = escape(view) if escape is not None else None
        if subject is MISSING or pattern_value is MISSING or escape_value is MISSING:
            return None
        return like.like(subject, pattern_value, escape_value)

    return like_dynamic


def _in(node: ast.In) -> Evaluator:
    value = _COMPILE(node.value)
    items = [_COMPILE(i) for i in node.items]
    literals = [i for i in node.items if isinstance(i, ast.Literal)]
    if len(literals) == len(node.items) and all(i.type in (ValueType.STRING, ValueType.NULL) for i in literals):
        strings = frozenset(i.value for i in literals if i.type is ValueType.STRING)
        has_null = any(i.type is ValueType.NULL for i in literals)
        constants = [literal_value(i) for i in literals]

        def in_strings(view: MessageView) -> bool | None:
            subject = value(view)
            if subject.__class__ is str:
                return subject in strings
            if subject is MISSING:
                return None
            if subject is None:
                return has_null
            return _in_match(subject, constants)

        return in_strings

    def in_list(view: MessageView) -> bool | None:
        subject = value(view)
        candidates = [item(view) for item in items]
        if subject is MISSING:
            return None
        return _in_match(subject, candidates)

    return in_list


def _in_match(subject: Any, candidates: list[Any]) -> bool:
    """C# ``==`` against each item in order; TRUE at the first match, errors only when reached."""
    for candidate in candidates:
        if candidate is MISSING:
            raise SqlEvalError(f"IN cannot compare {values.describe(subject)} with a missing property")
        if values.equals(subject, candidate):
            return True
    return False


def _is_null(node: ast.IsNull) -> Evaluator:
    negated = node.negated
    if node.prop.scope == "sys":
        name = node.prop.name
        return lambda view: (view.sys.get(name) is None) is not negated
    key = name_key(node.prop.name)

    def is_null(view: MessageView) -> bool:
        value = view.user.get(key)
        return (value is None) is not negated

    return is_null


_STATEMENTS = Unsupported("actions run in reconciler.sql.actions, which compiles their expressions here")
_COMPILE: Backend[Evaluator] = Backend("evaluator", {
    ast.Literal: _literal,
    ast.Property: _property_getter,
    ast.Function: _function,
    ast.Unary: _unary,
    ast.Binary: _binary,
    ast.Comparison: _comparison,
    ast.Like: lambda node: _negated(_like(node), node.negated),
    ast.In: lambda node: _negated(_in(node), node.negated),
    ast.IsNull: _is_null,
    ast.Exists: _exists,
    ast.And: lambda node: _and([_COMPILE(p) for p in _flatten(node, ast.And)]),
    ast.Or: lambda node: _or([_COMPILE(p) for p in _flatten(node, ast.Or)]),
    ast.Not: _not,
    ast.Set: _STATEMENTS,
    ast.Remove: _STATEMENTS,
    ast.Action: _STATEMENTS,
})
