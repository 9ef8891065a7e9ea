"""Partial ownership end to end over real AMQP: a framework's rules beside a team's on one
subscription. Plan, apply, drift and export through the CLI; Microsoft's administration client
(over the emulator's REST API) is the independent observer of what apply left in place."""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from azure.servicebus.management import ServiceBusAdministrationClient

from reconciler.amqp.client import ManagementClient
from reconciler.apply import ApplyOptions, apply_plan, render_report
from reconciler.emulator import Emulator
from reconciler.model import CorrelationFilter, Rule, SqlFilter, TrueFilter
from reconciler.owners import Owners
from reconciler.plan.live import plan_live
from reconciler.plan.ops import iso_time
from reconciler.rulefiles import load_paths

FRAMEWORK = (
    Rule("$Default", TrueFilter()),
    Rule("Shop.Messages.OrderPlaced", SqlFilter("[NServiceBus.EnclosedMessageTypes] LIKE '%Shop.Messages.OrderPlaced%'")),
    Rule("masstransit-order", CorrelationFilter(subject="OrderSubmitted")),
)

RULES = """\
topic: orders
subscriptions:
  shared:
    owns: ["team-a-*"]
    rules:
      - {name: team-a-big, sql: "amount > 100"}
      - {name: team-a-eu, correlation: {subject: eu}}
"""


@pytest.fixture
def shared(tmp_path, monkeypatch):
    emu = Emulator()
    emu.namespace.create_topic("orders")
    emu.namespace.create_subscription("orders", "shared", (*FRAMEWORK, Rule("team-a-old", SqlFilter("1=1"))))
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "orders.yaml").write_text(RULES)
    monkeypatch.chdir(tmp_path)
    with emu:
        monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", emu.connection_string)
        yield emu


def _observed(emu) -> dict[str, str]:
    """Rule name → filter (kind and fields) and creation time as Microsoft's administration client reads them."""
    with ServiceBusAdministrationClient.from_connection_string(
        emu.connection_string, connection_verify=emu.ca_file
    ) as admin:
        return {
            rule.name: f"{type(rule.filter).__name__} {json.dumps(vars(rule.filter), default=str, sort_keys=True)} "
                       f"{rule.created_at_utc}"
            for rule in admin.list_rules("orders", "shared")
        }


