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


def _natively_typed(vector) -> bool:
    return not any(isinstance(v, dict) and set(v) & NON_NATIVE for v in (vector.get("props") or {}).values())


def _groups(native: bool) -> list[list[dict]]:
    """The vectors of one kind; the native ones grouped by the type of their property ``a``, so
    each group's filters are translated for the types its messages hold (as a report prunes for
    its sample's types): translated for every type at once, 270 filters make a plan too large."""
    vectors = [v for v in DOC["filter_vectors"] if _natively_typed(v) is native]
    if not native:
        return [vectors]
    groups: dict[str, list[dict]] = {}
    for v in vectors:
        a = (v.get("props") or {}).get("a")
        groups.setdefault(next(iter(a)) if isinstance(a, dict) else type(a).__name__, []).append(v)
    return list(groups.values())


@pytest.mark.parametrize("native", [True, False], ids=["native-types", "other-types"])
def test_type_vectors_agree_with_python(interpreted, frame_of, native):
    """Vectors whose properties hold only natively translated types are all translated to Spark
    columns (none falls back); the others run in the Python evaluator, and agree just the same.
    Every filter of a group runs on every message of the group."""
    from reconciler.traffic.property_types import property_types
    from reconciler.traffic.spark import PropertyCells, property_names, rule_columns

    mismatches = []
    for vectors in _groups(native):
        rules = [Rule(v["id"], SqlFilter(v["expr"])) for v in vectors]
        messages = [_message(v) for v in vectors]
        frame = frame_of(messages)
        frame, cells = PropertyCells.over(frame, {n for r in rules for n in property_names(r.filter)}, property_types(frame))
        columns = [rule_columns(r, cells) for r in rules]
        if native:
            assert [r.name for r, c in zip(rules, columns) if c.fallback] == []
        frame = cells.with_tests(frame)
        for idx, row in evaluate_matrix(frame, [(c.matched, c.error) for c in columns]):
            for rule, cell in zip(rules, row):
                want, got = _label(matches(rule, messages[idx])), _spark_label(cell)
                if want != got:
                    mismatches.append(f"{rule.name} {rule.filter.expression!r} on {vectors[idx]['id']}: python {want}, spark {got}")
                if rule.name == vectors[idx]["id"]:
                    expect = vectors[idx]["expect"]
                    assert got == ("error" if expect == "error:eval" else "true" if expect else "not"), rule.name
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
