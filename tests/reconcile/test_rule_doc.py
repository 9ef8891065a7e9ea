"""The one rule document: every rule reads back from it, as JSON and as YAML, and fits the rule-file schema."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.export import dump_yaml, rule_file_doc
from reconciler.json_text import json_text
from reconciler.model import (
    CorrelationFilter,
    FalseFilter,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    TypedValue,
    ValueType,
    rule_from_doc,
    rule_to_doc,
)
from tests.amqp.strategies import typed_values

pytestmark = pytest.mark.unit

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "rules.schema.json").read_text())

PROPERTIES = {
    "s": TypedValue(ValueType.STRING, "3"),
    "l": TypedValue(ValueType.LONG, 3),
    "i": TypedValue(ValueType.INT, 3),
    "d": TypedValue(ValueType.DOUBLE, 1.5),
    "nan": TypedValue(ValueType.DOUBLE, float("inf")),
    "b": TypedValue(ValueType.BOOL, False),
    "u": TypedValue(ValueType.UUID, uuid.UUID(int=7)),
    "t": TypedValue(ValueType.TIMESTAMP, dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)),
    "z": TypedValue(ValueType.NULL),
}
RULES = [
    Rule("sql", SqlFilter("a = 1"), SqlRuleAction("SET b = 2")),
    Rule("true", TrueFilter()),
    Rule("false", FalseFilter(), SqlRuleAction("REMOVE c")),
    Rule("corr", CorrelationFilter(subject="refund", to="q", properties=PROPERTIES)),
]


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_rule_reads_back_from_its_document(rule, explicit):
    doc = rule_to_doc(rule, explicit_types=explicit)
    assert rule_from_doc(doc) == rule
    assert rule_from_doc(json.loads(json.dumps(doc))) == rule
    assert rule_from_doc(yaml.safe_load(yaml.safe_dump(doc))) == rule


def test_explicit_types_name_every_non_null_property_type():
    (corr,) = [r for r in RULES if r.name == "corr"]
    plain = rule_to_doc(corr)["correlation"]["properties"]
    explicit = rule_to_doc(corr, explicit_types=True)["correlation"]["properties"]
    assert plain["l"] == 3 and plain["s"] == "3" and plain["i"] == {"int": 3}
    assert explicit["l"] == {"long": 3} and explicit["s"] == {"string": "3"} and explicit["d"] == {"double": 1.5}
    assert explicit["z"] is None and plain["z"] is None
    assert all(isinstance(v, dict) and len(v) == 1 for k, v in explicit.items() if k != "z")


def test_json_and_yaml_are_one_rule_file_document():
    doc = rule_file_doc("orders", {"billing": RULES, "idle": []})
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    assert json.loads(json_text(doc)) == yaml.safe_load(dump_yaml(doc)) == doc
    assert doc["subscriptions"]["idle"] == {"rules": [], "allow_empty": True}
    assert [rule_from_doc(r) for r in doc["subscriptions"]["billing"]["rules"]] == RULES


@pytest.mark.parametrize("text", ["a\x85b", "x\u2028y", "tab\there", "it's", "'quoted' \"both\"", " padded "])
def test_exported_yaml_keeps_every_character(text):
    """Line-break characters YAML knows (NEL, LS) and quotes survive the rule file's YAML."""
    rule = Rule("odd", SqlFilter(f"a = '{text}'"), SqlRuleAction(f"SET b = '{text}'"))
    doc = rule_file_doc("orders", {"billing": [rule]})
    (read,) = yaml.safe_load(dump_yaml(doc))["subscriptions"]["billing"]["rules"]
    assert rule_from_doc(read) == rule


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdefgh"), typed_values, min_size=1, max_size=6), st.booleans())
def test_every_property_type_survives_rule_files_and_exports(properties, explicit):
    """A correlation property of any type: rule document → JSON / YAML → schema-valid → the same rule."""
    rule = Rule("corr", CorrelationFilter(properties=properties))
    doc = rule_file_doc("orders", {"billing": [rule]}, explicit_types=explicit)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    for back_doc in (json.loads(json_text(doc)), yaml.safe_load(dump_yaml(doc))):
        (back,) = back_doc["subscriptions"]["billing"]["rules"]
        assert rule_from_doc(back) == rule
