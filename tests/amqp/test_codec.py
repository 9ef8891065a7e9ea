"""Codec: model ⇄ AMQP values, checked through real proton encoding to bytes and back."""

from __future__ import annotations

import datetime as dt
import uuid

import proton
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Described, int32, symbol, timestamp, ulong

from reconciler import model as m
from reconciler.amqp import codec as c
from reconciler.amqp.wire import sections
from reconciler.amqp.wire.decode import decode_value
from reconciler.amqp.wire.encode import encode_value
from reconciler.errors import SbrulesError

from .strategies import ms_datetimes, names, text, typed_values

pytestmark = pytest.mark.unit

correlation_filters = st.builds(
    m.CorrelationFilter,
    correlation_id=st.none() | text,
    message_id=st.none() | text,
    to=st.none() | text,
    reply_to=st.none() | text,
    subject=st.none() | text,
    session_id=st.none() | text,
    reply_to_session_id=st.none() | text,
    content_type=st.none() | text,
    properties=st.dictionaries(names, typed_values, max_size=4),
)
filters = st.one_of(
    text.map(m.SqlFilter), st.just(m.TrueFilter()), st.just(m.FalseFilter()), correlation_filters
)
actions = st.one_of(st.just(m.EmptyAction()), text.map(m.SqlRuleAction))
rules = st.builds(m.Rule, name=names, filter=filters, action=actions)


def through_bytes(value):
    return decode_value(encode_value(value))


@given(typed_values)
def test_typed_value_round_trip_through_bytes(tv):
    assert c.from_amqp(through_bytes({"v": c.to_amqp(tv)})["v"]) == tv


@settings(max_examples=150)
@given(rules, st.none() | ms_datetimes)
def test_rule_description_round_trip(rule, created_at):
    decoded = c.decode_rule_description_full(through_bytes(c.encode_rule_description(rule, created_at)))
    assert decoded.rule == rule
    assert decoded.created_at == created_at


@settings(max_examples=150)
@given(rules)
def test_add_rule_body_round_trip(rule):
    if isinstance(rule.filter, m.CorrelationFilter) and rule.filter.is_empty():
        with pytest.raises(c.CodecError, match="at least one"):
            c.decode_add_rule_body(through_bytes(c.encode_add_rule_body(rule)))
        return
    decoded = c.decode_add_rule_body(through_bytes(c.encode_add_rule_body(rule)))
    expected_filter = {m.TrueFilter(): m.SqlFilter("1=1"), m.FalseFilter(): m.SqlFilter("1=0")}.get(
        rule.filter, rule.filter
    ) if not isinstance(rule.filter, m.CorrelationFilter) else rule.filter
    assert decoded == m.Rule(rule.name, expected_filter, rule.action)


def test_int_and_long_stay_distinct_on_the_wire():
    as_int = encode_value(c.to_amqp(m.TypedValue(m.ValueType.INT, 3)))
    as_long = encode_value(c.to_amqp(m.TypedValue(m.ValueType.LONG, 3)))
    assert as_int == b"\x54\x03"  # smallint
    assert as_long == b"\x55\x03"  # smalllong


def test_descriptor_codes_are_the_sdk_literals():
    assert c.SQL_FILTER_CODE == 83483426822 == 0x000001370000006
    assert c.CORRELATION_FILTER_CODE == 83483426825
    assert c.TRUE_FILTER_CODE == 83483426823 and c.FALSE_FILTER_CODE == 83483426824
    assert c.RULE_DESCRIPTION_CODE == 1335734829060
    assert c.SQL_RULE_ACTION_CODE == 1335734829062 and c.EMPTY_RULE_ACTION_CODE == 1335734829061
    encoded = encode_value(c.encode_rule_description(m.Rule("r", m.SqlFilter("a=1"))))
    assert encoded.startswith(b"\x00\x80\x00\x00\x01\x37\x00\x00\x00\x04")
    assert b"\x00\x80\x00\x00\x00\x13\x70\x00\x00\x06" in encoded
    assert b"\x00\x80\x00\x00\x01\x37\x00\x00\x00\x05" in encoded


# -- add-rule bodies exactly as each SDK sends them ------------------------------------------


def test_encode_add_rule_net2_shape_sql_no_action():
    body = c.encode_add_rule_body(m.Rule("r1", m.SqlFilter("color = 'red'")))
    assert body == {
        "rule-name": "r1",
        "rule-description": {"sql-filter": {"expression": "color = 'red'"}, "sql-rule-action": None, "rule-name": "r1"},
    }


