"""Impact numbers of a known rule change on a known traffic sample (current rules from a plan file)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from reconciler.json_text import json_text
from reconciler.model import (
    DesiredState,
    Message,
    Rule,
    SqlFilter,
    Subscription,
    Topic,
    TrueFilter,
    TypedValue,
    rule_to_doc,
)
from reconciler.plan import read_plan_file
from reconciler.sql import matches
from reconciler.traffic.analysis.impact import ImpactError, impact_report
from reconciler.traffic.report.model import ImpactReport
from reconciler.traffic.report.render import render_report
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset
from reconciler.traffic.spark.failures import SampleFailure

pytestmark = pytest.mark.spark

EU_BEFORE = Rule("eu", SqlFilter("region = 'eu' OR region = 'uk'"))
EU_AFTER = Rule("eu", SqlFilter("region = 'eu'"))
BIG = Rule("big", SqlFilter("amount > 100"))
US = Rule("us", SqlFilter("region = 'us'"))
GONE = Rule("legacy", SqlFilter("sys.Label LIKE 'legacy%'"))
NEVER = Rule("never", SqlFilter("region = 'mars'"))

DESIRED = DesiredState(
    (
        Topic(
            "orders",
            (
                Subscription("eu", (EU_AFTER, BIG)),
                Subscription("us", (US, NEVER)),
                Subscription("audit", None),
            ),
        ),
    )
)


ENQUEUED = datetime(2024, 5, 1, 9, 30, tzinfo=timezone.utc)


def _message(i: int, region, amount=None, label=None) -> Message:
    user = {}
    if region is not None:
        user["Region"] = region if isinstance(region, TypedValue) else TypedValue.infer(region)
    if amount is not None:
        user["amount"] = TypedValue.infer(amount)
    sys_props = {
        "MessageId": TypedValue.infer(f"m{i:02d}"),
        "EnqueuedTimeUtc": TypedValue.infer(ENQUEUED + timedelta(minutes=7 * i)),
    }
    if label:
        sys_props["Label"] = TypedValue.infer(label)
    return Message(sys=sys_props, user=user)


MESSAGES = [
    _message(0, "eu", 50),
    _message(1, "eu", 500),
    _message(2, "uk", 10),  # lost by eu (uk no longer matches)
    _message(3, "uk", 1000),  # still delivered to eu via 'big' (gained nothing, lost nothing)
    _message(4, "us", 5),
    _message(5, "us", 150),  # gained by eu through 'big'
    _message(6, None, 7, label="legacy-x"),  # unrouted after the change
    _message(7, 5),  # region is a long: 'region = ...' is a type mismatch → error everywhere
    _message(8, "fr", 101),  # gained by eu (big)
    _message(9, "fr"),  # unrouted
]


def _plan(path) -> str:
    """A plan replacing eu's rule, creating 'big', creating 'never' and deleting 'legacy' from us."""

    def change(sub, rule, action, before, after):
        return {
            "topic": "orders",
            "subscription": sub,
            "rule": rule,
            "action": action,
            "reasons": ["test"],
            "before": rule_to_doc(before) if before else None,
            "after": rule_to_doc(after) if after else None,
        }

    fp = "sha256:" + "0" * 64
    doc = {
        "format_version": 1,
        "summary": {"create": 2, "replace": 1, "delete": 1, "unchanged": 1},
        "changes": [
            change("eu", "big", "create", None, BIG),
            change("eu", "eu", "replace", EU_BEFORE, EU_AFTER),
            change("us", "never", "create", None, NEVER),
            change("us", "legacy", "delete", GONE, None),
        ],
        "subscriptions": [
            {"topic": "orders", "subscription": s, "fingerprint": fp, "target_fingerprint": fp, "unchanged": u, "rules_after": 2}
            for s, u in (("eu", 0), ("us", 1))
        ],
        "skipped": [],
        "warnings": [],
    }
    path.write_text(json.dumps(doc))
    return str(path)


