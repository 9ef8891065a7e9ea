"""Commands built on discovery: export --topic/--all, topics, subscriptions, undeclared and missing
subscriptions in plan/drift, Listen-only keys, and the REST fallback for auto-forwarding subscriptions."""

from __future__ import annotations

import json

import pytest
import yaml

from reconciler import model
from reconciler.emulator import Emulator

LISTENER, LISTENER_KEY = "listener", "listen-only-key"
RULES = (
    model.Rule("eu", model.CorrelationFilter(properties={"region": "eu", "tier": {"int": 2}})),
    model.Rule("big", model.SqlFilter("amount > 100"), model.SqlRuleAction("SET big = TRUE")),
)


@pytest.fixture
def namespace():
    """orders: 300 subscriptions (one of them auto-forwarding); payments: two."""
    emu = Emulator(listen_keys={LISTENER: LISTENER_KEY})
    for index in range(300):
        emu.namespace.create_subscription("orders", f"sub-{index:03}", RULES)
    emu.namespace.create_queue("archive")
    emu.namespace.create_subscription("orders", "forwarded", RULES, forward_to="archive")
    emu.namespace.create_subscription("payments", "ledger", RULES[:1])
    emu.namespace.create_subscription("payments", "audit")
    with emu:
        yield emu


def _rule_file(path, topic: str, subs: dict) -> None:
    path.write_text(yaml.safe_dump({"topic": topic, "subscriptions": subs}, sort_keys=False))


def test_export_a_topic_without_naming_subscriptions_then_plan_shows_nothing(namespace, run_cli, tmp_path):
    conn = ["--connection-string", namespace.connection_string]
    code, _, err = run_cli("export", "--topic", "orders", "--out", tmp_path, *conn)
    assert code == 0, err
    assert "orders/forwarded: rules read over the management REST API" in err
    doc = yaml.safe_load((tmp_path / "orders.yaml").read_text())
    assert len(doc["subscriptions"]) == 301
    assert doc["subscriptions"]["forwarded"] == doc["subscriptions"]["sub-299"]
    code, out, err = run_cli("plan", tmp_path, "--detailed-exitcode", "--strict", *conn)
    assert code == 0, out + err
    assert "No changes." in out and "undeclared" not in out
    assert "orders/forwarded: rules read over the management REST API" in out  # the plan says how it read it


def test_export_all_writes_one_file_per_topic(namespace, run_cli, tmp_path):
    code, _, err = run_cli("export", "--all", "--out", tmp_path, "--connection-string", namespace.connection_string)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orders.yaml", "payments.yaml"]
    payments = yaml.safe_load((tmp_path / "payments.yaml").read_text())
    assert payments["subscriptions"]["audit"]["rules"][0]["name"] == "$Default"
    code, out, _ = run_cli("export", "--all", "--connection-string", namespace.connection_string)
    assert code == 0 and [d["topic"] for d in yaml.safe_load_all(out)] == ["orders", "payments"]
    code, out, _ = run_cli("export", "--topic", "payments", "--subscription", "ledger",
                           "--connection-string", namespace.connection_string)
    assert code == 0 and list(yaml.safe_load(out)["subscriptions"]) == ["ledger"]


def test_drift_names_undeclared_subscriptions_and_strict_counts_them(namespace, run_cli, tmp_path):
    _rule_file(tmp_path / "payments.yaml", "payments", {"ledger": {"rules": [model.rule_to_doc(RULES[0])]}})
    conn = ["--connection-string", namespace.connection_string]
    code, out, _ = run_cli("drift", tmp_path, *conn)
    assert code == 0 and "undeclared payments/audit" in out and "In sync" in out
    code, out, _ = run_cli("drift", tmp_path, "--strict", *conn)
    assert code == 2 and "1 undeclared subscription(s)" in out
    code, out, _ = run_cli("drift", tmp_path, "--strict", "--format", "json", *conn)
    doc = json.loads(out)
    assert code == 2 and not doc["in_sync"]
    assert doc["undeclared"] == [{"topic": "payments", "subscription": "audit"}]
    assert {"topic": "payments", "subscription": "audit", "rule": None, "kind": "undeclared"} in doc["drift"]
    code, out, _ = run_cli("plan", tmp_path, "--detailed-exitcode", *conn)
    assert code == 0 and "undeclared payments/audit" in out