def test_encode_add_rule_true_false_and_action():
    body = c.encode_add_rule_body(m.Rule("t", m.TrueFilter(), m.SqlRuleAction("SET x = 1")))
    assert body["rule-description"]["sql-filter"] == {"expression": "1=1"}
    assert body["rule-description"]["sql-rule-action"] == {"expression": "SET x = 1"}
    assert c.encode_add_rule_body(m.Rule("f", m.FalseFilter()))["rule-description"]["sql-filter"] == {
        "expression": "1=0"
    }


def test_encode_add_rule_correlation_writes_all_keys_and_typed_properties():
    flt = m.CorrelationFilter(subject="order", properties={"n": {"int": 3}, "s": "x", "l": 4})
    corr = c.encode_add_rule_body(m.Rule("c", flt))["rule-description"]["correlation-filter"]
    assert list(corr) == [*c.CORRELATION_WIRE_KEYS, "properties"]
    assert corr["label"] == "order" and corr["to"] is None
    props = through_bytes(corr["properties"])
    assert type(props["n"]) is int32 and type(props["l"]) is int and props["s"] == "x"


def test_decode_add_rule_js_shape_without_action_key_and_net1_without_inner_name():
    js = {"rule-name": "r", "rule-description": {"correlation-filter": {"label": "x", "properties": {"k": int32(1)}}}}
    rule = c.decode_add_rule_body(through_bytes(js))
    assert rule == m.Rule("r", m.CorrelationFilter(subject="x", properties={"k": {"int": 1}}))
    net1 = {"rule-name": "r", "rule-description": {"sql-filter": {"expression": "1=1"}, "sql-rule-action": None}}
    assert c.decode_add_rule_body(net1) == m.Rule("r", m.SqlFilter("1=1"))


@pytest.mark.parametrize(
    "body, message",
    [
        ([], "must be a map"),
        ({"rule-description": {}}, "rule-name"),
        ({"rule-name": "r", "rule-description": {}}, "exactly one"),
        ({"rule-name": "r", "rule-description": {"sql-filter": {"expression": "a"}, "correlation-filter": {"to": "x"}}}, "exactly one"),
        ({"rule-name": "r", "rule-description": {"sql-filter": {}}}, "expression"),
        ({"rule-name": "r", "rule-description": {"sql-filter": {"expression": "a"}, "sql-rule-action": "SET a=1"}}, "sql-rule-action"),
        ({"rule-name": "r", "rule-description": {"correlation-filter": {"bogus": "x"}}}, "unknown key"),
        ({"rule-name": "r", "rule-description": {"correlation-filter": {"to": None}}}, "at least one"),
        ({"rule-name": "r", "rule-description": {"correlation-filter": {"properties": {"p": [1]}}}}, "list"),
        ({"rule-name": "r", "rule-description": {"sql-filter": {"expression": "a"}, "rule-name": "other"}}, "differs"),
    ],
)
def test_decode_add_rule_errors(body, message):
    with pytest.raises(c.CodecError, match=message):
        c.decode_add_rule_body(body)


# -- rule-description values built by hand, as docs/protocol.md §3 describes them -----------------------------


def described(code, values):
    return Described(ulong(code), values)


def test_decode_hand_built_correlation_with_nulls_typed_properties_and_created_at():
    value = described(
        0x0000013700000004,
        [
            described(0x000001370000009, ["cid", None, None, None, "lbl", None, None, "application/json",
                                          {"i": int32(7), "l": 7, "s": "7", "b": True, "d": 1.5,
                                           "u": uuid.UUID(int=1), "t": timestamp(86_400_000), "z": None}]),
            described(0x0000013700000005, []),
            "corr-rule",
            timestamp(1_700_000_000_000),
        ],
    )
    full = c.decode_rule_description_full(through_bytes(value))
    assert full.created_at == dt.datetime.fromtimestamp(1_700_000_000, dt.timezone.utc)
    props = full.rule.filter.property_map
    assert full.rule.filter.correlation_id == "cid" and full.rule.filter.subject == "lbl"
    assert full.rule.filter.message_id is None and full.rule.filter.content_type == "application/json"
    assert props["i"] == m.TypedValue(m.ValueType.INT, 7) and props["l"] == m.TypedValue(m.ValueType.LONG, 7)
    assert props["s"].type is m.ValueType.STRING and props["b"].value is True and props["d"].value == 1.5
    assert props["u"].value == uuid.UUID(int=1) and props["z"].type is m.ValueType.NULL
    assert props["t"].value == dt.datetime(1970, 1, 2, tzinfo=dt.timezone.utc)
    assert full.rule.action == m.EmptyAction()


