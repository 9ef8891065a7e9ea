"""The fall-through subscription against the Spark report: after `sbrules apply` and an SDK publish
to the emulator, `sbrules sample` of the tap and `sbrules analyze` count as unrouted exactly the
messages the fall-through subscription holds."""

from __future__ import annotations

import json

import pytest

from tests.emulator import fallthrough_shop as shop

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_analyze_counts_what_the_fallthrough_holds(spark, run_cli, tmp_path, output_schema):
    with shop.empty_emulator() as emulator:
        rules, held = shop.apply_and_publish(emulator, run_cli, tmp_path)
        sample = tmp_path / "sample"
        code, out, err = run_cli(
            "sample", "--topic", "orders", "--subscription", "tap", "--out", sample,
            "--connection-string", emulator.connection_string,
        )
        assert code == 0, out + err
    code, out, err = run_cli("analyze", rules, "--traffic", sample, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    output_schema("analyze").validate(doc)
    (topic,) = doc["topics"]
    assert topic["messages"] == len(shop.MESSAGES)
    assert topic["unrouted"]["count"] == len(held["leftovers"]) == len(shop.UNROUTED)
    examples = set(topic["unrouted"]["examples"])  # message ids
    assert examples and examples <= held["leftovers"]
    assert topic["not_receiving"] == [
        {"subscription": "tap", "reason": "sampling tap"}, {"subscription": "leftovers", "reason": "fall-through"}
    ]


def test_analyze_live_and_plan_traffic_count_a_subscription_no_file_mentions(spark, run_cli, tmp_path, monkeypatch):
    """...with its owner, where sbrules.yaml's owners: claims it."""
    with shop.empty_emulator(shop.BYSTANDER) as emulator:
        subscriptions = (*shop.SUBSCRIPTIONS, shop.BYSTANDER.name)
        rules, held = shop.apply_and_publish(emulator, run_cli, tmp_path, subscriptions)
        sample = tmp_path / "sample"
        namespace = ("--connection-string", emulator.connection_string)
        code, out, err = run_cli("sample", "--topic", "orders", "--subscription", "tap", "--out", sample, *namespace)
        assert code == 0, out + err
        (tmp_path / "sbrules.yaml").write_text(
            "environments:\n  dev: {connection_string_env: SERVICEBUS_CONNECTION_STRING}\n"
            f"owners:\n  reporting: [orders/{shop.BYSTANDER.name}]\n"
        )
        monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", emulator.connection_string)
        env = ("--env", "dev")
        code, out, err = run_cli("analyze", rules, "--traffic", sample, "--live", "--format", "json", *env)
        assert code == 0, err
        (live,) = json.loads(out)["topics"]
        saved = tmp_path / "plan.json"
        code, out, err = run_cli("plan", rules, "--traffic", sample, "--format", "json", "--out", saved, *env)
        assert code == 0, err
        (planned,) = json.loads(out)["traffic"]["routing_health"]["topics"]
        code, out, err = run_cli("analyze", rules, "--traffic", sample, "--live", *env)
        assert f"not in the rule files: {shop.BYSTANDER.name} (owned by reporting, receives {len(held['legacy'])})" in out
    code, out, err = run_cli("analyze", rules, "--traffic", sample, "--format", "json", *env)  # offline: legacy unseen
    (offline,) = json.loads(out)["topics"]
    code, out, err = run_cli("impact", saved, rules, "--traffic", sample, "--format", "json", *env)
    assert code == 0, err
    (from_saved,) = json.loads(out)["routing_health"]["topics"]  # a saved plan keeps the rules it read
    assert from_saved == planned
    assert planned["undeclared_subscriptions"] == live["undeclared_subscriptions"] == [
        {"subscription": "legacy", "receives": len(held["legacy"]), "owner": "reporting"}
    ]
    assert offline["credits"]["exact"] is False and planned["credits"]["exact"] is True
    assert held["leftovers"] == shop.UNROUTED - held["legacy"]
    assert live["unrouted"]["count"] == planned["unrouted"]["count"] == len(held["leftovers"])
    assert offline["unrouted"]["count"] == len(shop.UNROUTED)
    assert live["unknown_subscriptions"] == planned["unknown_subscriptions"] == []
