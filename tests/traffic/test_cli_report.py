"""`sbrules impact --format json` prints one document, the impact report, as
schemas/traffic-report.schema.json describes; with --out it goes to the file instead."""

from __future__ import annotations

import json

import pytest

from reconciler.model import Message, Rule, SqlFilter, TypedValue, rule_to_doc
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset

pytestmark = pytest.mark.spark

RULE_FILE = """\
topic: orders
subscriptions:
  eu:
    rules:
      - {name: eu, sql: "region = 'eu'"}
  audit: {}
"""

BEFORE = Rule("eu", SqlFilter("region = 'eu' OR region = 'uk'"))


def _message(i: int, region) -> Message:
    return Message(sys={"MessageId": TypedValue.infer(f"m{i}")}, user={"region": TypedValue.infer(region)})


def test_impact_json_is_one_document(spark, run_cli, output_schema, tmp_path):
    rules = tmp_path / "orders.yaml"
    rules.write_text(RULE_FILE)
    store = Dataset(tmp_path / "sample")
    for i, region in enumerate(["eu", "uk", "us", 5]):
        store.add(message_to_row(_message(i, region), topic="orders", subscription="all"))
    store.flush()
    fingerprint = "sha256:" + "0" * 64
    plan = {
        "format_version": 2,
        "summary": {"create": 0, "replace": 1, "delete": 0, "unchanged": 0},
        "changes": [
            {"topic": "orders", "subscription": "eu", "rule": "eu", "change": "replace", "reasons": ["test"],
             "before": rule_to_doc(BEFORE), "after": {"name": "eu", "sql": "region = 'eu'"}},
        ],
        "subscriptions": [
            {"topic": "orders", "subscription": "eu", "fingerprint": fingerprint, "target_fingerprint": fingerprint,
             "unchanged": 0, "rules_after": 1, "allow_empty": False},
        ],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))

    code, out, err = run_cli("impact", tmp_path / "plan.json", rules, "--traffic", tmp_path / "sample", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    output_schema("traffic-report").validate(doc)
    (eu,) = doc["subscriptions"]
    assert (eu["delivered"], eu["delivered_before"], eu["lost"], eu["errors"]) == (1, 2, 1, 1)
    assert eu["examples"]["lost"] == ["m1"]

    # With --out the report goes to the file, and stdout stays empty.
    out_file = tmp_path / "impact.json"
    code, out, err = run_cli(
        "impact", tmp_path / "plan.json", rules, "--traffic", tmp_path / "sample", "--format", "json", "--out", out_file
    )
    assert code == 0, err
    assert out == "" and f"wrote the traffic report to {out_file}" in err
    output_schema("traffic-report").validate(json.loads(out_file.read_text()))