def test_decode_three_element_form_sql_with_action_and_true_false():
    sql = described(0x0000013700000004, [described(0x000001370000006, ["a > 1", int32(20)]),
                                         described(0x0000013700000006, ["SET b = 2", int32(20)]), "s"])
    assert c.decode_rule_description(through_bytes(sql)) == m.Rule("s", m.SqlFilter("a > 1"), m.SqlRuleAction("SET b = 2"))
    true = described(0x0000013700000004, [described(0x000001370000007, []), described(0x0000013700000005, []), "$Default"])
    false = described(0x0000013700000004, [described(0x000001370000008, []), described(0x0000013700000005, []), "no"])
    assert c.decode_rule_description(through_bytes(true)) == m.Rule("$Default", m.TrueFilter())
    assert c.decode_rule_description(through_bytes(false)) == m.Rule("no", m.FalseFilter())


def test_sql_filter_code_is_not_the_sql_action_code():
    swapped = described(0x0000013700000004, [described(0x0000013700000006, ["a", int32(20)]),
                                             described(0x0000013700000005, []), "x"])
    with pytest.raises(c.CodecError, match=r"rule 'x'.*\[0\] \(filter\).*unknown filter descriptor 0x0000013700000006"):
        c.decode_rule_description(swapped)


def test_symbolic_descriptors_are_accepted():
    value = Described(symbol("com.microsoft:rule-description:list"),
                      [Described(symbol("com.microsoft:true-filter:list"), []),
                       Described(symbol("com.microsoft:empty-rule-action:list"), []), "r"])
    assert c.decode_rule_description(through_bytes(value)) == m.Rule("r", m.TrueFilter())


@pytest.mark.parametrize(
    "value, message",
    [
        ("text", r"rule: rule-description: expected a described list"),
        (described(0x99, []), r"unknown descriptor 0x0000000000000099"),
        (described(0x0000013700000004, [None, None]), r"2 elements, expected 3 or 4"),
        (described(0x0000013700000004, [None, None, 5]), r"\[2\] \(name\) must be a string"),
        (described(0x0000013700000004, [described(0x000001370000042, []), None, "n"]), r"rule 'n'.*\[0\] \(filter\).*0x0000001370000042"),
        (described(0x0000013700000004, [described(0x000001370000007, []), described(0x77, []), "n"]), r"rule 'n'.*\[1\] \(action\).*unknown action"),
        (described(0x0000013700000004, [described(0x000001370000009, [1]), None, "n"]), r"rule 'n'.*\[0\].*correlation-id"),
        (described(0x0000013700000004, [described(0x000001370000009, [None] * 8 + [[1]]), None, "n"]), r"properties\) must be a map"),
        (described(0x0000013700000004, [described(0x000001370000009, [None] * 8 + [{"p": {"k": 1}}]), None, "n"]), r"'p'.*map"),
        (described(0x0000013700000004, [described(0x000001370000009, [None] * 8 + [{"p": Described(symbol("x:y"), 1)}]), None, "n"]), r"'p'.*unknown descriptor"),
        (described(0x0000013700000004, [described(0x000001370000006, []), None, "n"]), r"no expression"),
        (described(0x0000013700000004, [described(0x000001370000007, []), None, "n", "soon"]), r"created-at"),
        (described(0x0000013700000004, [Described(ulong(0x000001370000007), "x"), None, "n"]), r"not a list"),
    ],
)
def test_decode_rule_description_errors_name_rule_and_position(value, message):
    with pytest.raises(c.CodecError, match=message) as info:
        c.decode_rule_description(value)
    assert isinstance(info.value, SbrulesError)


def test_enumerate_body_round_trip_and_errors():
    rules = [m.Rule("a", m.TrueFilter()), m.Rule("b", m.SqlFilter("x = 1"), m.SqlRuleAction("SET y = 2"))]
    body = through_bytes(c.encode_enumerate_rules_body([(r, None) for r in rules]))
    assert c.decode_enumerate_rules_body(body) == rules
    as_array = {"rules": proton.Array(proton.UNDESCRIBED, proton.Data.MAP, *body["rules"])}
    assert c.decode_enumerate_rules_body(through_bytes(as_array)) == rules
    with pytest.raises(c.CodecError, match="rule #101"):
        c.decode_enumerate_rules_body({"rules": [{"rule-description": 3}, {}]}, offset=101)
    with pytest.raises(c.CodecError, match="'rules' list"):
        c.decode_enumerate_rules_body({})


def test_value_section_appended_to_a_bodiless_message_decodes_as_its_body():
    rule = m.Rule("r", m.SqlFilter("a = 1"))
    body = c.encode_enumerate_rules_body([(rule, None)])
    head = proton.Message(correlation_id="c1", properties={"statusCode": int32(200)})
    decoded = proton.Message()
    decoded.decode(bytes(head.encode()) + sections.encode_value_section(body))
    assert decoded.correlation_id == "c1"
    assert c.decode_enumerate_rules_body(decoded.body) == [rule]
