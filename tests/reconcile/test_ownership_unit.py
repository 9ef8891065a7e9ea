"""Rule-level ownership (``owns:``) in process: the rule files, the plan's set algebra and apply's
safety rules counting only the rules sbrules owns."""

from __future__ import annotations

import datetime as _dt
import json
import textwrap
from dataclasses import replace

import pytest

from reconciler.apply import ApplyOptions, ReplaceStrategy, apply_plan
from reconciler.model import DesiredState, Rule, SqlFilter, Subscription, Topic
from reconciler.names import matches, owned
from reconciler.owners import Owners
from reconciler.plan import Plan, PlanError, compute_plan, plan_subscription, render_drift_json, render_drift_text, render_text
from reconciler.plan.ops import Foreign
from reconciler.plan.ops import Plan as PlanOps
from reconciler.rulefiles.loader import load
from reconciler.rulefiles.render import topic_document

pytestmark = pytest.mark.unit

T = "orders"


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# -- patterns ------------------------------------------------------------------------------------


def test_patterns_match_names_as_the_service_compares_them():
    assert matches("Team-A-Orders", "team-a-*")
    assert matches("audit", "AUDIT")
    assert not matches("team-b-x", "team-a-*")
    assert matches("r1", "r?") and not matches("r10", "r?")
    assert owned("anything", None)  # no owns: the complete set
    assert not owned("$Default", ["team-*"])
    assert owned("$Default", ["team-*", "$Default"])


# -- rule files ----------------------------------------------------------------------------------


def test_owns_is_read_from_the_subscription_and_inherited_from_the_topic_file(tmp_path):
    _write(tmp_path, "orders.yaml", """\
        topic: orders
        owns: ["team-a-*"]
        subscriptions:
          inherits:
            rules:
              - {name: team-a-1, filter: true}
          own:
            owns: ["audit"]
            rules:
              - {name: audit, filter: true}
          unmanaged:
        """)
    result = load([tmp_path])
    assert result.ok, result.diagnostics
    topic = result.state.topics[0]
    assert topic.subscription("inherits").owns == ("team-a-*",)
    assert topic.subscription("own").owns == ("audit",)
    assert topic.subscription("unmanaged").owns is None


def test_the_project_owns_applies_unless_a_file_overrides_it(tmp_path):
    _write(tmp_path, "orders.yaml", """\
        topic: orders
        subscriptions:
          s:
            rules:
              - {name: team-a-1, filter: true}
        """)
    result = load([tmp_path], owns=("team-*",))
    assert result.ok and result.state.topics[0].subscription("s").owns == ("team-*",)


def test_a_declared_rule_outside_its_owns_is_a_located_error(tmp_path):
    _write(tmp_path, "orders.yaml", """\
        topic: orders
        subscriptions:
          s:
            owns: ["team-a-*"]
            rules:
              - {name: team-a-1, filter: true}
              - {name: nsb-OrderPlaced, filter: true}
        """)
    result = load([tmp_path])
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert [d.code for d in errors] == ["not-owned"]
    assert "nsb-OrderPlaced" in errors[0].message and "'team-a-*'" in errors[0].message
    assert (errors[0].origin.line, errors[0].origin.column) == (7, 9)


def test_owns_without_rules_is_an_error(tmp_path):
    _write(tmp_path, "orders.yaml", "topic: orders\nsubscriptions:\n  s:\n    owns: [a]\n")
    result = load([tmp_path])
    assert [d.code for d in result.diagnostics if d.severity == "error"] == ["not-owned"]


def test_owns_must_list_patterns(tmp_path):
    _write(tmp_path, "orders.yaml", "topic: orders\nsubscriptions:\n  s:\n    owns: []\n    rules: [{name: a, filter: true}]\n")
    assert not load([tmp_path]).ok


def test_topic_document_keeps_owns_and_loads_back(tmp_path):
    _write(tmp_path, "orders.yaml", """\
        topic: orders
        subscriptions:
          s:
            owns: ["team-a-*", "$Default"]
            rules:
              - {name: team-a-1, sql: "x = 1"}
        """)
    state = load([tmp_path]).state
    doc = topic_document(state.topics[0])
    assert doc["subscriptions"]["s"]["owns"] == ["team-a-*", "$Default"]
    again = tmp_path / "again"
    again.mkdir()
    (again / "orders.yaml").write_text(json.dumps(doc))
    assert load([again]).state == state


