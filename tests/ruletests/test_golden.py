"""Golden cases recorded from a traffic sample (`--record`), and `--update` after review."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from reconciler.model import Message
from reconciler.traffic.sample.rows import message_to_row, rows_to_table

pytestmark = pytest.mark.unit

RULES = Path(__file__).resolve().parents[2] / "rules"


def write_sample(path: Path, count: int = 300, seed: int = 7) -> list[Message]:
    rng = random.Random(seed)
    labels = ["order.placed", "order.paid", "refund", "heartbeat"]
    messages = []
    for _ in range(count):
        user = {"amount": {"double": float(rng.choice([5, 999, 1500]))}, "currency": rng.choice(["EUR", "USD"]),
                "region": rng.choice(["eu-west", "us-east"])}
        if rng.random() < 0.2:
            user["test"] = True
        messages.append(Message.from_json({"sys": {"Label": rng.choice(labels)}, "user": user}))
    rows = [message_to_row(m, topic="orders", subscription="audit") for m in messages]
    pq.write_table(rows_to_table(rows), path)
    return messages


def test_recorded_cases_pin_todays_routing_one_per_outcome(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_sample(tmp_path / "sample.parquet")
    out = tmp_path / "golden.test.yaml"
    code, text, err = run_cli("test", RULES, "--record", tmp_path / "sample.parquet", "--out", out)
    assert code == 0, err
    doc = yaml.safe_load(out.read_text())
    outcomes = [json.dumps([c["topic"], c["expect"]], sort_keys=True) for c in doc["cases"]]
    assert len(outcomes) == len(set(outcomes)) > 3 and text.strip() == f"recorded {len(outcomes)} cases in {out}"
    assert any("copies" in c["expect"] for c in doc["cases"])
    code, text, _ = run_cli("test", RULES, out)
    assert code == 0 and text.strip().endswith(f"{len(outcomes)} passed, 0 failed, 0 skipped")

    code, _text, _ = run_cli("test", RULES, "--record", tmp_path / "sample.parquet", "--out", out, "--per-outcome", "3")
    assert len(yaml.safe_load(out.read_text())["cases"]) > len(outcomes)


def test_update_rewrites_the_failing_expectations(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    for file in RULES.glob("*.yaml"):
        if not file.name.endswith(".test.yaml"):
            (rules / file.name).write_text(file.read_text())
    write_sample(tmp_path / "sample.parquet")
    golden = rules / "golden.test.yaml"
    assert run_cli("test", rules, "--record", tmp_path / "sample.parquet", "--out", golden)[0] == 0
    orders = rules / "orders.yaml"
    orders.write_text(orders.read_text().replace("amount > 1000 AND currency = 'EUR'", "amount > 1 AND currency = 'EUR'"))
    code, text, _ = run_cli("test", rules)
    assert code == 1 and "FAIL" in text
    code, _text, err = run_cli("test", rules, "--update")
    assert code == 1 and f"updated the failing cases' expectations in {golden}" in err
    code, text, _ = run_cli("test", rules)
    assert code == 0, text


def test_record_needs_out_named_as_a_test_file(run_cli, tmp_path):
    write_sample(tmp_path / "sample.parquet", count=5)
    code, _out, err = run_cli("test", RULES, "--record", tmp_path / "sample.parquet")
    assert code == 64 and "--record SAMPLE needs --out FILE" in err
    code, _out, err = run_cli("test", RULES, "--record", tmp_path / "sample.parquet", "--out", tmp_path / "x.yaml")
    assert code == 64 and "name it *.test.yaml" in err


COMMENTED = """\
# yaml-language-server: $schema=../schemas/rule-tests.schema.json
# Order routing that must stay true.
topic: orders
messages:
  placed: {sys: {Label: order.placed}, user: {amount: {double: 250.0}, currency: EUR, region: eu-west}}  # the base
cases:
  # kept as written
  - name: a paid EU order goes to shipping
    given: {sys: {Label: order.paid}, user: {region: eu-north}}
    expect:
      includes: [shipping]   # the carrier rule
  - name: a big order, wrongly expected to reach nobody
    given: {like: placed, user: {amount: {double: 1500.0}, note: 'yes'}}   # quoted on purpose
    expect: {unrouted: true}   # stale
  - {name: heartbeats, given: {sys: {Label: heartbeat}}, expect: {only: [shipping]}}
"""


def test_update_keeps_the_comments_and_the_layout_of_the_file(run_cli, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    for file in RULES.glob("*.yaml"):
        if not file.name.endswith(".test.yaml"):
            (rules / file.name).write_text(file.read_text())
    tests = rules / "orders.test.yaml"
    tests.write_text(COMMENTED)
    code, _text, err = run_cli("test", rules, "--update")
    assert code == 1 and f"updated the failing cases' expectations in {tests}" in err
    after = tests.read_text()
    before_lines, after_lines = COMMENTED.splitlines(), after.splitlines()
    # Every line but the two stale expectations is as it was, comments and quotes included.
    unchanged = [line for line in before_lines if "stale" not in line and "heartbeats" not in line]
    assert [line for line in after_lines if line in unchanged] == unchanged
    assert "# stale" in after and "{only: [" in next(line for line in after_lines if "stale" in line)
    assert next(line for line in after_lines if "heartbeats" in line).startswith("  - {name: heartbeats, ")
    assert "expect: {only: [audit, " in next(line for line in after_lines if "heartbeats" in line)
    code, text, _ = run_cli("test", rules)
    assert code == 0, text


def test_update_quotes_a_new_string_yaml_1_1_would_read_as_something_else():
    from reconciler.golden import _as_written

    written = _as_written({"only": ["yes", "010", "billing"], "unrouted": True}, flow=True)
    assert [type(v).__name__ for v in written["only"]] == ["SingleQuotedScalarString", "SingleQuotedScalarString", "str"]
    assert written.fa.flow_style() and written["unrouted"] is True
