"""One rule set, two namespaces: plan/apply/drift per environment against two emulators at once."""

from __future__ import annotations

import json
import secrets
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.emulator import Emulator
from reconciler.model import DesiredState, Rule, TrueFilter
from reconciler.rulefiles.environment import load_state, locate
from tests import processes

PROJECT = """\
environments:
  dev:
    connection_string_env: SBRULES_TEST_DEV
    vars: {region: eu-dev, threshold: {int: 10}, tenant: "x' OR 1=1 --"}
  prod:
    connection_string_env: SBRULES_TEST_PROD
    vars: {region: eu, threshold: {int: 1000}, tenant: contoso}
    overlays: [overlays/prod]
    topics: {orders: orders-v2, payments: payments-v2}
"""

PAYMENTS = """\
topic: payments
subscriptions:
  fraud:
    rules: [{name: risky, sql: "risk > 0.8 AND region = ${region}"}]
"""

ORDERS = """\
topic: orders
subscriptions:
  audit:
    rules:
      - name: big
        sql: amount > ${threshold} AND region = ${region}
      - name: tenant
        sql: tenant = ${tenant}
        action: SET region = ${region}
      - name: tier
        correlation:
          properties: {tier: "${threshold}"}
"""

PROD_OVERLAY = """\
topic: orders
subscriptions:
  audit:
    rules:
      - {name: tenant, remove: true}
  prod-only:
    rules: [{name: all, filter: true}]
"""


def _bare(state: DesiredState) -> DesiredState:
    """The environment's topics and subscriptions, each with only $Default: a namespace to converge."""
    return DesiredState(tuple(
        replace(t, subscriptions=tuple(replace(s, rules=(Rule("$Default", TrueFilter()),)) for s in t.subscriptions))
        for t in state.topics
    ))


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    rules = tmp_path / "project" / "rules"
    for name, text in {
        "sbrules.yaml": PROJECT, "orders.yaml": ORDERS, "payments.yaml": PAYMENTS, "overlays/prod/orders.yaml": PROD_OVERLAY,
    }.items():
        (rules / name).parent.mkdir(parents=True, exist_ok=True)
        (rules / name).write_text(textwrap.dedent(text), encoding="utf-8")
    monkeypatch.chdir(rules.parent)
    monkeypatch.delenv("SERVICEBUS_CONNECTION_STRING", raising=False)
    return rules


@pytest.fixture
def namespaces(project, monkeypatch):
    """A dev and a prod emulator, each holding its environment's entities with only $Default."""
    source = locate([project])
    keys = {env: "key-" + secrets.token_urlsafe(24) for env in ("dev", "prod")}
    with Emulator(_bare(load_state(source, "dev")), key=keys["dev"]) as dev, \
            Emulator(_bare(load_state(source, "prod")), key=keys["prod"]) as prod:
        monkeypatch.setenv("SBRULES_TEST_DEV", dev.connection_string)
        monkeypatch.setenv("SBRULES_TEST_PROD", prod.connection_string)
        yield {"dev": dev, "prod": prod, "keys": keys}


def _address(emulator: Emulator) -> str:
    return f"127.0.0.1:{emulator.port}"


