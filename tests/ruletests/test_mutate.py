"""Mutation testing: each operator, and killed / survived / equivalent mutants."""

from __future__ import annotations

import pytest

from reconciler.model import (
    NO_ACTION,
    CorrelationFilter,
    DesiredState,
    FalseFilter,
    Message,
    Origin,
    Rule,
    SqlFilter,
    SqlRuleAction,
    Subscription,
    Topic,
    TypedValue,
)
from reconciler.ruletests.cases import Case, Expectation
from reconciler.ruletests.mutate import rule_mutants, run_mutants, score

pytestmark = pytest.mark.unit


def mutations(rule: Rule) -> dict[str, list[tuple[str, str]]]:
    """operator → [(description, the mutant's filter or action text)]"""
    found: dict[str, list[tuple[str, str]]] = {}
    for mutant in rule_mutants("t", "s", rule):
        new = mutant.replacement
        text = "" if new is None else (
            new.filter.expression if isinstance(new.filter, SqlFilter) else repr(new.filter)
        ) + (f" | {new.action.expression}" if new is not None and isinstance(new.action, SqlRuleAction) else "")
        found.setdefault(mutant.operator, []).append((mutant.description, text))
    return found


SQL = Rule("r", SqlFilter("amount > 1000 AND NOT currency IN ('USD') AND region IS NOT NULL"),
           SqlRuleAction("SET priority = 'high'; SET n = 2; REMOVE tmp"))


def test_comparison_operators_are_swapped():
    assert mutations(SQL)["comparison"] == [
        ("`amount > 1000` → `amount >= 1000`", "amount >= 1000 AND NOT currency IN ('USD') AND region IS NOT NULL | "
         "SET priority = 'high'; SET n = 2; REMOVE tmp"),
    ]
    equal = mutations(Rule("r", SqlFilter("a = 1 OR b <> 'x' OR c <= 2")))["comparison"]
    assert [d for d, _ in equal] == ["`a = 1` → `a <> 1`", "`b <> 'x'` → `b = 'x'`", "`c <= 2` → `c < 2`"]


def test_boundary_literals_move_by_one_or_a_tenth():
    assert [t.split(" AND")[0] for _, t in mutations(SQL)["boundary"]] == ["amount > 999", "amount > 1001"]
    assert [d for d, _ in mutations(Rule("r", SqlFilter("x < 0.5")))["boundary"]] == ["`x < 0.5` → `x < 0.4`", "`x < 0.5` → `x < 0.6`"]


def test_and_becomes_or_and_or_and():
    (mutant,) = mutations(Rule("r", SqlFilter("a = 1 AND b = 2")))["and-or"]
    assert mutant == ("AND → OR in `a = 1 AND b = 2`", "a = 1 OR b = 2")
    (mutant,) = mutations(Rule("r", SqlFilter("a = 1 OR b = 2")))["and-or"]
    assert mutant[1] == "a = 1 AND b = 2"


def test_not_is_dropped_in_each_spelling():
    texts = [t.split(" | ")[0] for _, t in mutations(SQL)["drop-not"]]
    assert texts == [
        "amount > 1000 AND currency IN ('USD') AND region IS NOT NULL",
        "amount > 1000 AND NOT currency IN ('USD') AND region IS NULL",
    ]
    (like,) = mutations(Rule("r", SqlFilter("x NOT LIKE 'a%'")))["drop-not"]
    assert like[1] == "x LIKE 'a%'"


def test_each_top_level_conjunct_is_dropped():
    texts = [t.split(" | ")[0] for _, t in mutations(SQL)["drop-conjunct"]]
    assert texts == [
        "NOT currency IN ('USD') AND region IS NOT NULL",
        "amount > 1000 AND region IS NOT NULL",
        "amount > 1000 AND NOT currency IN ('USD')",
    ]


def test_the_rule_is_removed():
    assert mutations(SQL)["remove-rule"] == [("rule removed", "")]


def test_action_statements_are_removed_or_changed():
    removed = [t.split(" | ")[1] for _, t in mutations(SQL)["remove-statement"]]
    assert removed == ["SET n = 2; REMOVE tmp", "SET priority = 'high'; REMOVE tmp", "SET priority = 'high'; SET n = 2"]
    changed = [d for d, _ in mutations(SQL)["change-statement"]]
    assert changed == ["`SET priority = 'high'` → `SET priority = 'high-mutant'`", "`SET n = 2` → `SET n = 3`"]
    only = Rule("r", SqlFilter("a = 1"), SqlRuleAction("SET b = TRUE"))
    assert [m.replacement.action for m in rule_mutants("t", "s", only) if m.operator == "remove-statement"] == [NO_ACTION]
    assert [d for d, _ in mutations(only)["change-statement"]] == ["`SET b = TRUE` → `SET b = FALSE`"]


