"""lint: the offline checks beyond the schema (names, limits, empty subscriptions, $Default, SQL)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler import limits
from reconciler.lint import lint
from reconciler.model import (
    CorrelationFilter,
    DesiredState,
    Rule,
    SqlFilter,
    SqlRuleAction,
    Subscription,
    Topic,
    TrueFilter,
)
from reconciler.rulefiles import load

pytestmark = pytest.mark.unit


def codes(state: DesiredState) -> list[tuple[str, str]]:
    return sorted((d.severity, d.code) for d in lint(state))


def state_of(*subs: Subscription, topic: str = "t") -> DesiredState:
    return DesiredState((Topic(topic, subs),))


def test_rule_names():
    bad = [
        Rule("x" * 51, TrueFilter()),
        Rule("a/b", TrueFilter()),
        Rule("q?#", TrueFilter()),
        Rule(" ", TrueFilter()),
        Rule("ok.name-1_2", TrueFilter()),
        Rule("$Default", TrueFilter()),
    ]
    found = [d for d in lint(state_of(Subscription("s", tuple(bad)))) if d.code == "rule-name"]
    assert len(found) == 4
    assert "51 characters" in found[0].message
    assert "contains # ?" in found[2].message


def test_text_length_limits():
    long_sql = "a = '" + "x" * 1100 + "'"
    sub = Subscription("s", (Rule("r", SqlFilter(long_sql)), Rule("$Default", TrueFilter(), SqlRuleAction("SET a = '" + "y" * 1020 + "'"))))
    assert codes(state_of(sub)) == [("error", "sql-length"), ("error", "sql-length")]


def test_empty_correlation_and_empty_subscription():
    sub = Subscription("s", (Rule("r", CorrelationFilter()), Rule("$Default", TrueFilter())))
    assert codes(state_of(sub)) == [("error", "empty-correlation")]
    assert codes(state_of(Subscription("e", ()))) == [("error", "empty-subscription")]
    assert codes(state_of(Subscription("e", (), allow_empty=True))) == []


def test_default_left_out_and_unmanaged_are_notes():
    assert codes(state_of(Subscription("s", (Rule("r", TrueFilter()),)))) == [("info", "default-removed")]
    assert codes(state_of(Subscription("s"))) == [("info", "unmanaged")]


def test_per_topic_filter_limits(monkeypatch):
    monkeypatch.setattr(limits, "SQL_FILTERS_PER_TOPIC", replace(limits.SQL_FILTERS_PER_TOPIC, value=3))
    monkeypatch.setattr(limits, "CORRELATION_FILTERS_PER_TOPIC", replace(limits.CORRELATION_FILTERS_PER_TOPIC, value=2))
    rules = tuple(Rule(f"s{i}", SqlFilter("a = 1")) for i in range(2))
    corr = tuple(Rule(f"c{i}", CorrelationFilter(subject="x")) for i in range(3))
    subs = (
        Subscription("a", rules + (Rule("$Default", TrueFilter()),)),
        Subscription("b", rules + corr + (Rule("$Default", TrueFilter()),)),
    )
    found = [d.message for d in lint(state_of(*subs)) if d.code == "topic-limit"]
    assert found == [
        "topic t has 6 SQL filters; Service Bus allows 3",
        "topic t has 3 correlation filters; Service Bus allows 2",
    ]


def test_plain_integer_correlation_property_warns_where_written(write):
    path = write(
        "r.yaml",
        """
        topic: t
        subscriptions:
          s:
            rules:
              - name: r
                correlation:
                  properties: {a: 3, b: {int: 3}, c: {long: 3}, d: true}
              - {name: $Default, filter: true}
        """,
    )
    result = load([path])
    warnings = [d for d in result.diagnostics if d.code == "ambiguous-integer"]
    assert [(d.origin.line, d.origin.column) for d in warnings] == [(7, 27)]
    assert "{int: 3} or {long: 3}" in warnings[0].message


def test_typed_correlation_value_notes_the_producer_types_it_does_not_match(write):
    path = write(
        "r.yaml",
        """
        topic: t
        subscriptions:
          s:
            rules:
              - name: r
                correlation:
                  properties: {a: 3, b: {int: 3}, c: {char: A}, d: {ulong: 18446744073709551615}, e: {double: 0.1}}
              - {name: $Default, filter: true}
        """,
    )
    notes = {d.message.split("property ")[1][:3]: d for d in load([path]).diagnostics if d.code == "typed-correlation"}
    assert set(notes) == {"'b'", "'c'", "'d'", "'e'"}  # the plain integer keeps its warning instead
    assert notes["'b'"].severity == "info" and (notes["'b'"].origin.line, notes["'b'"].origin.column) == (7, 33)
    assert "matches only int 3" in notes["'b'"].message
    assert "short 3, ushort 3, uint 3, long 3" in notes["'b'"].message
    assert "is string 'A' does not match" in notes["'c'"].message
    assert "is decimal 18446744073709551615 does not match" in notes["'d'"].message  # no signed type holds it
    assert "float 0.1, decimal 0.1 does not" in notes["'e'"].message


def test_sql_errors_carry_a_caret_position_in_the_file(write):
    path = write(
        "q.yaml",
        """
        topic: t
        subscriptions:
          s:
            rules:
              - name: bad
                sql: "color = 'blue' AND AND size > 3"
              - name: block
                sql: |
                  color = 'blue'
                  AND size >< 3
              - name: act
                filter: true
                action: "SET a = "
        """,
    )
    result = load([path])
    found = [d for d in lint(result.state) if d.code == "sql-syntax"]
    assert len(found) == 3
    first, block, action = found
    assert first.sql.text == "color = 'blue' AND AND size > 3"
    assert (first.sql.line, first.sql.column) == (1, 20)
    assert (first.origin.line, first.origin.column) == (6, 15 + 19)
    assert (block.sql.line, block.origin.line) == (2, 10)
    assert block.origin.column == 11 + block.sql.column - 1
    assert "invalid SQL action" in action.message


def test_topic_and_subscription_names_are_checked_against_the_service_rules(write):
    path = write(
        "names.yaml",
        """
        topic: "orders?eu"
        subscriptions:
          "team/billing": {rules: [{name: a, filter: true}]}
          "#hash": {rules: [{name: b, filter: true}]}
          sssssssssssssssssssssssssssssssssssssssssssssssssss: {rules: [{name: c, filter: true}]}
          fine: {rules: [{name: x.sbrules-tmp, filter: true}, {name: Y.SBRULES-TMP, filter: true}]}
        """,
    )
    result = load([path])
    found = sorted((d.origin.line, d.code, d.message) for d in lint(result.state) if d.severity == "error")
    assert [(line, code) for line, code, _ in found] == [
        (1, "topic-name"), (3, "subscription-name"), (4, "subscription-name"), (5, "subscription-name"),
        (6, "rule-name"), (6, "rule-name"),
    ]
    messages = [message for _, _, message in found]
    assert "contains ?" in messages[0] and "contains /" in messages[1] and "contains #" in messages[2]
    assert "51 characters" in messages[3] and "limit is 50" in messages[3]
    assert all(".sbrules-tmp" in m and "reserves" in m for m in messages[4:])
