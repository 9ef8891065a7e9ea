"""Microsoft's Service Bus emulator's Config.json: render writes the declared topology as one, validate
checks one against that emulator's traps with located errors, and the built-in emulator starts from
one; files → Config.json → emulator → export → plan shows no changes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reconciler.rulefiles.emulator_config import read_config
from tests import processes

RULES = {
    "topic": "orders",
    "subscriptions": {
        "billing": {"rules": [
            {"name": "high-value", "sql": "amount > 1000 AND currency = 'EUR'", "action": "SET sys.Label = 'priority'"},
            {"name": "refunds", "correlation": {"subject": "refund", "to": "billing", "properties": {"region": "eu", "tier": 3, "rate": 0.5, "vip": True}}},
            {"name": "paused", "filter": False},
        ]},
        "audit": {"rules": [{"name": "$Default", "filter": True}]},
        "legacy": {},
    },
}


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules"
    path.mkdir()
    (path / "orders.yaml").write_text(yaml.safe_dump(RULES, sort_keys=False))
    return path


@pytest.mark.unit
def test_render_writes_the_topology_as_microsofts_config(rules, run_cli, tmp_path):
    out = tmp_path / "Config.json"
    code, _, err = run_cli("render", rules, "--format", "emulator-config", "--out", out)
    assert code == 0 and "warning" not in err, err
    config = json.loads(out.read_text())
    namespace = config["UserConfig"]["Namespaces"][0]
    assert namespace["Name"] == "sbemulatorns" and config["UserConfig"]["Logging"] == {"Type": "File"}
    subs = {s["Name"]: s for s in namespace["Topics"][0]["Subscriptions"]}
    rules_ = {r["Name"]: r["Properties"] for r in subs["billing"]["Rules"]}
    assert rules_["high-value"] == {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "amount > 1000 AND currency = 'EUR'"},
                                    "Action": {"SqlExpression": "SET sys.Label = 'priority'"}}
    assert rules_["refunds"] == {"FilterType": "Correlation", "CorrelationFilter": {
        "Label": "refund", "To": "billing", "Properties": {"region": "eu", "tier": 3, "rate": 0.5, "vip": True}}}
    assert rules_["paused"] == {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=0"}}
    assert "Rules" not in subs["audit"] and "Rules" not in subs["legacy"]  # the emulator's own $Default
    code, out_, _ = run_cli("validate", "--emulator-config", out)
    assert code == 0 and out_.startswith("valid (Microsoft's emulator's Config.json): 1 topics, 3 subscriptions, 5 rules"), out_


@pytest.mark.unit
def test_a_type_json_cannot_carry_is_a_located_warning(rules, run_cli):
    doc = yaml.safe_load((rules / "orders.yaml").read_text())
    doc["subscriptions"]["billing"]["rules"][1]["correlation"]["properties"]["tier"] = {"int": 3}
    (rules / "orders.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    code, out, err = run_cli("render", rules, "--format", "emulator-config")
    assert code == 0 and json.loads(out)
    assert "orders.yaml:" in err and "warning[emulator-config]: rule 'refunds': property 'tier' is int 3" in err and "reads as long" in err
    line = int(err.split("orders.yaml:")[1].split(":")[0])
    assert "refunds" in (rules / "orders.yaml").read_text().splitlines()[line - 1]  # the rule, not its subscription


@pytest.mark.unit
def test_what_microsofts_emulator_refuses_is_a_render_error_and_nothing_is_written(rules, run_cli, tmp_path):
    doc = yaml.safe_load((rules / "orders.yaml").read_text())
    doc["subscriptions"]["billing"]["rules"].append({"name": "bad name!", "sql": "a = 1"})
    (rules / "orders.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "Config.json"
    code, _, err = run_cli("render", rules, "--format", "emulator-config", "--out", out)
    assert code == 1 and not out.exists()
    assert "orders.yaml:" in err and "rule name 'bad name!'" in err


BROKEN = """{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "my-namespace",
        "Queues": [],
        "Topics": [
          {"Name": "orders", "Subscriptions": [
            {"Name": "billing", "Rules": [
              {"Name": "big", "Properties": {"FilterType": "SqlFilter", "SqlFilter": {"SqlExpression": "amount > 1"}}},
              {"Name": "$Default", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}},
              {"Name": "eu", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Subject": "x"}}}
            ]}
          ]},
          {"Name": "payments", "Subscriptions": []}
        ]
      }
    ],
    "Logging": {"Type": "File"}
  }
}
"""


@pytest.mark.unit
def test_validate_names_each_trap_of_microsofts_emulator_at_its_line(run_cli, tmp_path):
    path = tmp_path / "Config.json"
    path.write_text(BROKEN)
    code, out, _ = run_cli("validate", "--emulator-config", path)
    assert code == 1
    found = {line.split(": error[emulator-config]: ")[1]: line.split(": error")[0].split(":")[-2] for line in out.splitlines() if "error[" in line}
    assert found == {
        "the emulator's namespace must be named 'sbemulatorns'": "5",
        "orders/billing: rule 'big': FilterType 'SqlFilter' is not one the emulator knows: write \"Sql\" or \"Correlation\" (did you mean 'Sql'?)": "10",
        "orders/billing: rule name '$Default': the emulator accepts letters, digits, _ - . / only, starting and ending with a letter or digit": "11",
        "orders/billing: rule 'eu': the emulator's correlation filter has no 'Subject' (it knows ContentType, CorrelationId, Label, MessageId, ReplyTo, ReplyToSessionId, SessionId, To, Properties)": "12",
        "topic 'payments' has no subscriptions: the emulator refuses a topic without one": "15",
    }, out
    code, out, _ = run_cli("validate", "--emulator-config", path, "--format", "json")
    assert code == 1 and not json.loads(out)["valid"]


@pytest.mark.unit
def test_the_entity_limit(run_cli, tmp_path):
    topics = [{"Name": f"t{i}", "Subscriptions": [{"Name": "s"}]} for i in range(51)]
    path = tmp_path / "Config.json"
    path.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": topics}], "Logging": {"Type": "File"}}}))
    code, out, _ = run_cli("validate", "--emulator-config", path)
    assert code == 1 and "0 queues and 51 topics: the emulator takes at most 50 together" in out


def test_files_to_config_to_the_emulator_to_export_plan_no_changes(rules, run_cli, tmp_path):
    config = tmp_path / "Config.json"
    assert run_cli("render", rules, "--format", "emulator-config", "--out", config)[0] == 0
    emulator = processes.spawn(
        [sys.executable, "-m", "reconciler", "emulator", "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        connection_string = emulator.stdout.readline().strip()
        assert connection_string.startswith("Endpoint=sb://"), emulator.stderr.read()
        exported = tmp_path / "exported"
        code, _, err = run_cli("export", "--all", "--out", exported, "--connection-string", connection_string)
        assert code == 0, err
        code, out, err = run_cli("plan", rules, "--detailed-exitcode", "--connection-string", connection_string)
        assert code == 0 and "No changes." in out, out + err
        code, out, err = run_cli("plan", exported, "--detailed-exitcode", "--connection-string", connection_string)
        assert code == 0, out + err
    finally:
        processes.end(emulator)


@pytest.mark.unit
def test_read_config_gives_every_subscription_its_rules_or_default(tmp_path):
    path = tmp_path / "Config.json"
    path.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": [
        {"Name": "t", "Subscriptions": [{"Name": "a"}, {"Name": "b", "Rules": [
            {"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"n": 3, "x": "y"}}}}]}]}]}],
        "Logging": {"Type": "File"}}}))
    state, findings = read_config(path)
    assert findings == []
    a, b = state.topics[0].subscriptions
    assert [r.name for r in a.rules] == ["$Default"]
    assert dict(b.rules[0].filter.properties)["n"].type.value == "long"
