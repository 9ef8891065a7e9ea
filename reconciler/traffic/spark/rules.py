"""Whole filters and rules as Spark columns: what a traffic report evaluates per rule.

SQL filters go through the walker (:mod:`reconciler.traffic.spark.translate`), correlation
filters are compiled here, and a rule whose filter has no native translation is evaluated by the
Python evaluator in a UDF (:mod:`reconciler.traffic.spark.fallback`), which the report names.
"""

from __future__ import annotations

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
from reconciler.sql import SqlError, ast, parse_filter
from reconciler.traffic.rows import SYS_COLUMNS, VALUE_FIELD
from reconciler.traffic.spark.algebra import Untranslatable, as_column, literal
from reconciler.traffic.spark.cells import Cells, user_property
from reconciler.traffic.spark.depth import balanced, nesting
from reconciler.traffic.spark.fallback import python_rule_columns
from reconciler.traffic.spark.translate import to_spark


def correlation_match(flt: CorrelationFilter, cells: Cells | None = None) -> Column:
    """AND of exact, type-strict ``object.Equals`` matches; never UNKNOWN, never an error (§5.10)."""
    if flt.is_empty():
        return F.lit(False)
    conds = [F.col(SYS_COLUMNS[CORRELATION_SYS_NAMES[f]]) == F.lit(v) for f, v in flt.system_fields().items()]
    for name, tv in flt.properties:
        cell = user_property(name, cells)
        same_type = cell.is_({tv.type.value})
        if same_type is False:
            return F.lit(False)
        if tv.type is ValueType.NULL:
            conds.append(as_column(same_type))
            continue
        column = VALUE_FIELD[tv.type.value]
        equal = getattr(cell, column) == getattr(literal(tv), column)
        if tv.type is ValueType.DOUBLE:
            equal = equal & ~F.isnan(cell.d)  # Python's float ==: NaN is not NaN
        conds.append(as_column(same_type) & equal)
    return balanced(lambda a, b: a & b, (F.coalesce(cond, F.lit(False)) for cond in conds))


@dataclass(frozen=True)
class RuleColumns:
    """A rule compiled for Spark: ``matched`` (boolean, never NULL), ``error`` (NULL = none)."""

    matched: Column
    error: Column
    #: Why this rule runs in a Python UDF instead of natively (None = native).
    fallback: str | None = None


def property_names(flt: Any) -> set[str]:
    """Lower-cased user property names a filter reads by constant name (for pre-computed cells)."""
    if isinstance(flt, CorrelationFilter):
        return {name.lower() for name, _ in flt.properties}
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
            names.add(node.name.lower())
        elif (
            isinstance(node, ast.Function)
            and node.name == "property"
            and isinstance(node.args[0], ast.Literal)
            and node.args[0].type is ValueType.STRING
        ):
            names.add(node.args[0].value.lower())
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
        pred, err = to_spark(parse_filter(flt.expression, parameters), cells)
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