def test_correlation_fields_are_removed_and_integers_retyped():
    rule = Rule("r", CorrelationFilter(subject="refund", properties=(("tier", TypedValue.from_typed_form({"int": 3})),)))
    found = mutations(rule)
    assert [d for d, _ in found["correlation-field"]] == ["subject removed", "properties.tier removed"]
    assert [d for d, _ in found["correlation-type"]] == ["properties.tier: int 3 → long 3"]
    single = mutations(Rule("r", CorrelationFilter(subject="refund")))
    assert "correlation-field" not in single and "correlation-type" not in single


def _state(*rules: Rule) -> DesiredState:
    return DesiredState((Topic("orders", (Subscription("billing", rules),)),))


def _case(name: str, message: dict, **expect: object) -> Case:
    return Case(name, "orders", Message.from_json(message), Expectation(**expect), Origin("t.test.yaml", 1, 1))  # type: ignore[arg-type]


def test_mutants_are_killed_survive_or_are_proven_equivalent():
    state = _state(
        Rule("big", SqlFilter("amount > 1000")),
        Rule("never", FalseFilter()),
        Rule("same", SqlFilter("a = 1 AND a = 1")),
    )
    cases = [
        _case("big", {"user": {"amount": 1500}}, includes=("billing",)),
        _case("small", {"user": {"amount": 10}}, excludes=("billing",)),
    ]
    ran = run_mutants(cases, state)
    results = {(r.mutant.rule, r.mutant.description): r.status for r in ran}
    assert results[("big", "rule removed")] == "killed"
    assert results[("big", "`amount > 1000` → `amount >= 1000`")] == "survived"
    assert results[("big", "`amount > 1000` → `amount > 1001`")] == "survived"
    assert results[("never", "rule removed")] == "equivalent"
    assert results[("same", "`a = 1` dropped")] == "equivalent"
    counted = [r.status for r in ran if r.status != "equivalent"]
    assert score(ran) == pytest.approx(100 * counted.count("killed") / len(counted))


@pytest.mark.parametrize(
    ("filter_text", "action", "removed", "status"),
    [
        # SET of a property to the value the filter already requires: no copy changes.
        ("tier = 3 AND amount > 10", "SET tier = 3; SET n = 2", "`SET tier = 3` removed", "equivalent"),
        ("sys.Label = 'refund'", "SET sys.Label = 'refund'; SET n = 2", "`SET sys.Label = 'refund'` removed", "equivalent"),
        ("express = TRUE", "SET express = TRUE; SET n = 2", "`SET express = TRUE` removed", "equivalent"),
        # ... but not once an earlier statement may have changed it, nor where the filter allows others,
        # nor a string in an application property (an AMQP symbol equals it; SET makes it a string).
        ("tier = 3", "SET tier = 4; SET tier = 3", "`SET tier = 3` removed", "survived"),
        ("tier = 3 OR amount > 10", "SET tier = 3; SET n = 2", "`SET tier = 3` removed", "survived"),
        ("priority = 'high'", "SET priority = 'high'; SET n = 2", "`SET priority = 'high'` removed", "survived"),
        # A statement a later REMOVE undoes, when it cannot fail.
        ("scratch IS NULL", "SET scratch = 'x'; SET n = 2; REMOVE scratch", "`SET scratch = 'x'` removed", "equivalent"),
        ("amount > 10", "REMOVE scratch; SET n = 2; REMOVE scratch", "`REMOVE scratch` removed", "equivalent"),
        # ... not where setting may fail (a value to convert), a statement between reads it, or a SET overwrites it.
        ("amount > 10", "SET scratch = 'x'; REMOVE scratch", "`SET scratch = 'x'` removed", "survived"),
        ("scratch IS NULL", "SET scratch = 'x'; SET n = scratch; REMOVE scratch", "`SET scratch = 'x'` removed", "survived"),
        ("scratch IS NULL", "SET scratch = 'x'; SET scratch = 5", "`SET scratch = 'x'` removed", "survived"),
    ],
)
def test_action_mutants_that_change_no_copy_are_proven_equivalent(filter_text, action, removed, status):
    state = _state(Rule("r", SqlFilter(filter_text), SqlRuleAction(action)))
    ran = [r.status for r in run_mutants([], state) if r.mutant.description == removed]
    assert ran[0] == status  # the first statement so written
