"""Under an environment that renames a topic, traffic reports name it as the rule files declare it,
the namespace's name beside it, as ``route``, ``sample`` and ``export`` do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.model import Message, TypedValue
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset
from tests.rulefiles.test_environments import ORDERS, PROD_OVERLAY, PROJECT, write

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EMPTY_PLAN = {"format_version": 1, "summary": {"create": 0, "replace": 0, "delete": 0, "unchanged": 0},
              "changes": [], "subscriptions": [], "skipped": [], "warnings": []}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The dev/prod project (prod renames orders to orders-v2) and a sample of prod's orders-v2."""
    root = tmp_path_factory.mktemp("renamed")
    write(root / "rules", {"sbrules.yaml": PROJECT, "orders.yaml": ORDERS, "overlays/prod/orders.yaml": PROD_OVERLAY})
    store = Dataset(root / "sample")
    for i, amount in enumerate([50, 5000, 700]):
        message = Message(sys={"MessageId": TypedValue.infer(f"m{i}")}, user={"amount": TypedValue.infer(amount)})
        store.add(message_to_row(message, topic="orders-v2", subscription="all"))
    store.flush()
    (root / "plan.json").write_text(json.dumps(EMPTY_PLAN))
    return root


def test_the_impact_report_names_the_declared_topic(spark, project, run_cli, monkeypatch, output_schema):
    monkeypatch.chdir(project)
    code, out, err = run_cli("impact", "plan.json", "rules", "--env", "prod", "--traffic", "sample", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    output_schema("traffic-report").validate(doc)
    assert {(s["topic"], s.get("namespace_topic")) for s in doc["subscriptions"]} == {("orders", "orders-v2")}
    assert [(t["topic"], t["namespace_topic"]) for t in doc["topics"]] == [("orders", "orders-v2")]
    assert [(t["topic"], t["namespace_topic"]) for t in doc["routing_health"]["topics"]] == [("orders", "orders-v2")]
    assert {f["topic"] for f in doc["routing_health"]["findings"]} <= {"orders"}
    assert {c["topic"] for s in doc["subscriptions"] for c in s["changes"]} <= {"orders"}
    assert {m["topic"] for m in doc["example_messages"].values()} <= {"orders"}

    code, out, err = run_cli("impact", "plan.json", "rules", "--env", "prod", "--traffic", "sample")
    assert code == 0, err
    assert "orders/audit-eu (orders-v2 in the namespace; current rules: unchanged)" in out, out
    assert "orders (orders-v2 in the namespace): 3 sampled messages" in out, out
    assert "orders-v2/" not in out


def test_the_analysis_names_the_declared_topic(spark, project, run_cli, monkeypatch, output_schema):
    monkeypatch.chdir(project)
    code, out, err = run_cli("analyze", "rules", "--env", "prod", "--traffic", "sample", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    output_schema("analyze").validate(doc)
    assert [(t["topic"], t["namespace_topic"]) for t in doc["topics"]] == [("orders", "orders-v2")]
    assert doc["findings"] and {f["topic"] for f in doc["findings"]} == {"orders"}
    code, out, err = run_cli("analyze", "rules", "--env", "prod", "--traffic", "sample", "--format", "markdown")
    assert code == 0, err
    assert "| `orders` (`orders-v2` in the namespace) | 3 |" in out, out


def test_without_a_rename_nothing_is_shown_beside(spark, project, run_cli, monkeypatch):
    monkeypatch.chdir(project)
    code, out, err = run_cli("analyze", "rules", "--env", "dev", "--traffic", "sample", "--format", "json")
    assert code == 1 and "no messages of the declared topics (orders)" in err  # dev's orders is not prod's orders-v2