def _report(desired: DesiredState, dataset: str, plan_path: str | Path) -> ImpactReport:
    """The impact of the plan saved in ``plan_path``, as `sbrules impact PLAN.json` reports it;
    saved as JSON, it reads back as itself (``sbrules show``)."""
    report = impact_report(desired, read_plan_file(plan_path), dataset, against=str(plan_path))
    assert ImpactReport.from_json(json.loads(json_text(report.to_json()))) == report
    return report


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sample")
    store = Dataset(directory)
    for m in MESSAGES:
        store.add(message_to_row(m, topic="orders", subscription="all"))
    store.flush()
    return str(directory)


def test_known_change_on_known_traffic(spark, sample, tmp_path):
    impact = _report(DESIRED, sample, _plan(tmp_path / "plan.json"))
    report = impact.to_json()
    assert report["messages"] == 10
    eu, us = report["subscriptions"]
    assert (eu["subscription"], eu["current_rules"]) == ("eu", "plan")
    assert eu["delivered"] == 5  # m00 m01 m03 m05 m08
    assert eu["delivered_before"] == 4  # m00 m01 m02 m03
    assert (eu["gained"], eu["lost"], eu["errors"]) == (2, 1, 1)
    assert eu["examples"] == {"gained": ["m05", "m08"], "lost": ["m02"], "errors": ["m07"]}
    assert [(r["name"], r["matched"], r["errors"]) for r in eu["rules"]] == [("eu", 2, 1), ("big", 4, 0)]
    assert us["delivered"] == 2 and us["delivered_before"] == 3
    assert (us["gained"], us["lost"], us["errors"]) == (0, 1, 1)
    assert us["examples"]["lost"] == ["m06"]
    assert report["never_matching_rules"] == [{"topic": "orders", "subscription": "us", "rule": "never"}]
    # m02 (uk, small), m06 (no region), m07 (error), m09 (fr, small) reach nobody after the change.
    assert report["unrouted"] == 4
    examples = report["unrouted_examples"]
    assert len(examples) == 3 and set(examples) <= {"m02", "m06", "m07", "m09"} and examples == sorted(examples)
    assert report["skipped"][0]["subscription"] == "audit"
    assert report["python_fallback_rules"] == []

    # The same numbers from the Python evaluator, message by message.
    for sub, rules, before in (("eu", (EU_AFTER, BIG), (EU_BEFORE,)), ("us", (US, NEVER), (US, GONE))):
        new = [any(matches(r, m).matched for r in rules) for m in MESSAGES]
        old = [any(matches(r, m).matched for r in before) for m in MESSAGES]
        entry = next(s for s in report["subscriptions"] if s["subscription"] == sub)
        assert entry["delivered"] == sum(new)
        assert entry["gained"] == sum(n and not o for n, o in zip(new, old))
        assert entry["lost"] == sum(o and not n for n, o in zip(new, old))

    text = render_report(impact, "text")
    assert "orders/eu" in text and "never matches" in text
    markdown = render_report(impact, "markdown")
    assert "| `orders/eu` | 5 | 4 | +2 | -1 | 1 |" in markdown
    doc = json.loads(render_report(impact, "json"))
    assert {"messages", "unrouted", "subscriptions"} <= set(doc)
    assert set(doc["subscriptions"][0]) >= {"topic", "subscription", "delivered", "gained", "lost", "errors", "rules"}


def test_python_fallback_rule_is_reported(spark, sample, tmp_path):
    dynamic = Rule("dyn", SqlFilter("region LIKE region"))
    desired = DesiredState((Topic("orders", (Subscription("eu", (dynamic, Rule("all", TrueFilter()))),)),))
    report = _report(desired, sample, _plan(tmp_path / "plan.json")).to_json()
    (eu,) = report["subscriptions"]
    dyn = eu["rules"][0]
    assert dyn["evaluation"] == "python"
    # LIKE of a string with itself (no wildcards in these values) matches every message with a region.
    assert dyn["matched"] == sum(matches(dynamic, m).matched for m in MESSAGES)
    assert report["python_fallback_rules"][0]["rule"] == "dyn"


