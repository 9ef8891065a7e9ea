"""Rule actions (conversions, sys properties) and routing (copies, RuleName, errors)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.model import (
    CorrelationFilter,
    FalseFilter,
    Message,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.sql import SqlError, SqlEvalError, matches, route_rules, run_action

pytestmark = pytest.mark.unit


def message(user: dict[str, Any] | None = None, sys: dict[str, Any] | None = None) -> Message:
    return Message.from_json({"sys": sys or {}, "user": user or {}})


def act(text: str, user: dict[str, Any] | None = None, sys: dict[str, Any] | None = None) -> Message:
    return run_action(SqlRuleAction(text), message(user, sys))


@pytest.mark.parametrize(
    ("text", "before", "after"),
    [
        ("SET q = q / 2", {"q": {"int": 10}}, {"q": {"int": 5}}),
        ("SET q = 2.5", {"q": 1}, {"q": 2}),  # half to even
        ("SET q = 3.5", {"q": 1}, {"q": 4}),
        ("SET q = '12'", {"q": {"int": 1}}, {"q": {"int": 12}}),
        ("SET q = 7", {"q": 1.5}, {"q": 7.0}),
        ("SET q = ' 1.5e1 '", {"q": 1.5}, {"q": 15.0}),
        ("SET q = 5", {"q": "x"}, {"q": "5"}),
        ("SET q = 1.0", {"q": "x"}, {"q": "1"}),
        ("SET q = 'true'", {"q": False}, {"q": True}),
        ("SET q = 1", {"q": None}, {"q": 1}),  # existing null: no conversion
        ("SET q = missing", {"q": "x"}, {"q": None}),  # UNKNOWN is null, and a string can hold null
        ("SET q = missing", {}, {"q": None}),
        ("SET q = 1", {"q": {"short": 7}}, {"q": {"short": 1}}),  # the existing type wins
        ("SET q = 65", {"q": {"char": "x"}}, {"q": {"char": "A"}}),
        ("SET q = '0.10'", {"q": {"decimal": "1"}}, {"q": {"decimal": "0.10"}}),
        ("SET q = 1.0 / 3", {"q": {"decimal": "1"}}, {"q": {"decimal": "0.333333333333333"}}),  # 15 digits
        ("SET q = 0.3", {"q": {"float": 1}}, {"q": {"float": 0.3}}),
        ("SET q = '1.02:03:04.5'", {"q": {"timespan": "PT1S"}}, {"q": {"timespan": "P1DT2H3M4.5S"}}),
        ("SET q = '2024-01-02T05:04:05+02:00'", {"q": {"datetimeoffset": "2000-01-01T00:00:00Z"}},
         {"q": {"datetimeoffset": "2024-01-02T03:04:05Z"}}),
        ("SET q = 'https://example.com/x'", {"q": {"uri": "https://a/"}}, {"q": {"uri": "https://example.com/x"}}),
        ("SET q = 'v'", {"q": {"symbol": "s"}}, {"q": "v"}),  # a symbol is a .NET string on the broker
        ("SET q = 3", {"q": {"ulong": 9}}, {"q": {"ulong": 3}}),
        ("SET Q = 'x'", {"q": "a"}, {"q": "x"}),  # case-insensitive name keeps the existing key
        ("SET b = 'x'", {}, {"b": "x"}),
        ("REMOVE Q", {"q": 1, "r": 2}, {"r": 2}),
        ("SET a = 1; REMOVE a; SET c = a", {}, {"c": None}),
    ],
)
def test_set_and_remove_user_properties(text: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    result = act(text, before)
    assert dict(result.user) == {k: TypedValue.from_typed_form(v) for k, v in after.items()}


@pytest.mark.parametrize(
    ("text", "before"),
    [
        ("SET q = 'abc'", {"q": 1}),
        ("SET q = missing", {"q": 1}),  # null into a value type: Convert.ChangeType throws
        ("SET q = NULL", {"q": {"timespan": "PT1S"}}),
        ("SET q = -1", {"q": {"ulong": 1}}),
        ("SET q = 1.5", {"q": {"char": "x"}}),  # double → char is an InvalidCastException
        ("SET q = 'PT5M'", {"q": {"timespan": "PT1S"}}),  # TimeSpan.Parse does not read ISO 8601
        ("SET q = 1", {"q": {"timespan": "PT1S"}}),
        ("SET q = 'relative/path'", {"q": {"uri": "https://a/"}}),
        ("SET q = 1e30", {"q": {"decimal": "1"}}),
        ("SET q = 1", {"q": {"binary": "AAE="}}),
        ("SET q = 1e30", {"q": 1}),
        ("SET q = 3000000000", {"q": {"int": 1}}),
        ("SET q = 'maybe'", {"q": True}),
        ("SET q = 1 / 0", {}),
        ("SET sys.TimeToLive = 5", {}),
        ("REMOVE sys.Label", {}),
    ],
)
def test_action_errors(text: str, before: dict[str, Any]) -> None:
    with pytest.raises(SqlEvalError):
        act(text, before)


def test_system_properties_are_converted_to_their_type() -> None:
    result = act("SET sys.MessageId = 42; SET sys.TimeToLive = '00:10:00'; SET sys.Label = NULL", sys={"Label": "x"})
    assert result.sys["MessageId"] == TypedValue(ValueType.STRING, "42")
    assert result.sys["TimeToLive"] == TypedValue(ValueType.DOUBLE, 600.0)
    assert "Label" not in result.sys
    assert act("SET sys.TimeToLive = '1.02:03:04.5'").sys["TimeToLive"].value == 93784.5


def test_statements_see_earlier_statements_and_the_original_is_untouched() -> None:
    original = message({"a": 1})
    result = run_action(SqlRuleAction("SET a = a + 1; SET b = a * 10; SET sys.Label = 'L' + b"), original)
    assert result.user["a"].value == 2 and result.user["b"].value == 20
    assert result.sys["Label"].value == "L20"
    assert original.user["a"].value == 1 and "Label" not in original.sys


def test_action_text_errors_are_sql_errors() -> None:
    with pytest.raises(SqlError):
        act("SET sys.Size = 1")


def test_matches_all_filter_kinds() -> None:
    msg = message({"color": "red", "n": 2}, {"Label": "L", "CorrelationId": "c1"})
    assert matches(Rule("a", TrueFilter()), msg).matched
    assert not matches(Rule("b", FalseFilter()), msg).matched
    assert matches(Rule("c", SqlFilter("color = 'red' AND sys.Label = 'L'")), msg).matched
    assert matches(Rule("d", CorrelationFilter(correlation_id="c1", subject="L", properties={"N": 2})), msg).matched
    assert not matches(Rule("e", CorrelationFilter(correlation_id="C1")), msg).matched
    assert not matches(Rule("f", CorrelationFilter(properties={"n": {"int": 2}})), msg).matched
    assert not matches(Rule("g", CorrelationFilter(properties={"n": "2"})), msg).matched
    assert not matches(Rule("h", CorrelationFilter(reply_to="x")), msg).matched
    assert not matches(Rule("i", CorrelationFilter()), msg).matched
    invalid = matches(Rule("j", SqlFilter("color =")), msg)
    assert invalid.error and "invalid filter" in invalid.error


def test_route_one_copy_for_actionless_rules_and_one_per_action_rule() -> None:
    rules = [
        Rule("$Default", TrueFilter()),
        Rule("red", SqlFilter("color = 'red'")),
        Rule("tag", SqlFilter("color = 'red'"), SqlRuleAction("SET tagged = TRUE")),
        Rule("blue", SqlFilter("color = 'blue'"), SqlRuleAction("SET x = 1")),
    ]
    result = route_rules(rules, message({"color": "red"}))
    assert result.delivered
    assert [name for name, _ in result.copies] == [None, "tag"]
    plain, tagged = result.copies[0][1], result.copies[1][1]
    assert "RuleName" not in plain.user
    assert tagged.user["RuleName"] == TypedValue(ValueType.STRING, "tag")
    assert tagged.user["tagged"] == TypedValue(ValueType.BOOL, True)
    assert [(n, o.label) for n, o in result.rule_results] == [
        ("$Default", "true"),
        ("red", "true"),
        ("tag", "true"),
        ("blue", "false"),
    ]


def test_route_records_errors_and_does_not_deliver() -> None:
    rules = [
        Rule("bad", SqlFilter("quantity > 10")),
        Rule("action-fails", SqlFilter("1=1"), SqlRuleAction("SET q = 1 / 0")),
        Rule("unknown", SqlFilter("missing = 1")),
    ]
    result = route_rules(rules, message({"quantity": "11"}))
    assert not result.delivered and result.copies == []
    labels = {name: outcome.label for name, outcome in result.rule_results}
    assert labels == {"bad": "error", "action-fails": "error", "unknown": "unknown"}
    assert "action failed" in dict(result.rule_results)["action-fails"].error