def test_each_environment_plans_applies_and_drifts_against_its_own_namespace(
    project, namespaces, run_cli, output_schema, tmp_path, monkeypatch
):
    dev, prod = namespaces["dev"], namespaces["prod"]
    outputs = []

    code, out, err = run_cli("plan", "--env", "dev", "--format", "json")
    outputs.append(out + err)
    assert code == 0, err
    dev_plan = json.loads(out)
    output_schema("plan").validate(dev_plan)
    assert (dev_plan["environment"], dev_plan["namespace"]) == ("dev", _address(dev))
    created = {c["rule"]: c["after"] for c in dev_plan["changes"] if c["change"] == "create"}
    assert created["tenant"]["sql"] == "tenant = 'x'' OR 1=1 --'"  # a literal, not SQL
    assert created["tier"]["correlation"]["properties"]["tier"] == {"int": 10}

    prod_file = tmp_path / "prod-plan.json"
    code, out, err = run_cli("plan", "--env", "prod", "--out", prod_file)
    outputs.append(out + err)
    assert code == 0, err
    assert out.startswith(f"environment prod: namespace {_address(prod)}")
    assert "subscription orders/prod-only (orders-v2 in the namespace)" in out and "'tenant'" not in out
    saved = json.loads(prod_file.read_text())
    assert {(s["topic"], s.get("declared_topic")) for s in saved["subscriptions"]} >= {("orders-v2", "orders")}

    # a saved plan is tied to its namespace and environment
    code, _, err = run_cli("apply", prod_file, "--env", "dev")
    assert code == 1 and f"made for namespace {_address(prod)} (environment prod)" in err
    code, _, err = run_cli("apply", prod_file, "--connection-string", dev.connection_string)
    assert code == 1 and "refusing to apply it to" in err
    code, _, err = run_cli("apply", prod_file, "--env", "prod", "--connection-string", prod.connection_string)
    assert code == 64 and "drop --connection-string" in err

    code, out, err = run_cli("apply", prod_file)  # as plan's hint prints it: the plan names its environment
    outputs.append(out + err)
    assert code == 0, err
    code, out, err = run_cli("apply", "--env", "dev", "--auto-approve")
    outputs.append(out + err)
    assert code == 0, err

    for env, emulator in (("dev", dev), ("prod", prod)):
        code, out, err = run_cli("drift", "--env", env, "--format", "json")
        outputs.append(out + err)
        report = json.loads(out)
        output_schema("drift").validate(report)
        assert code == 0 and report["in_sync"] and report["environment"] == env
        assert report["namespace"] == _address(emulator)
    # unlock, export and route speak the declared topic names; the namespace has the renamed one
    code, out, err = run_cli("unlock", "orders/prod-only", "--env", "prod", "--yes")
    assert code == 0 and "No locks in 1 subscription(s)." in out, err
    code, out, err = run_cli("export", "--env", "prod", "--topic", "payments")
    assert code == 0, err
    assert out.count("topic: payments\n") == 1 and "payments-v2" not in out
    message = tmp_path / "message.json"
    message.write_text(json.dumps({"user": {"tenant": "x' OR 1=1 --", "amount": 1}}), encoding="utf-8")
    code, out, err = run_cli("route", "--env", "dev", "--message", message, "--format", "json")
    delivered = {(d["topic"], d["subscription"]): d["delivered"] for d in json.loads(out)["deliveries"]}
    assert code == 0 and delivered == {("orders", "audit"): True, ("payments", "fraud"): False}  # 'tenant' matched

    # the namespaces differ: dev's rules pointed at prod find no topic 'orders' there (prod has orders-v2)
    monkeypatch.setenv("SBRULES_TEST_DEV", prod.connection_string)
    code, out, err = run_cli("drift", "--env", "dev", "--format", "json")
    assert code == 1 and json.loads(out)["error"]["code"] == "not-found" and "orders" in err

    for text in outputs:
        assert namespaces["keys"]["dev"] not in text and namespaces["keys"]["prod"] not in text


def test_rendered_files_plan_exactly_as_the_environment(project, namespaces, run_cli, tmp_path, monkeypatch):
    rendered = tmp_path / "rendered"
    code, _, err = run_cli("render", "--env", "prod", "--out", rendered)
    assert code == 0, err
    code, out, err = run_cli("plan", "--env", "prod", "--format", "json")
    assert code == 0, err
    with_env = json.loads(out)
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", namespaces["prod"].connection_string)
    code, out, err = run_cli("plan", rendered, "--format", "json")
    assert code == 0, err
    from_files = json.loads(out)
    assert from_files["environment"] is None and with_env["environment"] == "prod"
    # the rendered files name the namespace's topics; only the plan with --env knows the declared ones
    declared = {s.pop("declared_topic", None) for s in with_env["subscriptions"]}
    assert declared == {"orders", "payments"}
    for doc in (from_files, with_env):  # when each plan read the namespace
        doc.pop("read_at")
    assert with_env["changes"] and {**from_files, "environment": "prod"} == with_env


