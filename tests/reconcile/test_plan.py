"""The diff as pure data: each plan category, normal forms, the JSON document and its schema, renderers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource

from reconciler.model import (
    CorrelationFilter,
    EmptyAction,
    FalseFilter,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.plan import (
    Plan,
    PlanError,
    compute_plan,
    fingerprint,
    is_temp_rule_name,
    plan_subscription,
    render_drift_json,
    render_drift_text,
    render_json,
    render_markdown,
    render_text,
    temp_rule_name,
)

pytestmark = pytest.mark.unit

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def plan_validator() -> jsonschema.protocols.Validator:
    docs = [json.loads((SCHEMAS / name).read_text()) for name in ("plan.schema.json", "rules.schema.json")]
    registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs)
    return jsonschema.Draft202012Validator(docs[0], registry=registry)


def one(declared, live, **kw):
    return plan_subscription("orders", "billing", declared, live, **kw)


def reasons_of(sp, rule):
    return next(c for c in sp.changes if c.rule == rule).reasons


SQL_A = Rule("a", SqlFilter("amount > 1000 AND currency = 'EUR'"))


def test_create_delete_unchanged_and_default_removal():
    keep = Rule("keep", SqlFilter("x = 1"))
    sp = one([keep, SQL_A], [Rule("$Default", TrueFilter()), keep, Rule("extra", FalseFilter())])
    assert [(c.kind, c.rule) for c in sp.changes] == [("create", "a"), ("delete", "$Default"), ("delete", "extra")]
    assert sp.unchanged == 1 and sp.rules_after == 2
    assert "$Default" in reasons_of(sp, "$Default")[0]
    assert "not declared" in reasons_of(sp, "extra")[0]


@pytest.mark.parametrize(
    "live_sql",
    [
        "amount>1000 and currency='EUR'",
        "  amount > 1000\n   and   currency = 'EUR' ",
        "((amount > 1000) AND (currency = 'EUR'))",
    ],
)
def test_cosmetic_sql_differences_are_not_changes(live_sql):
    sp = one([SQL_A], [Rule("a", SqlFilter(live_sql))])
    assert sp.changes == () and sp.unchanged == 1
    assert fingerprint([Rule("a", SqlFilter(live_sql))]) == fingerprint([SQL_A])


def test_filter_property_name_case_is_not_a_change():
    live = Rule("a", SqlFilter("AMOUNT > 1000 AND [Currency] = 'EUR'"))
    sp = one([SQL_A], [live])
    assert sp.changes == () and sp.unchanged == 1


def test_action_property_name_case_is_a_change():
    declared = Rule("a", TrueFilter(), SqlRuleAction("SET carrier = 'dhl'"))
    live = Rule("a", TrueFilter(), SqlRuleAction("SET Carrier = 'dhl'"))
    (change,) = one([declared], [live]).changes
    assert change.reasons == ("action changed (canonical form)",)


def test_string_literal_case_is_a_change():
    sp = one([SQL_A], [Rule("a", SqlFilter("amount > 1000 AND currency = 'eur'"))])
    (change,) = sp.changes
    assert change.kind == "replace" and change.reasons == ("SQL filter changed (canonical form)",)
    assert any(line.startswith("-") and "'eur'" in line for line in change.diff)
    assert any(line.startswith("+") and "'EUR'" in line for line in change.diff)


def test_true_false_filters_equal_their_sql_spelling():
    sp = one(
        [Rule("t", TrueFilter()), Rule("f", FalseFilter())],
        [Rule("t", SqlFilter("1=1")), Rule("f", SqlFilter("1 = 0"))],
    )
    assert sp.changes == () and sp.unchanged == 2


def test_filter_kind_change():
    sp = one([Rule("a", CorrelationFilter(subject="x"))], [SQL_A])
    assert reasons_of(sp, "a") == ("filter kind: SQL → correlation",)


def test_correlation_property_type_int_vs_long_is_reported():
    declared = Rule("r", CorrelationFilter(subject="refund", properties={"tier": {"int": 3}}))
    live = Rule("r", CorrelationFilter(subject="refund", properties={"tier": 3}))
    sp = one([declared], [live])
    assert reasons_of(sp, "r") == ("correlation property 'tier': long 3 → int 3",)


def test_correlation_fields_and_properties_added_removed():
    declared = Rule("r", CorrelationFilter(subject="b", to="q", properties={"new": "x"}))
    live = Rule("r", CorrelationFilter(subject="a", to="q", properties={"old": True}))
    assert reasons_of(one([declared], [live]), "r") == (
        "correlation subject: 'a' → 'b'",
        "correlation property 'new' added: string 'x'",
        "correlation property 'old' removed (was bool true)",
    )


@pytest.mark.parametrize(
    "live_action,declared_action,reason",
    [
        (EmptyAction(), SqlRuleAction("SET a = 1"), "action added"),
        (SqlRuleAction("SET a = 1"), EmptyAction(), "action removed"),
        (SqlRuleAction("SET a = 1"), SqlRuleAction("SET a = 2"), "action changed (canonical form)"),
    ],
)
def test_action_changes(live_action, declared_action, reason):
    sp = one([Rule("a", SQL_A.filter, declared_action)], [Rule("a", SQL_A.filter, live_action)])
    assert reasons_of(sp, "a") == (reason,)
    assert sp.changes[0].diff


def test_cosmetic_action_difference_is_not_a_change():
    declared = Rule("a", SQL_A.filter, SqlRuleAction("SET a = 1"))
    sp = one([declared], [Rule("a", SQL_A.filter, SqlRuleAction("set  a=1"))])
    assert sp.changes == ()


def test_rule_names_match_case_insensitively():
    sp = one([Rule("Billing", TrueFilter())], [Rule("billing", TrueFilter())])
    assert reasons_of(sp, "Billing") == ("name case: 'billing' → 'Billing'",)


def test_declared_sql_that_does_not_parse_fails_the_plan():
    with pytest.raises(PlanError, match="orders/billing rule 'bad'"):
        one([Rule("bad", SqlFilter("amount >"))], [])


def test_unparseable_live_sql_is_compared_as_text():
    sp = one([SQL_A], [Rule("a", SqlFilter("amount >>> 1"))])
    assert sp.changes[0].kind == "replace"


def test_empty_rule_set_needs_allow_empty():
    with pytest.raises(PlanError, match="allow_empty"):
        one([], [SQL_A])
    sp = one([], [SQL_A], allow_empty=True)
    assert [(c.kind, c.rule) for c in sp.changes] == [("delete", "a")] and sp.rules_after == 0


def test_reserved_temporary_suffix():
    name = "x" * 50
    assert len(temp_rule_name(name)) <= 50 and is_temp_rule_name(temp_rule_name(name))
    assert temp_rule_name("a") == "a.sbrules-tmp"
    assert temp_rule_name(name) != temp_rule_name("x" * 49 + "y")
    with pytest.raises(PlanError, match="reserves"):
        one([Rule("a.sbrules-tmp", TrueFilter())], [])


def test_fingerprint_ignores_order_and_sees_types():
    a, b = SQL_A, Rule("b", CorrelationFilter(properties={"n": 3}))
    assert fingerprint([a, b]) == fingerprint([b, a])
    b_int = Rule("b", CorrelationFilter(properties={"n": TypedValue(ValueType.INT, 3)}))
    assert fingerprint([a, b]) != fingerprint([a, b_int])
    assert fingerprint([]).startswith("sha256:")


def _sample_plan(kit) -> Plan:
    desired = kit.desired_of(
        {
            ("orders", "billing"): [
                Rule("a", SqlFilter("amount > 1000"), SqlRuleAction("SET sys.Label = 'big'")),
                Rule("r", CorrelationFilter(subject="refund", properties={"tier": {"int": 3}})),
            ],
            ("orders", "legacy"): None,
        }
    )
    actual = {
        ("orders", "billing"): [
            Rule("$Default", TrueFilter()),
            Rule("a", SqlFilter("amount > 100"), SqlRuleAction("SET sys.Label = 'big'")),
        ]
    }
    return compute_plan(desired, actual)


def test_plan_document_is_valid_and_round_trips(kit):
    plan = _sample_plan(kit)
    doc = json.loads(render_json(plan))
    plan_validator().validate(doc)
    assert doc["format_version"] == 2
    assert doc["summary"] == {"create": 1, "replace": 1, "delete": 1, "unchanged": 0}
    assert doc["skipped"] == [{"topic": "orders", "subscription": "legacy", "reason": doc["skipped"][0]["reason"]}]
    change = next(c for c in doc["changes"] if c["change"] == "create")
    assert change["after"] == {"name": "r", "correlation": {"subject": "refund", "properties": {"tier": {"int": 3}}}}
    assert change["before"] is None
    again = Plan.from_json(doc)
    assert again == plan
    assert plan.warnings and "action" in plan.warnings[0]


def test_a_saved_plan_keeps_the_live_rules_it_read_of_undeclared_subscriptions(kit):
    """``impact PLAN.json`` counts what an undeclared subscription receives as ``plan --traffic`` did."""
    known = (Rule("$Default", TrueFilter()), Rule("big", SqlFilter("amount > 100")))
    plan = dataclasses.replace(
        _sample_plan(kit), undeclared=(("orders", "$audit"), ("orders", "other")), bystanders={("orders", "$audit"): known}
    )
    doc = json.loads(render_json(plan))
    plan_validator().validate(doc)
    assert doc["undeclared"][1] == {"topic": "orders", "subscription": "other"}  # not read: unknown
    again = Plan.from_json(doc)
    assert again.bystanders == {("orders", "$audit"): known}
    assert again.undeclared == plan.undeclared


def test_version_1_plan_files_are_still_read(kit):
    """``data/plan-v1.json`` was written by the version 1 writer for the sample plan (change kind as ``action``)."""
    doc = json.loads((Path(__file__).parent / "data" / "plan-v1.json").read_text())
    assert doc["format_version"] == 1 and all("action" in c and "change" not in c for c in doc["changes"])
    read = Plan.from_json(doc)
    assert read.warnings == tuple(doc["warnings"])  # a saved plan's warnings are shown as they were written
    assert dataclasses.replace(read, warnings=()) == dataclasses.replace(_sample_plan(kit), warnings=())
    doc["changes"][0]["action"] = "upsert"
    with pytest.raises(PlanError, match="malformed plan file"):
        Plan.from_json(doc)


def test_schema_rejects_a_broken_plan(kit):
    doc = json.loads(render_json(_sample_plan(kit)))
    doc["changes"][0]["change"] = "upsert"
    assert list(plan_validator().iter_errors(doc))
    with pytest.raises(PlanError, match="format_version"):
        Plan.from_json({"format_version": 99})
    with pytest.raises(PlanError, match="malformed plan file"):
        Plan.from_json(doc)
    wrong_type = {**json.loads(render_json(_sample_plan(kit))), "changes": 5}
    with pytest.raises(PlanError, match=r"malformed plan file: changes: 5 is not of type 'array'$"):
        Plan.from_json(wrong_type)  # the field named, not the Python exception it caused
    doc = json.loads(render_json(_sample_plan(kit)))
    doc["subscriptions"] = []
    with pytest.raises(PlanError, match="does not list"):
        Plan.from_json(doc)


def test_renderers(kit):
    plan = _sample_plan(kit)
    text = render_text(plan)
    assert "+ create rule 'r'" in text and "~ replace rule 'a'" in text and "- delete rule '$Default'" in text
    diff = [line.strip() for line in text.splitlines()]
    assert any(line.startswith("-") and "100" in line and "1000" not in line for line in diff)
    assert any(line.startswith("+") and "1000" in line for line in diff)
    assert "Plan: 1 to create, 1 to replace, 1 to delete, 0 unchanged." in text
    assert "skipped orders/legacy" in text
    md = render_markdown(plan)
    assert md.startswith("### sbrules plan") and "```diff" in md and "| 1 | 1 | 1 | 0 |" in md
    drift = render_drift_text(plan)
    assert "added out of band" in drift and "removed" in drift and "modified" in drift
    djson = json.loads(render_drift_json(plan))
    assert djson["in_sync"] is False and djson["changes"] == json.loads(render_json(plan))["changes"]


def test_no_changes_text(kit):
    desired = kit.desired_of({("orders", "billing"): [SQL_A]})
    plan = compute_plan(desired, {("orders", "billing"): [SQL_A]})
    assert not plan.has_changes
    assert render_text(plan).startswith("No changes.")
    assert "In sync" in render_drift_text(plan)


def test_replacing_many_rules_with_actions_is_one_warning_with_a_count(kit):
    declared = [Rule(f"r{i}", SqlFilter(f"n = {i}"), SqlRuleAction("SET sys.Label = 'x'")) for i in range(1800)]
    live = [Rule(f"r{i}", SqlFilter(f"n = {i + 1}"), SqlRuleAction("SET sys.Label = 'x'")) for i in range(1800)]
    desired = kit.desired_of({("t", "s"): declared})
    plan = compute_plan(desired, {("t", "s"): live})
    [warning] = plan.warnings
    assert "1,800 rules" in warning and "1,797 more" in warning and "t/s: rule 'r0'" in warning
    one = compute_plan(desired, {("t", "s"): [*live[:1], *declared[1:]]})
    [warning] = one.warnings
    assert warning.startswith("t/s: rule 'r0' has an action")


@pytest.mark.unit
def test_one_reader_of_plan_files_words_each_problem_with_the_file(tmp_path):
    from reconciler.plan import read_plan_file

    cases = {
        "missing.json": (None, "missing.json: no such plan file"),
        "text.json": ("nope", "text.json: not a JSON plan file"),
        "future.json": ('{"format_version": 99}', "future.json: plan format_version 99 is not supported"),
        "other.json": ('{"a": 1}', "other.json: not an sbrules plan file"),
    }
    for name, (content, message) in cases.items():
        if content is not None:
            (tmp_path / name).write_text(content)
        with pytest.raises(PlanError) as info:
            read_plan_file(tmp_path / name)
        assert str(info.value).startswith(str(tmp_path / message)), str(info.value)
