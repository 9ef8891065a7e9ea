"""`sbrules sql check` and `sbrules route`, run in-process through the real entry point."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

RULES = """
topic: orders
subscriptions:
  billing:
    rules:
      - name: high-value
        sql: "amount > 1000 AND currency = 'EUR'"
        action: "SET sys.Label = 'priority'"
      - name: refunds
        correlation: {subject: refund, properties: {tier: {int: 3}}}
  shipping:
    rules:
      - name: broken-types
        sql: "amount > '5'"
  audit: {}
"""


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "orders.yaml").write_text(textwrap.dedent(RULES), encoding="utf-8")
    (tmp_path / "rules" / "events.yaml").write_text(
        "topic: events\nsubscriptions:\n  all:\n    rules:\n      - {name: none, filter: false}\n", encoding="utf-8"
    )
    return tmp_path / "rules"


def write_message(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "message.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_check_prints_canonical_form(run_cli) -> None:
    code, out, _ = run_cli("sql", "check", "color='blue'  and (quantity>10)")
    assert code == 0
    assert out.strip() == "color = 'blue' AND quantity > 10"


def test_check_action(run_cli) -> None:
    code, out, _ = run_cli("sql", "check", "--action", "set a=1 remove b;")
    assert (code, out.strip()) == (0, "SET a = 1; REMOVE b")


def test_check_error_has_caret_under_the_column(run_cli) -> None:
    text = "color = 'a' AND size BETWEEN 1 AND 2"
    code, out, err = run_cli("sql", "check", text)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert "reserved word" in lines[0] and "column 22" in lines[0]
    assert lines[1].strip() == text
    assert lines[2].index("^") == lines[1].index("BETWEEN")


def test_check_json(run_cli) -> None:
    code, out, _ = run_cli("sql", "check", "--format", "json", "a=1")
    assert code == 0
    assert json.loads(out) == {
        "format_version": 1, "kind": "filter", "valid": True, "canonical": "a = 1", "diagnostic": None
    }
    code, out, _ = run_cli("sql", "check", "--format", "json", "--action", "SET sys.Size = 1")
    doc = json.loads(out)
    assert code == 1 and doc["valid"] is False and doc["kind"] == "action" and doc["canonical"] is None
    assert set(doc["diagnostic"]) == {"message", "line", "column"}
    diagnostic = doc["diagnostic"]
    assert diagnostic["line"] == 1 and diagnostic["column"] == 5 and "read-only" in diagnostic["message"]


def test_route_json_shape(run_cli, rules_dir: Path, tmp_path: Path) -> None:
    message = write_message(
        tmp_path,
        {"sys": {"Label": "refund", "MessageId": "m1"}, "user": {"amount": 1500, "currency": "EUR", "tier": {"int": 3}}},
    )
    code, out, _ = run_cli("route", rules_dir, "--message", message, "--format", "json")
    assert code == 0
    deliveries = {(d["topic"], d["subscription"]): d for d in json.loads(out)["deliveries"]}
    for delivery in deliveries.values():
        assert set(delivery) == {"topic", "subscription", "delivered", "rules", "copies"}
        assert all(set(copy) == {"rule", "sys", "user"} for copy in delivery["copies"])
    billing = deliveries[("orders", "billing")]
    assert billing["delivered"] is True
    assert billing["rules"] == [
        {"name": "high-value", "result": "true", "error": None},
        {"name": "refunds", "result": "true", "error": None},
    ]
    assert [c["rule"] for c in billing["copies"]] == [None, "high-value"]
    assert billing["copies"][1]["sys"]["Label"] == "priority"
    assert billing["copies"][1]["user"]["RuleName"] == "high-value"
    assert billing["copies"][0]["user"]["tier"] == {"int": 3}
    shipping = deliveries[("orders", "shipping")]
    assert shipping["delivered"] is False and shipping["copies"] == []
    assert shipping["rules"][0]["result"] == "error" and "string '5'" in shipping["rules"][0]["error"]
    audit = deliveries[("orders", "audit")]
    assert audit["delivered"] is True and audit["rules"] == [{"name": "$Default", "result": "true", "error": None}]
    assert deliveries[("events", "all")]["delivered"] is False


def test_route_topic_filter_and_text_output(run_cli, rules_dir: Path, tmp_path: Path) -> None:
    message = write_message(tmp_path, {"user": {"amount": 5, "currency": "EUR"}})
    code, out, _ = run_cli("route", rules_dir, "--message", message, "--topic", "ORDERS")
    assert code == 0
    assert "orders/billing: not delivered" in out
    assert "rule high-value: false" in out
    assert "orders/audit: delivered (1 copy)" in out
    assert "events/" not in out


def test_route_default_path_is_rules(run_cli, rules_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(rules_dir.parent)
    message = write_message(tmp_path, {"user": {}})
    code, out, _ = run_cli("route", "--message", message, "--format", "json")
    assert code == 0 and len(json.loads(out)["deliveries"]) == 4


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"user": {"a": {"int": 2**40}}}, "out of range"),
        ({"sys": {"Nope": 1}}, "unknown system property"),
    ],
)
def test_route_rejects_bad_messages(run_cli, rules_dir: Path, tmp_path: Path, doc: dict, words: str) -> None:
    code, _, err = run_cli("route", rules_dir, "--message", write_message(tmp_path, doc))
    assert code == 1 and words in err


def test_route_unknown_topic(run_cli, rules_dir: Path, tmp_path: Path) -> None:
    code, _, err = run_cli("route", rules_dir, "--message", write_message(tmp_path, {}), "--topic", "nope")
    assert code == 1 and "not declared" in err
