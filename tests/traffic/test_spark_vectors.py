"""Differential: the Spark translation agrees with the Python evaluator on the shared SQL vectors.

Every accepted filter vector is evaluated on every vector message (n × n pairs) in one Spark job,
and must give the same TRUE / FALSE / UNKNOWN / error as ``reconciler.sql``.
"""

from __future__ import annotations

import pytest

from reconciler.model import Rule, SqlFilter
from reconciler.sql import CompiledFilter, MessageView, matches, parse_filter

pytestmark = pytest.mark.spark


def _python_label(vector, message) -> str:
    if vector.params:
        return CompiledFilter(parse_filter(vector.expr, vector.params)).outcome(MessageView.from_message(message)).label
    return matches(Rule("r", SqlFilter(vector.expr)), message).label


def _spark_label(cell) -> str:
    if cell["e"] is not None:
        return "error"
    return {True: "true", False: "false", None: "unknown"}[cell["v"]]


def test_every_vector_filter_on_every_vector_message(spark, frame_of, sql_filter_vectors):
    from pyspark.sql import functions as F

    from reconciler.sql.spark import Untranslatable, to_spark

    vectors = sql_filter_vectors
    frame = frame_of(v.message for v in vectors)
    columns, translated, fallback = [], [], []
    for v in vectors:
        try:
            pred, err = to_spark(parse_filter(v.expr, v.params))
        except Untranslatable:
            fallback.append(v.id)
            continue
        translated.append(v)
        columns.append(F.struct(pred.alias("v"), err.alias("e")))
    rows = frame.select("idx", F.array(*columns).alias("r")).collect()
    assert len(rows) == len(vectors)
    mismatches = []
    for row in rows:
        message = vectors[row["idx"]].message
        for vector, cell in zip(translated, row["r"]):
            want, got = _python_label(vector, message), _spark_label(cell)
            if want != got:
                mismatches.append(f"{vector.id} {vector.expr!r} on message of {vectors[row['idx']].id}: python {want}, spark {got}")
    assert not mismatches, "\n".join(mismatches[:40])
    # Only non-constant LIKE patterns may need the Python fallback.
    assert set(fallback) <= {v.id for v in vectors if " LIKE " in v.expr.upper()}


def test_vector_expectations_hold_on_spark(spark, frame_of, sql_filter_vectors):
    """The diagonal against the YAML ``expect`` itself (errors: error:eval ⇒ error column set)."""
    from pyspark.sql import functions as F

    from reconciler.sql.spark import Untranslatable, to_spark

    vectors = []
    columns = []
    for v in sql_filter_vectors:
        try:
            pred, err = to_spark(parse_filter(v.expr, v.params))
        except Untranslatable:
            continue
        vectors.append(v)
        columns.append(F.struct(pred.alias("v"), err.alias("e")))
    frame = frame_of(v.message for v in vectors)
    diagonal = F.element_at(F.array(*columns), (F.col("idx") + 1).cast("int"))
    rows = frame.select("idx", diagonal.alias("r")).collect()
    wrong = []
    for row in rows:
        v = vectors[row["idx"]]
        got = "error:eval" if row["r"]["e"] is not None else row["r"]["v"] is True
        if got != v.expect:
            wrong.append(f"{v.id} {v.expr!r}: expect {v.expect}, spark {got}")
    assert not wrong, "\n".join(wrong)