def test_a_declared_subscription_that_does_not_exist_is_a_located_error(namespace, run_cli, tmp_path):
    (tmp_path / "payments.yaml").write_text(
        "topic: payments\n"
        "subscriptions:\n"
        "  ledger: {}\n"
        "  refunds:\n"
        "    rules: [{name: all, filter: true}]\n"
    )
    code, out, err = run_cli("plan", tmp_path, "--connection-string", namespace.connection_string)
    assert code == 1 and not out
    assert f"{tmp_path / 'payments.yaml'}:4:" in err
    assert "payments/refunds does not exist" in err and "create it first" in err


def test_listen_only_keys_work_from_declared_names_and_say_so_once(namespace, run_cli, tmp_path):
    _rule_file(tmp_path / "payments.yaml", "payments", {"ledger": {"rules": [model.rule_to_doc(RULES[0])]}})
    conn = ["--connection-string", namespace.connection_string_for(LISTENER, LISTENER_KEY)]
    code, out, err = run_cli("drift", tmp_path, "--strict", *conn)
    assert code == 0, out + err
    assert out.count("discovery needs Manage rights") == 1 and "In sync" in out
    code, out, err = run_cli("export", "--topic", "payments", "--subscription", "ledger", *conn)
    assert code == 0 and "ledger" in out
    for args in (("export", "--topic", "payments"), ("topics",), ("subscriptions", "--topic", "payments")):
        code, out, err = run_cli(*args, *conn)
        assert code == 1 and "needs Manage rights" in err and "Traceback" not in err, args


def test_topics_and_subscriptions_list_what_exists(namespace, run_cli):
    conn = ["--connection-string", namespace.connection_string]
    code, out, _ = run_cli("topics", "--format", "json", *conn)
    assert code == 0 and json.loads(out)["topics"] == [{"name": "orders", "subscriptions": 301},
                                                       {"name": "payments", "subscriptions": 2}]
    code, out, _ = run_cli("topics", *conn)
    assert code == 0 and "payments" in out
    code, out, _ = run_cli("subscriptions", "--topic", "orders", "--format", "json", *conn)
    subs = {s["name"]: s for s in json.loads(out)["subscriptions"]}
    assert code == 0 and len(subs) == 301 and subs["forwarded"]["forward_to"] == "archive"
    code, out, _ = run_cli("subscriptions", "--topic", "payments", *conn)
    assert code == 0 and "ledger" in out and "audit" in out
    code, _, err = run_cli("subscriptions", "--topic", "nope", *conn)
    assert code == 1 and "'nope' does not exist" in err


def test_export_usage_errors(run_cli, monkeypatch):
    """Each usage mistake exits 2 with one line naming it, before any connection is tried."""
    monkeypatch.delenv("SERVICEBUS_CONNECTION_STRING", raising=False)
    conn = ("--connection-string", "Endpoint=sb://x/;SharedAccessKeyName=a;SharedAccessKey=b")
    for args, words in [
        (conn, "--topic"),
        (("--topic", "t", "--all", *conn), "--all"),
        (("--all", "--subscription", "s", *conn), "--subscription"),
        (("--topic", "t", "--subscription", "s"), "connection string"),
    ]:
        code, out, err = run_cli("export", *args)
        assert code == 64 and out == "" and "Traceback" not in err, args
        [line] = [line for line in err.splitlines() if line.startswith("error:")]
        assert words in line


def test_rules_list_reads_an_auto_forwarding_subscription_over_rest(namespace, run_cli):
    code, out, err = run_cli("rules", "list", "--topic", "orders", "--subscription", "forwarded", "--format", "json",
                             "--connection-string", namespace.connection_string)
    assert code == 0 and "read over the management REST API" in err
    assert [r["name"] for r in json.loads(out)["subscriptions"]["forwarded"]["rules"]] == ["eu", "big"]
