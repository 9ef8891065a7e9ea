"""Whole filters and rules as Spark columns: what a traffic report evaluates per rule.

SQL filters go through the walker (:mod:`reconciler.traffic.spark.translate`), correlation
filters are compiled here, and a rule whose filter has no native translation is evaluated by the
Python evaluator in a UDF (:mod:`reconciler.traffic.spark.fallback`), which the report names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from reconciler.model import (
    CORRELATION_SYS_NAMES,
    CorrelationFilter,
    FalseFilter,
    Rule,
    SqlFilter,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.names import name_key
from reconciler.sql import SqlError, ast, parse_filter
from reconciler.traffic.sample.rows import SYS_COLUMNS, VALUE_FIELD, prop_to_struct
from reconciler.traffic.spark.algebra import Untranslatable
from reconciler.traffic.spark.cells import Cells, PropertyCells, cell_column
from reconciler.traffic.spark.depth import MAX_OPERATOR_NESTING, balanced, nesting, operator_nesting
from reconciler.traffic.spark.fallback import python_rule_columns
from reconciler.traffic.spark.translate import to_spark

#: Tags that are one .NET type on the broker (a symbol arrives as a string).
_SAME_BROKER_TYPE = {"string": ("string", "symbol"), "symbol": ("string", "symbol")}


def correlation_match(flt: CorrelationFilter, cells: Cells | None = None) -> Column:
    """AND of exact, type-strict ``object.Equals`` matches; never UNKNOWN, never an error (§5.10).

    Each property is compared on its sample cell (tag and stored field), so it works for every type
    without the operator translation: the same .NET type (string and symbol are one), then the
    stored value; NaN equals NaN and a decimal's scale does not count, as in ``Equals``. A Uri
    filter value (``Uri.Equals`` normalises) is left to the Python evaluator."""
    if flt.is_empty():
        return F.lit(False)
    conds = [F.col(SYS_COLUMNS[CORRELATION_SYS_NAMES[f]]) == F.lit(v) for f, v in flt.system_fields().items()]
    known = cells.types if isinstance(cells, PropertyCells) else None
    for name, tv in flt.properties:
        tags = _SAME_BROKER_TYPE.get(tv.type.value, (tv.type.value,))
        if known is not None and not set(tags) & known.get(name_key(name), frozenset()):
            return F.lit(False)
        cell = cell_column(name, cells)
        same_type = cell.getField("t").isin(*tags)
        conds.append(same_type if tv.type is ValueType.NULL else same_type & _equal_value(cell, tv))
    return balanced(lambda a, b: a & b, (F.coalesce(cond, F.lit(False)) for cond in conds))


def _equal_value(cell: Column, tv: TypedValue) -> Column:
    """``tv.Equals(value)`` for a cell already known to hold ``tv``'s type."""
    vtype = tv.type
    if vtype is ValueType.URI:
        raise Untranslatable("a Uri correlation value (Uri.Equals) has no Spark translation")
    if vtype is ValueType.BINARY:
        return F.lit(False)  # byte[].Equals compares references
    stored = prop_to_struct("", tv)
    if vtype is ValueType.DECIMAL:
        return _decimal_key(cell.getField("s")) == F.lit(_decimal_key_text(stored["s"]))
    field = VALUE_FIELD[vtype.value]
    equal = cell.getField(field) == F.lit(stored[field])
    if vtype in (ValueType.FLOAT, ValueType.DOUBLE) and math.isnan(tv.value):
        return F.isnan(cell.getField("d"))  # double.Equals: NaN equals NaN
    return equal


def _decimal_key(text: Column) -> Column:
    """A decimal's text without trailing fraction zeros (``3.00`` → ``3``): Equals ignores the scale."""
    return F.regexp_replace(F.regexp_replace(text, r"(\.[0-9]*?)0+$", "$1"), r"\.$", "")


def _decimal_key_text(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass(frozen=True)
class RuleColumns:
    """A rule compiled for Spark: ``matched`` (boolean, never NULL), ``error`` (NULL = none)."""

    matched: Column
    error: Column
    #: Why this rule runs in a Python UDF instead of natively (None = native).
    fallback: str | None = None


def property_names(flt: Any) -> set[str]:
    """Folded (``name_key``) user property names a filter reads by constant name (for pre-computed cells)."""
    if isinstance(flt, CorrelationFilter):
        return {name_key(name) for name, _ in flt.properties}
    if not isinstance(flt, SqlFilter):
        return set()
    try:
        stack: list[Any] = [parse_filter(flt.expression)]
    except SqlError:
        return set()
    names = set()
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Property) and node.scope == "user":
            names.add(name_key(node.name))
        elif (
            isinstance(node, ast.Function)
            and node.name == "property"
            and isinstance(node.args[0], ast.Literal)
            and node.args[0].type is ValueType.STRING
        ):
            names.add(name_key(node.args[0].value))
        stack.extend(ast.children(node))
    return names


def filter_columns(
    flt: Any, parameters: Mapping[str, TypedValue] | None = None, cells: Cells | None = None
) -> tuple[Column, Column]:
    """(match, error) of a model filter; raises Untranslatable (or SqlError for bad SQL)."""
    if isinstance(flt, TrueFilter):
        return F.lit(True), F.lit(None).cast("string")
    if isinstance(flt, FalseFilter):
        return F.lit(False), F.lit(None).cast("string")
    if isinstance(flt, CorrelationFilter):
        return correlation_match(flt, cells), F.lit(None).cast("string")
    if isinstance(flt, SqlFilter):
        tree = parse_filter(flt.expression, parameters)
        depth = operator_nesting(tree)
        if depth > MAX_OPERATOR_NESTING:
            raise Untranslatable(
                f"operators nest {depth} deep, more than Spark's analyzer resolves ({MAX_OPERATOR_NESTING})"
            )
        pred, err = to_spark(tree, cells)
        return F.coalesce(pred, F.lit(False)) & err.isNull(), err
    raise TypeError(f"not a filter: {flt!r}")


def rule_columns(rule: Rule, cells: Cells | None = None, max_nesting: int | None = None) -> RuleColumns:
    """The rule's match/error columns: native when possible, otherwise a reported Python UDF.

    ``max_nesting``: for a Spark Connect session, the expression nodes a native column may nest
    (:mod:`reconciler.traffic.spark.depth`); a filter nested deeper takes the Python UDF."""
    try:
        matched, error = filter_columns(rule.filter, cells=cells)
        if max_nesting is not None:
            deepest = max(nesting(matched), nesting(error))
            if deepest > max_nesting:
                raise Untranslatable(f"nested {deepest} expressions deep, more than Spark Connect carries ({max_nesting})")
        return RuleColumns(matched, error)
    except Untranslatable as exc:
        matched, error = python_rule_columns(rule)
        return RuleColumns(matched, error, fallback=str(exc))
