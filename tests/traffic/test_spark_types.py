"""Differential over the property-type vectors (tests/data/type_vectors.yaml): the report's Spark
evaluation (native translation where it exists, the Python evaluator in a UDF elsewhere) agrees
with the Python evaluator on every filter × every vector message, and with each vector's expectation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reconciler.model import Message, Rule, SqlFilter, TypedValue
from reconciler.sql import matches

from .test_spark_vectors import evaluate_matrix

pytestmark = pytest.mark.spark

DOC = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "type_vectors.yaml").read_text(encoding="utf-8"))


def _message(vector) -> Message:
    user = {k: TypedValue.from_typed_form(v) for k, v in (vector.get("props") or {}).items()}
    return Message(sys={"MessageId": TypedValue("string", vector["id"])}, user=user)


def _label(outcome) -> str:
    return "error" if outcome.error is not None else ("true" if outcome.matched else "not")


def _spark_label(cell) -> str:
    return "error" if cell["e"] is not None else ("true" if cell["v"] else "not")


NON_NATIVE = {"decimal", "datetimeoffset", "timespan", "uri", "binary"}

#: Filter columns per select. One select of every filter made Catalyst's optimizer spend minutes
#: (CollapseProject and its neighbours walk every column's expression tree on each pass); a
#: batch keeps each plan small (docs/sql-language.md §10.3).
BATCH = 8


def _holds(vector, types: set[str]) -> bool:
    return any(isinstance(v, dict) and set(v) & types for v in (vector.get("props") or {}).values())


def _vectors(kind: str) -> list[dict]:
    vectors = DOC["filter_vectors"]
    if kind == "other-types":
        return [v for v in vectors if _holds(v, NON_NATIVE)]
    native = [v for v in vectors if not _holds(v, NON_NATIVE)]
    return native if kind == "native-types" else [v for v in native if not _holds(v, {"float"})]


#: kind → the fallback reasons its filters may have (None: every filter is translated natively).
KINDS = {
    # the .NET text of a computed float is not translated (JDK 17's Float.toString)
    "native-types": "computed float",
    "native-types-without-float": None,
    # a property holding decimal, datetimeoffset, timespan, uri or binary: the Python evaluator
    "other-types": "",
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_type_vectors_agree_with_python(interpreted, frame_of, kind):
    """Every filter of the vectors runs on every vector message of the kind, translated for the
    types those messages hold (as a report prunes for its sample's types), and agrees with the
    Python evaluator; each vector's own filter on its own message gives the vector's expectation.
    Vectors share filters (most are ``a = b`` or ``a / b LIKE '3'`` over another type pair), so
    each distinct filter is one column."""
    from reconciler.traffic.sample.footers import property_types
    from reconciler.traffic.spark import PropertyCells, property_names, rule_columns

    vectors = _vectors(kind)
    filters = sorted({v["expr"] for v in vectors})
    rules = [Rule(f"f{i}", SqlFilter(expr)) for i, expr in enumerate(filters)]
    messages = [_message(v) for v in vectors]
    frame = frame_of(messages)
    frame, cells = PropertyCells.over(frame, {n for r in rules for n in property_names(r.filter)}, property_types(frame))
    columns = [rule_columns(r, cells) for r in rules]
    allowed = KINDS[kind]
    fallback = {f: c.fallback for f, c in zip(filters, columns) if c.fallback is not None}
    assert all(allowed is not None and allowed in reason for reason in fallback.values()), fallback
    if kind == "native-types":
        assert "a / b LIKE '3'" in fallback and "a = b" not in fallback
    frame = cells.with_tests(frame)
    rows: dict[int, list] = {}
    for start in range(0, len(columns), BATCH):
        for idx, row in evaluate_matrix(frame, [(c.matched, c.error) for c in columns[start : start + BATCH]]):
            rows.setdefault(idx, []).extend(row)
    assert len(rows) == len(vectors)
    mismatches = []
    for idx, row in rows.items():
        vector = vectors[idx]
        for rule, cell in zip(rules, row):
            want, got = _label(matches(rule, messages[idx])), _spark_label(cell)
            if want != got:
                mismatches.append(f"{rule.filter.expression!r} on {vector['id']}: python {want}, spark {got}")
            if rule.filter.expression == vector["expr"]:
                expect = vector["expect"]
                assert got == ("error" if expect == "error:eval" else "true" if expect else "not"), vector["id"]
    assert not mismatches, "\n".join(mismatches[:40])


def test_type_correlation_vectors_agree_with_python(interpreted, frame_of):
    from reconciler.model import CorrelationFilter, typed_properties
    from reconciler.traffic.spark import rule_columns

    vectors = DOC["correlation_vectors"]
    rules = [
        Rule(v["id"], CorrelationFilter(properties=typed_properties(v["filter"]["properties"]))) for v in vectors
    ]
    messages = [_message(v) for v in vectors]
    columns = [rule_columns(r) for r in rules]
    assert {r.name for r, c in zip(rules, columns) if c.fallback} == {"TC32", "TC33"}  # Uri.Equals
    result = evaluate_matrix(frame_of(messages), [(c.matched, c.error) for c in columns])
    for idx, row in result:
        for rule, cell in zip(rules, row):
            want = matches(rule, messages[idx]).matched
            assert cell["v"] is want and cell["e"] is None, (rule.name, vectors[idx]["id"])
            if rule.name == vectors[idx]["id"]:
                assert want is vectors[idx]["expect"], rule.name


@pytest.mark.parametrize("d", [1e300, -2.5e-300, 1.5e100, 2.5e-5, 1e17, 123.25])
def test_computed_double_text_is_the_evaluators(interpreted, frame_of, d):
    """String + of a computed double: .NET's text, exponents of three digits included."""
    from reconciler.sql import values
    from reconciler.traffic.spark import rule_columns

    text = values.format_double(d * 1.0)
    rule = Rule("r", SqlFilter(f"'' + (d * 1.0) = '{text}'"))
    message = Message(sys={"MessageId": TypedValue("string", "m")}, user={"d": TypedValue("double", d)})
    columns = rule_columns(rule)
    ((_, (cell,)),) = evaluate_matrix(frame_of([message]), [(columns.matched, columns.error)])
    assert columns.fallback is None and cell["v"] is True and matches(rule, message).matched is True