def test_missing_sample_and_connection_are_user_errors(sample, tmp_path, run_cli, monkeypatch):
    with pytest.raises(SampleFailure, match="holds no Parquet files"):
        _report(DESIRED, str(tmp_path), _plan(tmp_path / "plan.json"))
    # `plan --traffic` reads the live rules: the sample is checked first, before any network.
    monkeypatch.delenv("SERVICEBUS_CONNECTION_STRING", raising=False)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(RULES_YAML)
    (tmp_path / "empty").mkdir()
    code, _, stderr = run_cli("plan", rules, "--traffic", tmp_path / "empty")
    assert code == 1 and "holds no Parquet files" in stderr
    code, _, stderr = run_cli("plan", rules, "--traffic", sample)
    assert code == 64 and "connection string" in stderr and "Traceback" not in stderr


def test_topics_without_sampled_messages_are_skipped_not_never_matching(spark, sample, tmp_path):
    other = Topic("payments", (Subscription("ledger", (Rule("$Default", TrueFilter()),)),))
    desired = DesiredState(DESIRED.topics + (other,))
    report = _report(desired, sample, _plan(tmp_path / "plan.json")).to_json()
    assert [s["topic"] for s in report["subscriptions"]] == ["orders", "orders"]
    assert {"topic": "payments", "subscription": "ledger", "reason": "no sampled messages of this topic"} in report["skipped"]
    assert all(r["topic"] == "orders" for r in report["never_matching_rules"])
    only_other = DesiredState((other,))
    with pytest.raises(ImpactError, match="no messages of the declared topics"):
        _report(only_other, sample, _plan(tmp_path / "plan2.json"))


def test_topics_are_counted_apart_when_they_share_a_filter(spark, tmp_path):
    """One filter used in two topics is one outcome bit, yet each subscription counts only its own
    topic's messages, and messages no subscription of their topic takes are unrouted per topic."""
    payments = [_message(20 + i, region, amount) for i, (region, amount) in enumerate([("us", 500), ("eu", 50), ("uk", 101), (None, 1)])]
    store = Dataset(tmp_path / "sample")
    for m in MESSAGES:
        store.add(message_to_row(m, topic="orders", subscription="all"))
    for m in payments:
        store.add(message_to_row(m, topic="Payments", subscription="all"))
    store.flush()
    desired = DesiredState(
        (
            Topic("orders", (Subscription("eu", (EU_AFTER, BIG)),)),
            Topic("payments", (Subscription("big", (BIG,)),)),
        )
    )
    doc = json.loads(Path(_plan(tmp_path / "base.json")).read_text())
    doc["changes"] = [
        {"topic": "payments", "subscription": "big", "rule": "big", "action": "replace", "reasons": ["test"],
         "before": rule_to_doc(US), "after": rule_to_doc(BIG)}
    ]
    doc["subscriptions"] = [{**doc["subscriptions"][0], "topic": "payments", "subscription": "big"}]
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    report = _report(desired, str(tmp_path / "sample"), tmp_path / "plan.json").to_json()

    eu, big = report["subscriptions"]
    assert report["messages"] == len(MESSAGES) + len(payments)
    assert [r["matched"] for r in eu["rules"]] == [sum(matches(r, m).matched for m in MESSAGES) for r in (EU_AFTER, BIG)]
    assert big["rules"][0]["matched"] == sum(matches(BIG, m).matched for m in payments) == 2
    assert big["delivered_before"] == 1 and big["delivered"] == 2
    assert (big["gained"], big["lost"]) == (1, 0) and big["examples"]["gained"] == ["m22"]
    assert big["examples"]["lost"] == [] and big["errors"] == 0
    taken = [any(matches(r, m).matched for r in (EU_AFTER, BIG)) for m in MESSAGES]
    unrouted = len(taken) - sum(taken) + sum(not matches(BIG, m).matched for m in payments)
    assert report["unrouted"] == unrouted
    assert len(report["unrouted_examples"]) == 3


