"""The operations as a library user runs them: rule files loaded once, one target, the GitOps loop
(plan → apply → drift) against the in-process emulator, and the same plan the command line prints."""

from __future__ import annotations

import json

import pytest

from reconciler.app import operations
from reconciler.app.target import Target
from reconciler.apply import ApplyOptions
from reconciler.emulator import Emulator
from reconciler.errors import UsageError
from reconciler.model import CorrelationFilter, DesiredState, Rule, Subscription, Topic, TrueFilter
from reconciler.rulefiles import RuleFileErrors

RULES = """\
topic: orders
subscriptions:
  billing:
    rules:
      - {name: big, sql: "amount > 1000"}
  shipping:
    rules:
      - {name: eu, correlation: {properties: {region: eu}}}
"""

LIVE = DesiredState((Topic("orders", (
    Subscription("billing", (Rule("$Default", TrueFilter()),)),
    Subscription("shipping", (Rule("eu", CorrelationFilter(properties={"region": "us"})),)),
    Subscription("audit", (Rule("$Default", TrueFilter()),)),
)),))


@pytest.fixture
def rules_dir(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "orders.yaml").write_text(RULES)
    return tmp_path / "rules"


def test_a_script_runs_the_loop_the_cli_runs(rules_dir, run_cli):
    rules = operations.load_rules([rules_dir])
    with Emulator(LIVE) as emulator, Target.connect(emulator.connection_string) as target:
        plan = operations.plan(target, rules)
        assert plan.summary() == {"create": 1, "replace": 1, "delete": 1, "unchanged": 0}
        assert plan.undeclared == (("orders", "audit"),) and plan.namespace == target.address
        code, out, _ = run_cli("plan", rules_dir, "--format", "json", "--connection-string", emulator.connection_string)
        assert code == 0 and json.loads(out)["summary"] == plan.summary()

        report = operations.apply(target, plan, ApplyOptions(), rules)
        assert report.ok
        assert not operations.drift(target, rules).drifted()
        exported = operations.export(target, topic="orders", subscriptions=["billing"])
        assert [r["name"] for r in exported.documents[0]["subscriptions"]["billing"]["rules"]] == ["big"]


@pytest.mark.unit
def test_invalid_rule_files_are_refused_with_every_error(tmp_path):
    (tmp_path / "orders.yaml").write_text("topic: orders\nsubscriptions:\n  s:\n    rules:\n      - {name: a, sql: 'x >'}\n")
    with pytest.raises(RuleFileErrors):
        operations.load_rules([tmp_path])
    assert operations.load_rules([tmp_path], allow_invalid=True).errors == 1


@pytest.mark.unit
def test_validate_is_offline_and_reports_every_environment(rules_dir):
    checked = operations.validate([rules_dir])
    assert checked.valid and not checked.project and checked.summary["rules"] == 2


@pytest.mark.unit
def test_an_environment_without_a_project_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"no sbrules\.yaml"):
        operations.project_environment("prod")