# -- plan ----------------------------------------------------------------------------------------


def test_foreign_rules_are_never_changed_and_listed_with_their_filter(kit):
    mine, stale = kit.corr("team-a-1", "A"), kit.corr("team-a-old", "OLD")
    nsb, default = kit.corr("nsb-OrderPlaced", "OrderPlaced"), kit.DEFAULT
    sp = plan_subscription(T, "s", [mine], [stale, nsb, default], owns=("team-a-*",))
    assert [(c.kind, c.rule) for c in sp.changes] == [("create", "team-a-1"), ("delete", "team-a-old")]
    assert {f.rule.name for f in sp.foreign} == {"nsb-OrderPlaced", "$Default"}
    assert sp.rules_after == 1


def test_default_is_owned_only_when_a_pattern_matches_it(kit):
    sp = plan_subscription(T, "s", [kit.corr("a", "A")], [kit.DEFAULT], owns=("a", "$default"))
    assert [(c.kind, c.rule) for c in sp.changes] == [("create", "a"), ("delete", "$Default")]
    assert sp.foreign == ()


def test_foreign_rules_do_not_count_as_declared_rules(kit):
    with pytest.raises(PlanError, match="declares no rules"):
        plan_subscription(T, "s", [], [kit.corr("nsb-x", "X")], owns=("team-*",))


def test_the_fingerprint_covers_only_owned_rules(kit):
    mine = kit.corr("team-a-1", "A")
    alone = plan_subscription(T, "s", [mine], [mine], owns=("team-*",))
    beside = plan_subscription(T, "s", [mine], [mine, kit.corr("nsb-x", "X")], owns=("team-*",))
    assert alone.fingerprint == beside.fingerprint == beside.target_fingerprint


def _owned_desired(rules, owns=("team-*",)):
    return DesiredState((Topic(T, (Subscription("s", tuple(rules), owns=owns),)),))


def test_foreign_rules_are_neither_drift_nor_strict_drift_and_are_shown(kit):
    mine, nsb = kit.corr("team-a-1", "A"), kit.corr("nsb-x", "X")
    plan = compute_plan(_owned_desired([mine]), {(T, "s"): [mine, nsb]})
    assert not plan.has_changes and not plan.drifted(strict=True)
    assert "foreign rule 'nsb-x'" in render_text(plan) and '"subject": "X"' in render_text(plan)
    assert "foreign orders/s rule 'nsb-x'" in render_drift_text(plan, strict=True)
    doc = json.loads(render_drift_json(plan, strict=True))
    assert doc["in_sync"] and doc["drift"] == []
    assert doc["foreign"] == [{"topic": T, "subscription": "s", "rule": {"name": "nsb-x", "correlation": {"subject": "X"}}}]


def test_a_saved_plan_keeps_owns_and_foreign_rules(kit):
    mine, nsb = kit.corr("team-a-1", "A"), kit.corr("nsb-x", "X")
    plan = compute_plan(_owned_desired([mine]), {(T, "s"): [nsb]})
    again = PlanOps.from_json(json.loads(json.dumps(plan.to_json())))
    assert again.subscriptions[0].owns == ("team-*",) and again.subscriptions[0].foreign == (Foreign(nsb),)


# -- apply ---------------------------------------------------------------------------------------


def _plan(client, desired) -> Plan:
    return compute_plan(desired, {key: client.list_rules(*key) for key in client.subs})


def test_apply_leaves_foreign_rules_alone(kit):
    nsb, default = kit.corr("nsb-x", "X"), kit.DEFAULT
    client = kit.FakeClient({(T, "s"): [nsb, default, kit.corr("team-old", "O")]})
    desired = _owned_desired([kit.corr("team-a-1", "A")])
    report = apply_plan(client, _plan(client, desired))
    assert report.ok
    assert set(client.rules(T, "s")) == {"nsb-x", "$Default", "team-a-1"}
    assert all(name not in ("nsb-x", "$Default") for _, _, _, name in client.rule_ops)
    assert not _plan(client, desired).has_changes