def test_report_carries_sample_range_examples_and_plan_changes(spark, sample, tmp_path):
    """What the HTML report shows beyond the counts comes from the report itself (and so the JSON)."""
    report = _report(DESIRED, sample, _plan(tmp_path / "plan.json")).to_json()
    assert report["time_range"] == {"first": "2024-05-01T09:30:00.000Z", "last": "2024-05-01T10:33:00.000Z"}
    assert report["topics"] == [{"topic": "orders", "messages": 10, "unrouted": 4}]

    # Every example id has its message, with the properties it was published with.
    ids = {i for s in report["subscriptions"] for b in s["examples"].values() for i in b} | set(report["unrouted_examples"])
    assert set(report["example_messages"]) == ids
    m05 = report["example_messages"]["m05"]
    assert m05["topic"] == "orders" and m05["message"]["user"] == {"Region": "us", "amount": 150}
    assert m05["message"]["sys"]["MessageId"] == "m05"
    assert m05["message"]["sys"]["EnqueuedTimeUtc"] == {"timestamp": "2024-05-01T10:05:00.000Z"}
    assert Message.from_json(report["example_messages"]["m07"]["message"]).user["Region"] == TypedValue.infer(5)

    # The plan's changes, each with what its old and new filter match on the sample.
    eu, us = report["subscriptions"]
    changes = {c["rule"]: c for c in eu["changes"]}
    assert set(changes) == {"eu", "big"}
    assert changes["eu"]["before"] == rule_to_doc(EU_BEFORE) and changes["eu"]["after"] == rule_to_doc(EU_AFTER)
    assert changes["eu"]["traffic"] == {"before": {"matched": 4, "errors": 1}, "after": {"matched": 2, "errors": 1}}
    assert changes["big"]["traffic"] == {"before": None, "after": {"matched": 4, "errors": 0}}
    legacy = next(c for c in us["changes"] if c["rule"] == "legacy")
    assert legacy["after"] is None and legacy["traffic"]["before"] == {"matched": 1, "errors": 0}


RULES_YAML = """\
topic: orders
subscriptions:
  eu:
    rules:
      - {name: eu, sql: "region = 'eu'"}
      - {name: big, sql: "amount > 100"}
  us:
    rules:
      - {name: us, sql: "region = 'us'"}
      - {name: never, sql: "region = 'mars'"}
  audit: {}
"""


def test_cli_writes_the_html_report(spark, sample, tmp_path, run_cli):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(RULES_YAML)
    plan = _plan(tmp_path / "plan.json")
    out = tmp_path / "report.html"
    code, stdout, stderr = run_cli("impact", plan, rules, "--traffic", sample, "--format", "html", "--out", out)
    assert code == 0, stderr
    assert f"wrote the traffic report to {out}" in stderr and stdout == ""
    html = out.read_text()
    assert html.startswith("<!doctype html>")
    assert "2 of 2 subscriptions change; orders/eu gains 2 and loses 1 sampled messages (4 → 5)" in html
    assert 'data-message-id="m05"' in html and "region = &#39;eu&#39; OR region = &#39;uk&#39;" in html

    code, stdout, _ = run_cli("impact", plan, rules, "--traffic", sample, "--format", "markdown")
    assert code == 0 and "```mermaid" in stdout and '"orders/eu before: 4"' in stdout

    unwritable = tmp_path / "plan.json" / "r.html"  # its directory cannot be created: plan.json is a file
    code, _, stderr = run_cli("impact", plan, rules, "--traffic", sample, "--format", "html", "--out", unwritable)
    assert code == 64 and "cannot write the traffic report" in stderr and "Traceback" not in stderr


def test_impact_reads_a_saved_plan_offline(spark, sample, tmp_path, run_cli, output_schema):
    """`sbrules impact PLAN.json` reports a saved plan's traffic in every format, with no namespace."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(RULES_YAML)
    plan = _plan(tmp_path / "plan.json")
    code, stdout, stderr = run_cli("impact", plan, rules, "--traffic", sample, "--format", "json")
    assert code == 0, stderr
    doc = json.loads(stdout)
    output_schema("traffic-report").validate(doc)
    assert doc["against"] == plan
    eu = doc["subscriptions"][0]
    assert (eu["current_rules"], eu["gained"], eu["lost"]) == ("plan", 2, 1)

    code, stdout, _ = run_cli("impact", plan, rules, "--traffic", sample, "--format", "markdown")
    assert code == 0 and "```mermaid" in stdout
    code, _, stderr = run_cli("impact", plan, rules, "--traffic", sample, "--format", "html")
    assert code == 64 and "--out" in stderr
    code, _, stderr = run_cli("impact", tmp_path / "rules" / "orders.yaml", rules, "--traffic", sample)
    assert code == 1 and "not a JSON plan file" in stderr and "Traceback" not in stderr
