"""The Python-UDF path for rules the Spark translation cannot express natively.

It runs the reference Python evaluator (:func:`reconciler.sql.matches`) on each row, so results
are exact but slow (rows are shipped to Python workers); reports name every rule that uses it.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType, StructField, StructType

from reconciler.model import SYSTEM_PROPERTIES, Rule, ValueType
from reconciler.traffic.sample.rows import PROPS, SYS_COLUMNS, row_to_message

_RESULT = StructType([StructField("matched", BooleanType()), StructField("error", StringType())])


def message_struct() -> Column:
    """Every column a filter can read, timestamps as epoch microseconds (time-zone free)."""
    columns = []
    for name, column in SYS_COLUMNS.items():
        col = F.col(column)
        if SYSTEM_PROPERTIES[name] is ValueType.TIMESTAMP:
            col = F.unix_micros(col)
        columns.append(col.alias(column))
    return F.struct(*columns, F.col(PROPS).alias(PROPS))


def python_rule_columns(rule: Rule) -> tuple[Column, Column]:
    """(matched, error) of ``rule`` computed by the Python evaluator in a UDF."""

    def evaluate(row):  # runs on the Python workers
        from reconciler.sql import matches

        outcome = matches(rule, row_to_message(row.asDict()))
        return (outcome.matched, outcome.error)

    result = F.udf(evaluate, _RESULT)(message_struct())
    return F.coalesce(result.getField("matched"), F.lit(False)), result.getField("error")