def test_a_foreign_rule_never_makes_a_direct_replace_safe(kit):
    """Direct replace (remove, then add) is only taken when another rule delivers meanwhile; a
    foreign rule may vanish at any time, so the only owned rule is still replaced without a gap."""
    client = kit.FakeClient({(T, "s"): [kit.corr("team-a", "A"), kit.corr("nsb-x", "X")]})
    desired = _owned_desired([kit.corr("team-a", "A2")])
    report = apply_plan(client, _plan(client, desired), ApplyOptions(strategy=ReplaceStrategy.DIRECT))
    assert report.ok
    assert [op[0] for op in client.rule_ops] == ["add", "remove", "add", "remove"]  # via the temporary rule
    assert client.rules(T, "s")["team-a"].filter.subject == "A2"


def test_a_foreign_rule_changing_does_not_make_a_plan_stale(kit):
    client = kit.FakeClient({(T, "s"): [kit.corr("nsb-x", "X")]})
    desired = _owned_desired([kit.corr("team-a", "A")])
    plan = _plan(client, desired)
    client.add_rule(T, "s", kit.corr("nsb-y", "Y"))  # the framework starts up in between
    report = apply_plan(client, plan)
    assert report.ok and report.results[0].status == "applied"
    assert set(client.rules(T, "s")) == {"nsb-x", "nsb-y", "team-a"}


def test_sbrules_yaml_owns_is_every_subscription_s_default(tmp_path):
    from reconciler.rulefiles.environment import load_rules, locate

    _write(tmp_path, "sbrules.yaml", """\
        owns: ["team-*"]
        owners: {nservicebus: ["orders/*/nsb-*"]}
        environments:
          dev: {}
        """)
    _write(tmp_path, "orders.yaml", """\
        topic: orders
        subscriptions:
          s:
            rules:
              - {name: team-a, filter: true}
              - {name: other, filter: true}
        """)
    source = locate([tmp_path])
    assert source.project is not None and source.project.owners == Owners({"nservicebus": ("orders/*/nsb-*",)})
    result = load_rules(source, "dev")
    assert [d.code for d in result.diagnostics if d.severity == "error"] == ["not-owned"]
    assert result.state.topics[0].subscription("s").owns == ("team-*",)
    assert result.state.owners == source.project.owners


# -- named owners (sbrules.yaml owners:) ------------------------------------------------------------

OWNERS = Owners({"nservicebus": ("orders/nsb-*",), "team-payments": ("orders/*/pay-*",)})


def test_owners_claim_subscriptions_and_rules_part_by_part():
    assert OWNERS.of_subscription("Orders", "NSB-sales") == "nservicebus"
    assert OWNERS.of_subscription("orders", "shipping") is None
    assert OWNERS.of_rule("orders", "shipping", "pay-refunds") == "team-payments"
    assert OWNERS.of_rule("orders", "nsb-sales", "anything") == "nservicebus"
    assert OWNERS.of_rule("orders/eu", "x", "pay-1") is None  # a * never spans a /


def test_owners_name_topics_with_slash_segments_by_all_of_them():
    """MassTransit names topics Namespace/TypeName: a pattern names such a topic segment by segment."""
    owners = Owners({"masstransit": ("shop.events/orderplaced/*",), "team": ("shop.events/*/billing/team-*",)})
    assert owners.of_subscription("Shop.Events/OrderPlaced", "billing-endpoint") == "masstransit"
    assert owners.of_rule("shop.events/orderplaced", "billing", "team-big") == "team"  # four segments: a rule
    assert owners.of_subscription("shop.events", "orderplaced") is None  # two segments are not three
    assert owners.of_subscription("shop.events/orderplaced/extra", "x") is None


def _claimed_plan(kit) -> Plan:
    mine, pay, nsb = kit.corr("team-a", "A"), kit.corr("pay-refunds", "R"), kit.corr("legacy", "L")
    desired = replace(_owned_desired([mine]), owners=OWNERS)
    plan = compute_plan(desired, {(T, "s"): [mine, pay, nsb]})
    return replace(plan, undeclared=((T, "nsb-sales"), (T, "stray")), claimed={(T, "nsb-sales"): "nservicebus"})


def test_foreign_rules_and_undeclared_subscriptions_carry_their_owner(kit):
    plan = _claimed_plan(kit)
    by_name = {f.rule.name: f.owner for f in plan.subscriptions[0].foreign}
    assert by_name == {"pay-refunds": "team-payments", "legacy": None}
    text = render_text(plan)
    assert "= foreign rule 'pay-refunds'  (owned by team-payments; outside owns: 'team-*'" in text
    assert "undeclared orders/nsb-sales: exists in the namespace, no rule file mentions it; nservicebus owns it" in text
    again = PlanOps.from_json(json.loads(json.dumps(plan.to_json())))
    assert again.claimed == plan.claimed and again.subscriptions[0].foreign == plan.subscriptions[0].foreign