def test_validate_without_env_checks_every_environment(project, run_cli):
    (project / "overlays/prod/orders.yaml").write_text(
        PROD_OVERLAY.replace("{name: tenant, remove: true}", "{name: ghost, remove: true}"), encoding="utf-8"
    )
    code, out, err = run_cli("validate", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["environments"] == ["dev", "prod"]
    (ghost,) = [d for d in doc["diagnostics"] if d["code"] == "overlay"]
    assert ghost["message"].startswith("environment 'prod': ") and ghost["file"].endswith("overlays/prod/orders.yaml")
    code, out, err = run_cli("validate", "--env", "dev")
    assert code == 0 and "valid (environments: dev)" in out


@pytest.mark.slow
def test_the_emulator_serves_an_environments_rendered_rules(project):
    import signal
    import subprocess
    import sys

    from reconciler.amqp.client import ManagementClient

    expected = load_state(locate([project]), "prod")
    proc = processes.spawn(
        [sys.executable, "-m", "reconciler", "emulator", "--port", "0", "--env", "prod", "--rules", str(project)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        connection_string = proc.stdout.readline().strip()
        assert connection_string.startswith("Endpoint="), proc.stderr.read() if proc.poll() is not None else ""
        with ManagementClient(connection_string, timeout=10) as client:
            for topic, sub in expected.subscriptions():
                assert client.list_rules(topic.name, sub.name) == list(sub.rules)
        assert {t.name for t in expected.topics} == {"orders-v2", "payments-v2"}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        finally:
            processes.end(proc)


def test_topics_subscriptions_and_rules_list_take_env_and_the_declared_names(project, namespaces, run_cli, output_schema):
    """Declared names in, declared names out, the namespace's name beside a renamed topic."""
    code, out, err = run_cli("topics", "--env", "prod", "--format", "json")
    assert code == 0, err
    output_schema("topics").validate(json.loads(out))
    assert {"name": "orders", "namespace_name": "orders-v2", "subscriptions": 2} in json.loads(out)["topics"]
    code, out, err = run_cli("topics", "--env", "prod")
    assert code == 0 and "orders (orders-v2 in the namespace)" in out, err

    code, out, err = run_cli("subscriptions", "--env", "prod", "--topic", "orders", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    output_schema("subscriptions").validate(doc)
    assert (doc["topic"], doc["namespace_topic"]) == ("orders", "orders-v2")
    assert sorted(s["name"] for s in doc["subscriptions"]) == ["audit", "prod-only"]

    code, out, err = run_cli("rules", "list", "--env", "dev", "--topic", "orders", "--subscription", "audit", "--format", "yaml")
    assert code == 0 and "topic: orders" in out and "$Default" in out, err
    code, out, err = run_cli("rules", "list", "--env", "prod", "--topic", "orders", "--subscription", "audit", "--format", "yaml")
    assert code == 0 and "topic: orders\n" in out and "orders-v2 in the namespace" in err, err


def test_send_takes_the_declared_topic_name(project, namespaces, run_cli, tmp_path):
    message = tmp_path / "m.json"
    message.write_text('{"user": {"amount": 5}}')
    code, out, err = run_cli("send", "--env", "prod", "--topic", "orders", "--message", message, "--count", "2")
    assert code == 0 and "sent 2 of 2 message(s) to orders (orders-v2 in the namespace)" in out, err
    # the emulator's namespace holds only $Default rules: every subscription of orders-v2 got both
    assert len(namespaces["prod"].namespace.subscription("orders-v2", "prod-only").store.messages) == 2