def test_plan_apply_drift_leave_foreign_rules_alone(shared, run_cli, tmp_path):
    before = _observed(shared)
    code, out, _ = run_cli("plan", "rules")
    assert code == 0
    assert "+ create rule 'team-a-big'" in out and "- delete rule 'team-a-old'" in out
    for name, _ in ((r.name, r) for r in FRAMEWORK):
        assert f"= foreign rule {name!r}" in out
        assert f"delete rule {name!r}" not in out
    plan_file = tmp_path / "plan.json"
    assert run_cli("plan", "rules", "--out", plan_file)[0] == 0
    code, out, _ = run_cli("apply", plan_file)
    assert code == 0, out

    after = _observed(shared)
    for rule in FRAMEWORK:
        assert after[rule.name] == before[rule.name]
    assert set(after) == {r.name for r in FRAMEWORK} | {"team-a-big", "team-a-eu"}

    code, out, _ = run_cli("drift", "rules", "--strict")
    assert code == 0 and "In sync" in out and "foreign orders/shared rule 'masstransit-order'" in out
    code, out, _ = run_cli("drift", "rules", "--strict", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["in_sync"] and doc["drift"] == []
    assert {f["rule"]["name"] for f in doc["foreign"]} == {r.name for r in FRAMEWORK}


def test_under_the_complete_set_the_same_rules_are_drift(shared, run_cli, tmp_path):
    (tmp_path / "rules" / "orders.yaml").write_text(RULES.replace('    owns: ["team-a-*"]\n', ""))
    code, out, _ = run_cli("drift", "rules")
    assert code == 2
    assert all(f"rule {r.name!r}: added out of band" in out for r in FRAMEWORK)


def test_export_with_owns_round_trips(shared, run_cli, tmp_path):
    assert run_cli("apply", "rules", "--auto-approve")[0] == 0
    code, out, err = run_cli("export", "--topic", "orders", "--owns", "team-a-*", "--out", "exported")
    assert code == 0, err
    assert "left out 3 foreign rule(s)" in err
    text = (tmp_path / "exported" / "orders.yaml").read_text()
    assert "owns:\n    - team-a-*" in text and "masstransit" not in text
    code, out, _ = run_cli("plan", "exported", "--detailed-exitcode")
    assert code == 0 and "No changes." in out


def test_an_overlay_may_change_owns(shared, run_cli, tmp_path):
    """dev owns the team's rules only; prod's overlay hands sbrules the framework's rule too."""
    (tmp_path / "rules" / "sbrules.yaml").write_text(textwrap.dedent("""\
        environments:
          dev: {connection_string_env: SERVICEBUS_CONNECTION_STRING}
          prod:
            connection_string_env: SERVICEBUS_CONNECTION_STRING
            overlays: [overlays/prod]
        """))
    (tmp_path / "rules" / "overlays" / "prod").mkdir(parents=True)
    (tmp_path / "rules" / "overlays" / "prod" / "orders.yaml").write_text(textwrap.dedent("""\
        topic: orders
        subscriptions:
          shared:
            owns: ["team-a-*", "masstransit-*"]
        """))
    code, out, _ = run_cli("plan", "rules", "--env", "dev")
    assert code == 0 and "delete rule 'masstransit-order'" not in out
    code, out, _ = run_cli("plan", "rules", "--env", "prod")
    assert code == 0 and "- delete rule 'masstransit-order'" in out and "= foreign rule '$Default'" in out
    code, out, _ = run_cli("render", "rules", "--env", "prod", "--out", "rendered")
    assert code == 0, out
    assert "- masstransit-*" in (tmp_path / "rendered" / "orders.yaml").read_text()


def test_named_owners_label_plan_drift_and_export(shared, run_cli, tmp_path):
    shared.namespace.create_subscription("orders", "nsb-sales", (FRAMEWORK[1],))
    shared.namespace.create_subscription("orders", "stray", (Rule("$Default", TrueFilter()),))
    (tmp_path / "rules" / "sbrules.yaml").write_text(textwrap.dedent("""\
        environments:
          dev: {connection_string_env: SERVICEBUS_CONNECTION_STRING}
        owners:
          nservicebus: ["orders/nsb-*", "orders/shared/Shop.Messages.*"]
          masstransit: ["orders/shared/masstransit-*"]
        """))
    code, out, _ = run_cli("plan", "rules", "--env", "dev")
    assert code == 0
    assert "= foreign rule 'masstransit-order'  (owned by masstransit;" in out
    assert "= foreign rule 'Shop.Messages.OrderPlaced'  (owned by nservicebus;" in out
    assert "undeclared orders/nsb-sales: exists in the namespace, no rule file mentions it; nservicebus owns it" in out
    # The plan reads what a claimed subscription holds (a saved plan's traffic report counts it), not a stray one's.
    assert run_cli("plan", "rules", "--env", "dev", "--out", tmp_path / "plan.json")[0] == 0
    left_alone = {d["subscription"]: d for d in json.loads((tmp_path / "plan.json").read_text())["undeclared"]}
    assert left_alone["nsb-sales"]["owner"] == "nservicebus"
    assert [r["name"] for r in left_alone["nsb-sales"]["rules"]] == ["Shop.Messages.OrderPlaced"]
    assert "rules" not in left_alone["stray"] and "owner" not in left_alone["stray"]
    assert run_cli("apply", "rules", "--env", "dev", "--auto-approve")[0] == 0
    code, out, _ = run_cli("drift", "rules", "--env", "dev", "--strict", "--format", "json")
    doc = json.loads(out)
    assert code == 2 and [d["subscription"] for d in doc["drift"]] == ["stray"]  # nsb-sales is claimed
    shared.namespace.delete_subscription("orders", "stray")
    assert run_cli("drift", "rules", "--env", "dev", "--strict")[0] == 0

    code, out, err = run_cli("export", "--topic", "orders", "--env", "dev")
    assert code == 0, err
    exported = yaml.safe_load(out.split("\n", 1)[1])["subscriptions"]
    assert exported["nsb-sales"]["description"] == "owned by nservicebus (sbrules.yaml owners:)"
    rules = {r["name"]: r.get("description") for r in exported["shared"]["rules"]}
    assert rules["masstransit-order"] == "owned by masstransit (sbrules.yaml owners:)" and rules["team-a-big"] is None


def test_a_rule_re_created_after_an_apply_is_contested(shared, run_cli, tmp_path):
    """A framework re-creates a rule sbrules declares right after sbrules applied it: drift and
    plan --since the journal say contested, with both times and the likely owner, and apply says so
    before writing it."""
    (tmp_path / "rules" / "sbrules.yaml").write_text(textwrap.dedent("""\
        environments:
          dev: {connection_string_env: SERVICEBUS_CONNECTION_STRING}
        owners:
          masstransit: ["orders/shared/team-a-big"]
        """))
    journal = tmp_path / "journal.jsonl"
    assert run_cli("apply", "rules", "--env", "dev", "--auto-approve", "--journal", journal)[0] == 0
    code, out, _ = run_cli("drift", "rules", "--env", "dev", "--since", journal)
    assert code == 0 and "contested" not in out  # nobody wrote it since

    script = Path(__file__).with_name("framework_restart.py")
    subprocess.run([sys.executable, str(script), "orders", "shared", "team-a-big", "amount > 500"], check=True, timeout=60)

    code, out, _ = run_cli("drift", "rules", "--env", "dev", "--since", journal, "--format", "json")
    doc = json.loads(out)
    (contest,) = doc["contested"]
    assert contest["rule"] == "team-a-big" and contest["likely_owner"] == "masstransit"
    assert contest["created_at"] > contest["applied_at"]
    code, out, _ = run_cli("drift", "rules", "--env", "dev", "--since", journal)
    assert code == 2 and "contested orders/shared rule 'team-a-big': created " in out
    assert "after sbrules applied it at " in out and "likely owner: masstransit" in out
    code, out, _ = run_cli("apply", "rules", "--env", "dev", "--since", journal, "--auto-approve")
    assert code == 0
    assert out.index("contested orders/shared rule 'team-a-big'") < out.index("replaced rule 'team-a-big'")

    plan_file = tmp_path / "plan.json"
    assert run_cli("plan", "rules", "--env", "dev", "--out", plan_file)[0] == 0
    code, out, _ = run_cli("drift", "rules", "--env", "dev", "--since", plan_file)
    assert code == 0 and "contested" not in out  # unchanged since that plan read the namespace


def test_since_names_a_journal_or_a_plan(shared, run_cli, tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a journal\n")
    code, _, err = run_cli("drift", "rules", "--since", bad)
    assert code == 1 and "--since" in err and "is not an apply journal entry" in err and "Traceback" not in err


def test_a_rule_changed_right_after_apply_wrote_it_is_contested_at_once(shared, run_cli, tmp_path, output_schema):
    """A framework's thread re-creates a declared rule, over its own AMQP connection, the moment apply
    has written it (apply's per-change callback hands over and waits until it is done): apply's read
    under its lock reports the rule contested, its journal records it, and drift --since that
    journal shows it while the framework's version stays."""
    desired = replace(load_paths([tmp_path / "rules"]), owners=Owners({"masstransit": ("orders/shared/team-a-big",)}))
    written, recreated = threading.Event(), threading.Event()

    def framework() -> None:
        assert written.wait(60)
        with ManagementClient(shared.connection_string) as client:
            client.remove_rule("orders", "shared", "team-a-big")
            client.add_rule("orders", "shared", Rule("team-a-big", SqlFilter("amount > 500")))
        recreated.set()

    def handed_over(change) -> None:
        if change.rule == "team-a-big":
            written.set()
            assert recreated.wait(60)

    thread = threading.Thread(target=framework, daemon=True)
    thread.start()
    journal = tmp_path / "journal.jsonl"
    with ManagementClient(shared.connection_string) as client, journal.open("w") as stream:
        plan = plan_live(client, client, desired, discovery=False)
        report = apply_plan(client, plan, ApplyOptions(journal=stream, desired=desired, on_change=handed_over, parallel=1))
    thread.join(60)

    (contest,) = report.results[0].contested
    assert (contest.rule, contest.found, contest.likely_owner) == ("team-a-big", "changed", "masstransit")
    assert contest.created_at is not None and contest.created_at >= contest.applied_at - _dt.timedelta(seconds=5)
    assert "! contested orders/shared rule 'team-a-big': changed by another writer" in render_report(report)
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    verified = {e["rule"]: e["created_at"] for e in entries if e.get("outcome") == "verified"}
    created = shared.namespace.subscription("orders", "shared").rules["team-a-eu"].created_at
    on_the_wire = created.replace(microsecond=created.microsecond // 1000 * 1000)  # AMQP timestamps are milliseconds
    assert verified == {"team-a-eu": iso_time(on_the_wire)}  # every other rule apply wrote, as it saw it

    code, out, _ = run_cli("drift", "rules", "--since", journal, "--format", "json")
    output_schema("drift").validate(json.loads(out))
    (carried,) = json.loads(out)["contested"]
    assert code == 2 and carried["found"] == "changed" and carried["likely_owner"] == "masstransit"
    assert carried["created_at"] == iso_time(contest.created_at)
