"""Every vector of tests/data/sql_vectors.yaml as its own test (filters, actions, correlation)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.model import Rule, TypedValue
from reconciler.sql import SqlError, SqlEvalError, compiled_filter, matches, parse_action, parse_filter
from reconciler.sql.actions import CompiledAction
from reconciler.sql.evaluator import CompiledFilter, MessageView

from .conftest import load_vectors, typed_form, vector_correlation, vector_message, vector_parameters

pytestmark = pytest.mark.unit

VECTORS = load_vectors()


def _cases(section: str) -> list[Any]:
    return [pytest.param(v, id=v["id"]) for v in VECTORS[section]]


@pytest.mark.parametrize("vector", _cases("filter_vectors"))
def test_filter_vector(vector: dict[str, Any]) -> None:
    text, expect = vector["expr"], vector["expect"]
    parameters = vector_parameters(vector)
    if expect == "error:parse":
        with pytest.raises(SqlError):
            parse_filter(text, parameters)
        return
    outcome = CompiledFilter(parse_filter(text, parameters)).outcome(MessageView.from_message(vector_message(vector)))
    if expect == "error:eval":
        assert outcome.error is not None, outcome
        return
    assert outcome.error is None, outcome.error
    assert outcome.matched is expect
    if "tri" in vector:
        assert outcome.label == vector["tri"]


@pytest.mark.parametrize("vector", _cases("action_vectors"))
def test_action_vector(vector: dict[str, Any]) -> None:
    text, expect = vector["action"], vector["expect"]
    if expect == "error:parse":
        with pytest.raises(SqlError):
            parse_action(text)
        return
    action = CompiledAction(parse_action(text))
    message = vector_message(vector)
    if expect == "error:eval":
        with pytest.raises(SqlEvalError):
            action.apply(message)
        return
    result = action.apply(message)
    if "expect_props" in vector:
        expected = {k: TypedValue.from_typed_form(typed_form(v)) for k, v in vector["expect_props"].items()}
        assert dict(result.user) == expected
    for name, value in (vector.get("expect_sys") or {}).items():
        assert result.sys[name] == TypedValue.from_typed_form(typed_form(value))


@pytest.mark.parametrize("vector", _cases("correlation_vectors"))
def test_correlation_vector(vector: dict[str, Any]) -> None:
    rule = Rule("r", vector_correlation(vector["filter"]))
    assert matches(rule, vector_message(vector)).matched is vector["expect"]


def test_every_section_is_covered() -> None:
    assert {"filter_vectors", "action_vectors", "correlation_vectors"} <= set(VECTORS)
    assert all(isinstance(v["expect"], (bool, str)) for s in ("filter_vectors", "action_vectors") for v in VECTORS[s])


def test_compiled_filter_cache_returns_same_object() -> None:
    assert compiled_filter("a = 1") is compiled_filter("a = 1")
