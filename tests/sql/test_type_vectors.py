"""The property-type vectors (tests/data/type_vectors.yaml): every numeric type pair, the literal
types, .NET text forms and correlation equality, through the Python evaluator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.model import Rule
from reconciler.sql import matches
from reconciler.sql.evaluator import CompiledFilter, MessageView
from reconciler.sql.parser import parse_filter

from .conftest import vector_correlation, vector_message

pytestmark = pytest.mark.unit

VECTORS = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "type_vectors.yaml").read_text(encoding="utf-8"))


def _cases(section: str) -> list[Any]:
    return [pytest.param(v, id=v["id"]) for v in VECTORS[section]]


@pytest.mark.parametrize("vector", _cases("filter_vectors"))
def test_type_filter_vector(vector: dict[str, Any]) -> None:
    outcome = CompiledFilter(parse_filter(vector["expr"])).outcome(MessageView.from_message(vector_message(vector)))
    if vector["expect"] == "error:eval":
        assert outcome.error is not None, outcome
        return
    assert outcome.error is None, outcome.error
    assert outcome.matched is vector["expect"]


@pytest.mark.parametrize("vector", _cases("correlation_vectors"))
def test_type_correlation_vector(vector: dict[str, Any]) -> None:
    assert matches(Rule("r", vector_correlation(vector["filter"])), vector_message(vector)).matched is vector["expect"]


def test_every_numeric_pair_is_covered() -> None:
    pairs = {json.dumps(v["props"], sort_keys=True) for v in VECTORS["filter_vectors"] if v["id"].startswith("TP")}
    assert len(pairs) == 12 * 12
