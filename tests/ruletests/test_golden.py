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
