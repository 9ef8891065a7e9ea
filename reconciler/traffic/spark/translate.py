"""The walker: a Service Bus SQL AST (:mod:`reconciler.sql.ast`) as native Spark Columns.

Each node becomes a compiled value or predicate (:mod:`reconciler.traffic.spark.algebra`):
constants and properties from :mod:`~reconciler.traffic.spark.cells`, operators from
:mod:`~reconciler.traffic.spark.operators`, AND / OR with the broker's short-circuiting here.
A LIKE whose pattern or escape is not a constant raises :class:`Untranslatable`.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from reconciler.model import TypedValue, ValueType
from reconciler.sql import ast, values
from reconciler.sql.backend import Backend, Unsupported
from reconciler.traffic.sample.rows import SYS_COLUMNS
from reconciler.traffic.spark.algebra import (
    BOUND,
    MISSING_TAG,
    Pred,
    Untranslatable,
    Val,
    as_column,
    error_column,
    let,
    literal,
)
from reconciler.traffic.spark.cells import Cells, cell_column, dynamic_property, system_property, user_property
from reconciler.traffic.spark.depth import balanced
from reconciler.traffic.spark.operators import arithmetic, compare, in_list, like, negate


def to_spark(node: ast.Predicate | ast.Expr, cells: Cells | None = None) -> tuple[Column, Column]:
    """Translate an AST node: (predicate or typed-value struct, error) — error NULL = no error.

    A predicate yields a nullable boolean (NULL = UNKNOWN); an expression yields
    ``struct<t, s, l, d, b>`` with ``t = 'missing'`` for an absent property.
    Raises :class:`Untranslatable` for constructs without a native translation. ``cells`` maps
    lower-cased property names to columns already holding ``props[name]`` (a projection computed
    once per row, shared by many rules); other names are looked up in ``props`` directly.
    """
    tr = _Translator(cells)
    if isinstance(node, ast.PREDICATE_TYPES):
        pred = tr.predicate(node)
        return pred.v, error_column(pred.err)
    val = tr.value(node)
    struct = F.struct(
        val.tag_col().alias("t"),
        val.field("s").alias("s"),
        val.field("l").alias("l"),
        val.field("d").alias("d"),
        val.field("b").alias("b"),
    )
    return struct, error_column(val.err)


def _constant_text(node: ast.Expr | None) -> str | None:
    """The .NET text of a constant LIKE operand, or :class:`Untranslatable`."""
    if node is None:
        return None
    if isinstance(node, ast.Literal):
        return values.to_string(values.from_typed(TypedValue(node.type, node.value)))
    raise Untranslatable("LIKE pattern or ESCAPE is not a constant")


class _Translator:
    """One walk over one AST: ``value`` for expressions, ``predicate`` for conditions."""

    def __init__(self, cells: Cells | None = None):
        self.cells = cells

    def value(self, node: ast.Expr) -> Val:
        return _TRANSLATE[type(node)](self, node)

    def predicate(self, node: ast.Predicate) -> Pred:
        return _TRANSLATE[type(node)](self, node)

    def _property(self, node: ast.Property) -> Val:
        return system_property(node.name) if node.scope == "sys" else user_property(node.name, self.cells)

    def _binary(self, node: ast.Binary) -> Val:
        chain = []  # a left-nested chain walked as a loop: flat chains are not nesting
        current: ast.Expr = node
        while isinstance(current, ast.Binary):
            chain.append(current)
            current = current.left
        result = self.value(current)
        for link in reversed(chain):
            result = arithmetic(link.op, result, self.value(link.right))
        return result

    def _function(self, node: ast.Function) -> Val:
        if node.name == "newid":
            # Bound by parents, so that one evaluation sees one value, not a fresh uuid per mention.
            return Val(frozenset({"uuid"}), s=F.expr("uuid()"), depth=BOUND)
        (arg,) = node.args
        if isinstance(arg, ast.Literal) and arg.type is ValueType.STRING:
            return user_property(arg.value, self.cells)
        return let([self.value(arg)], lambda name: dynamic_property(name, self.cells))

    def _junction(self, node: ast.And | ast.Or) -> Pred:
        parts = [self.predicate(p) for p in _flatten(node, type(node))]
        return _junction(parts, isinstance(node, ast.And))

    def _not(self, node: ast.Not) -> Pred:
        inner = self.predicate(node.operand)
        return Pred(~inner.v, inner.err)

    def _is_null(self, node: ast.IsNull) -> Pred:
        if node.prop.scope == "sys":
            isnull = F.col(SYS_COLUMNS[node.prop.name]).isNull()
        else:
            isnull = as_column(user_property(node.prop.name, self.cells).is_({MISSING_TAG, "null"}))
        return Pred(~isnull if node.negated else isnull)

    def _exists(self, node: ast.Exists) -> Pred:
        if node.prop.scope == "sys":
            return Pred(F.lit(True))
        return Pred(cell_column(node.prop.name, self.cells).isNotNull())

    def _like(self, node: ast.Like) -> Pred:
        return like(self.value(node.value), _constant_text(node.pattern), _constant_text(node.escape), node.negated)


_STATEMENT = Unsupported("actions: the traffic report evaluates filters (their copies' properties come from the evaluator)")
#: The Spark translator's back end: expressions become typed-value structs, predicates nullable
#: booleans with an error column; what has no native column raises Untranslatable (the Python fallback).
_TRANSLATE: Backend[Any] = Backend("Spark translator", {
    ast.Literal: lambda tr, node: literal(node),
    ast.Property: _Translator._property,
    ast.Function: _Translator._function,
    ast.Unary: lambda tr, node: negate(tr.value(node.operand)),
    ast.Binary: _Translator._binary,
    ast.Comparison: lambda tr, node: compare(node.op, tr.value(node.left), tr.value(node.right)),
    ast.Like: _Translator._like,
    ast.In: lambda tr, node: in_list(tr.value(node.value), [tr.value(i) for i in node.items], node.negated),
    ast.IsNull: _Translator._is_null,
    ast.Exists: _Translator._exists,
    ast.And: _Translator._junction,
    ast.Or: _Translator._junction,
    ast.Not: _Translator._not,
    ast.Set: _STATEMENT,
    ast.Remove: _STATEMENT,
    ast.Action: _STATEMENT,
})


def _junction(parts: list[Pred], is_and: bool) -> Pred:
    """n-ary AND / OR with Service Bus short-circuiting: operand k is evaluated (and its error
    counts) only while no earlier operand decided the result; each operand is mentioned twice.

    The value is a balanced tree of Spark's three-valued AND / OR, which are associative, so the
    grouping changes nothing but the depth (log2 n). The error is one flat ``CASE`` in operand order:
    the first operand that fails before any operand decides the result is the error."""
    v = balanced((lambda a, b: a & b) if is_and else (lambda a, b: a | b), (p.v for p in parts))
    if all(p.err is None for p in parts):
        return Pred(v)
    decided = F.lit(not is_and)
    err = None
    for i, part in enumerate(parts):
        if part.err is not None:
            err = F.when(part.err.isNotNull(), part.err) if err is None else err.when(part.err.isNotNull(), part.err)
        if i < len(parts) - 1 and any(p.err is not None for p in parts[i + 1 :]):
            stop = part.v == decided
            null = F.lit(None).cast("string")
            err = F.when(stop, null) if err is None else err.when(stop, null)
    return Pred(v, err)


def _flatten(node: ast.Predicate, cls: type) -> list[ast.Predicate]:
    if isinstance(node, cls):
        return _flatten(node.left, cls) + _flatten(node.right, cls)
    return [node]
