"""Differential: the Spark translation agrees with the Python evaluator on the SQL vectors
(tests/data/sql_vectors.yaml).

Every accepted filter vector is evaluated on every vector message (n × n pairs) in one Spark job
and must give the same TRUE / FALSE / UNKNOWN / error as ``reconciler.sql``; the diagonal must
also give each vector's own ``expect``.
"""

from __future__ import annotations

import pytest

from reconciler.model import Rule, SqlFilter
from reconciler.sql import CompiledFilter, MessageView, matches, parse_filter

pytestmark = pytest.mark.spark


def python_label(expr: str, params, message) -> str:
    if params:
        return CompiledFilter(parse_filter(expr, params)).outcome(MessageView.from_message(message)).label
    return matches(Rule("r", SqlFilter(expr)), message).label


def spark_label(cell) -> str:
    if cell["e"] is not None:
        return "error"
    return {True: "true", False: "false", None: "unknown"}[cell["v"]]


def evaluate_matrix(frame, predicates):
    """[(idx, [cell per predicate])] for (predicate, error) column pairs, in one Spark job."""
    from pyspark.sql import functions as F

    cells = [F.struct(p.alias("v"), e.alias("e")) for p, e in predicates]
    return [(row["idx"], row["r"]) for row in frame.select("idx", F.array(*cells).alias("r")).collect()]


@pytest.mark.parametrize("way", ["inline-lookups", "property-cells", "observed-types"])
def test_vectors_agree_with_python_evaluator_and_expectations(interpreted, frame_of, sql_filter_vectors, way):
    """``property-cells``: lookups and tag tests projected once per message; ``observed-types``
    also translates for the types the vector messages' properties have (the report's way)."""
    from reconciler.traffic.sample.footers import property_types
    from reconciler.traffic.spark import PropertyCells, Untranslatable, property_names, to_spark

    vectors = sql_filter_vectors
    frame = frame_of(v.message for v in vectors)
    cells = None
    if way != "inline-lookups":
        types = property_types(frame) if way == "observed-types" else None
        frame, cells = PropertyCells.over(frame, {n for v in vectors for n in property_names(SqlFilter(v.expr))}, types)
    translated, predicates, fallback = [], [], []
    for v in vectors:
        try:
            predicates.append(to_spark(parse_filter(v.expr, v.params), cells))
        except Untranslatable:
            fallback.append(v.id)
            continue
        translated.append(v)
    if cells is not None:
        assert cells.tests  # the filters' tag tests are projected columns
        frame = cells.with_tests(frame)
    result = evaluate_matrix(frame, predicates)
    assert len(result) == len(vectors)

    mismatches, wrong = [], []
    for idx, cells in result:
        owner = vectors[idx]
        for vector, cell in zip(translated, cells):
            want, got = python_label(vector.expr, vector.params, owner.message), spark_label(cell)
            if want != got:
                mismatches.append(f"{vector.id} {vector.expr!r} on message of {owner.id}: python {want}, spark {got}")
            if vector is owner:
                expect = "error:eval" if got == "error" else got == "true"
                if expect != vector.expect:
                    wrong.append(f"{vector.id} {vector.expr!r}: expect {vector.expect}, spark {got}")
    assert not mismatches, "\n".join(mismatches[:40])
    assert not wrong, "\n".join(wrong)
    # Only LIKE with a pattern or escape computed per message needs the Python fallback.
    assert fallback and set(fallback) <= {v.id for v in vectors if " LIKE " in v.expr.upper()}


def test_correlation_vectors_agree(interpreted, frame_of, sql_correlation_vectors):
    from reconciler.traffic.spark import filter_columns

    vectors = sql_correlation_vectors
    frame = frame_of(message for _, _, message, _ in vectors)
    result = evaluate_matrix(frame, [filter_columns(flt) for _, flt, _, _ in vectors])
    for idx, cells in result:
        message = vectors[idx][2]
        for (vid, flt, _, expect), cell in zip(vectors, cells):
            want = matches(Rule("r", flt), message).matched
            assert cell["v"] is want and cell["e"] is None, (vid, vectors[idx][0])
            if vid == vectors[idx][0]:
                assert want is expect, vid


def test_string_result_limit_counts_utf16_code_units_as_the_python_evaluator(interpreted, frame_of):
    """Over the 32,767 limit only as UTF-16 code units (an emoji counts two), in both evaluators."""
    from reconciler.model import Message, TypedValue
    from reconciler.traffic.spark import to_spark

    near, over = "\U0001F600" * 16_383 + "a", "\U0001F600" * 16_384
    messages = [Message(user={"s": TypedValue.infer(text)}) for text in (near, over)]
    expr = "s + '' = 'x'"
    result = dict(evaluate_matrix(frame_of(messages), [to_spark(parse_filter(expr))]))
    got = [spark_label(result[i][0]) for i in range(2)]
    assert got == [python_label(expr, None, m) for m in messages] == ["false", "error"]
