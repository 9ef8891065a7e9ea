"""`sbrules rules list` against the emulator: formats, connection string sources, errors, secrets."""

from __future__ import annotations

import json

import pytest
import yaml

from reconciler import model as m
from reconciler.cli import main
from reconciler.emulator import DEV_KEY


def run(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.fixture
def seeded(emulator):
    emulator.namespace.add_rule("orders", "empty", m.Rule(
        "corr", m.CorrelationFilter(subject="refund", properties={"tier": {"int": 3}, "region": "eu"})))
    emulator.namespace.add_rule("orders", "empty", m.Rule("act", m.SqlFilter("a = 1"), m.SqlRuleAction("SET b = 2")))
    emulator.namespace.add_rule("orders", "empty", m.Rule("none", m.FalseFilter()))
    return emulator


def test_json_output(capsys, seeded):
    code, out, err = run(capsys, ["rules", "list", "--topic", "orders", "--subscription", "empty", "--format", "json",
                                  "--connection-string", seeded.connection_string])
    assert code == 0, err
    assert json.loads(out) == {"topic": "orders", "subscriptions": {"empty": {"rules": [
        {"name": "corr", "correlation": {"subject": "refund", "properties": {"region": "eu", "tier": {"int": 3}}}},
        {"name": "act", "sql": "a = 1", "action": "SET b = 2"},
        {"name": "none", "filter": False},
    ]}}}
    assert DEV_KEY not in out + err
    code, yaml_out, _ = run(capsys, ["rules", "list", "--topic", "orders", "--subscription", "empty", "--format", "yaml",
                                     "--connection-string", seeded.connection_string])
    assert code == 0 and yaml.safe_load(yaml_out) == json.loads(out)  # one document, two serialisations


def test_yaml_fragment_reads_back_as_rules(capsys, seeded, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", seeded.connection_string)
    code, out, _ = run(capsys, ["rules", "list", "--topic", "orders", "--subscription", "empty", "--format", "yaml"])
    assert code == 0
    doc = yaml.safe_load(out)
    rules = [m.rule_from_doc(r) for r in doc["subscriptions"]["empty"]["rules"]]
    assert doc["topic"] == "orders" and rules == seeded.namespace.rules("orders", "empty")


def test_table_output(capsys, seeded, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", seeded.connection_string)
    code, out, _ = run(capsys, ["rules", "list", "--topic", "orders", "--subscription", "empty"])
    assert code == 0
    assert "corr" in out and "tier=int 3" in out and "SET b = 2" in out and "false" in out


def test_missing_subscription_is_a_clean_error(capsys, emulator, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", emulator.connection_string)
    code, out, err = run(capsys, ["rules", "list", "--topic", "orders", "--subscription", "nope"])
    assert code == 1 and err.startswith("error: ") and "nope" in err and "Traceback" not in err
    assert DEV_KEY not in out + err


def test_bad_connection_string_never_echoes_secrets(capsys, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING",
                       "Endpoint=sb://ns.example.com/;SharedAccessKeyName=k;SharedAccessKey=VerySecret;UseDevelopmentEmulator=true")
    code, out, err = run(capsys, ["rules", "list", "--topic", "t", "--subscription", "s"])
    assert code == 1 and "loopback" in err and "VerySecret" not in out + err


def test_no_connection_string_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("SERVICEBUS_CONNECTION_STRING", raising=False)
    code, _, err = run(capsys, ["rules", "list", "--topic", "t", "--subscription", "s"])
    assert code == 64 and "--connection-string" in err