def test_strict_drift_counts_only_unclaimed_subscriptions(kit):
    plan = _claimed_plan(kit)
    assert plan.drifted(strict=True)
    assert "1 undeclared subscription(s)" in render_drift_text(plan, strict=True)
    doc = json.loads(render_drift_json(plan, strict=True))
    assert [d["subscription"] for d in doc["drift"]] == ["stray"]
    assert {"topic": T, "subscription": "nsb-sales", "owner": "nservicebus"} in doc["undeclared"]
    assert not replace(plan, undeclared=((T, "nsb-sales"),)).drifted(strict=True)


def test_a_delete_of_a_rule_an_owner_claims_says_so(kit):
    desired = DesiredState((Topic(T, (Subscription("s", (kit.corr("a", "A"),)),)),), owners=OWNERS)
    plan = compute_plan(desired, {(T, "s"): [kit.corr("a", "A"), kit.corr("pay-x", "X")]})
    (delete,) = plan.changes
    assert delete.rule == "pay-x" and "team-payments owns it (sbrules.yaml owners:); owns: would leave it alone" in delete.reasons


def test_routing_health_counts_foreign_rules_of_a_partly_owned_subscription(kit):
    from reconciler.traffic.analysis.impact import desired_subscribers

    mine, nsb = kit.corr("team-a", "A"), kit.corr("nsb-x", "X")
    desired = _owned_desired([mine])
    plan = compute_plan(desired, {(T, "s"): [mine, nsb]})
    (read_live,) = desired_subscribers(desired, plan)
    assert read_live.rules == (mine, nsb)
    (from_files,) = desired_subscribers(desired)
    assert from_files.rules is None  # the foreign rules were not read: unknown, not just the owned ones


# -- who wrote it: created-at and the framework a rule looks like ---------------------------------------

READ_AT = _dt.datetime(2026, 12, 7, 13, 40, tzinfo=_dt.timezone.utc)


def test_foreign_and_drifted_rules_show_their_age_and_likeness(kit):
    nsb = replace(
        Rule("Shop.Messages.OrderPlaced", SqlFilter("[NServiceBus.EnclosedMessageTypes] LIKE '%Shop.Messages.OrderPlaced%'")),
        created_at=READ_AT - _dt.timedelta(minutes=4, seconds=10),
    )
    stray = replace(kit.corr("team-a-stray", "S"), created_at=READ_AT - _dt.timedelta(days=2))
    mine = kit.corr("team-a", "A")
    plan = replace(compute_plan(_owned_desired([mine]), {(T, "s"): [mine, nsb, stray]}), read_at=READ_AT)
    text = render_text(plan)
    assert "      # created 4 min ago\n      # looks like NServiceBus: rule named after an event type" in text
    assert "      # created 2 days ago" in text  # the delete of the stray rule
    drift = render_drift_text(plan)
    assert "drift orders/s rule 'team-a-stray': added out of band (created 2 days ago)" in drift
    assert "foreign orders/s rule 'Shop.Messages.OrderPlaced': outside owns: 'team-*'; never changed, not drift; " \
           "created 4 min ago; looks like NServiceBus" in drift
    doc = json.loads(render_drift_json(plan))
    assert doc["drift"][0]["created_at"] == "2026-12-05T13:40:00Z"
    (foreign,) = doc["foreign"]
    assert foreign["created_at"] == "2026-12-07T13:35:50Z" and foreign["looks_like"].startswith("looks like NServiceBus")
    again = PlanOps.from_json(json.loads(json.dumps(plan.to_json())))
    assert again.subscriptions[0].foreign[0].rule.created_at == nsb.created_at
    assert again.changes[0].before.created_at == stray.created_at


def test_without_a_read_time_the_creation_time_is_shown_as_it_is(kit):
    old = replace(kit.corr("team-old", "O"), created_at=READ_AT)
    plan = compute_plan(_owned_desired([kit.corr("team-a", "A")]), {(T, "s"): [old]})
    assert "# created 2026-12-07 13:40:00 UTC" in render_text(plan)
