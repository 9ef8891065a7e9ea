"""A rule that matched nothing names its near misses in the sample: the value as another type, a
string differing only in case, a system property given as an application property; and every
finding cites its own topic's sample, not the whole sample's."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from reconciler.model import Message, Rule, SqlFilter, TypedValue, ValueType
from reconciler.traffic.analysis.near_misses import Equality, classify, equalities
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset

RULES = """\
topic: jobs
subscriptions:
  retries:
    rules:
      - {name: first-attempt, correlation: {properties: {attempt: {long: 1}}}}
      - {name: eu, sql: "region = 'eu'"}
      - {name: orders, correlation: {properties: {Label: order}}}
      - {name: three, sql: "code = '3'"}
      - {name: any, sql: "attempt > 0"}
"""
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _write(root: Path) -> None:
    (root / "rules").mkdir()
    (root / "rules" / "jobs.yaml").write_text(RULES, encoding="utf-8")
    store = Dataset(root / "sample")
    for i in range(20):
        user = {"attempt": TypedValue(ValueType.INT, 1), "region": TypedValue.infer("EU" if i < 5 else "us")}
        if i < 3:
            user["code"] = TypedValue.infer(3)
        system = {
            "MessageId": TypedValue.infer(f"job-{i:02d}"), "Label": TypedValue.infer("order" if i < 7 else "ping"),
            "EnqueuedTimeUtc": TypedValue.infer(START + dt.timedelta(seconds=10 * i)),
            "SequenceNumber": TypedValue.infer(i + 1),
        }
        store.add(message_to_row(Message(sys=system, user=user), topic="jobs", subscription="all"))
    for i in range(80):  # another topic's messages: not the population of a jobs finding
        system = {"MessageId": TypedValue.infer(f"other-{i}"), "SequenceNumber": TypedValue.infer(i + 1)}
        store.add(message_to_row(Message(sys=system, user={}), topic="other", subscription="all"))
    store.flush()


@pytest.mark.unit
def test_what_counts_as_a_near_miss():
    strict = Equality("attempt", TypedValue(ValueType.LONG, 1), True)
    sql = Equality("attempt", TypedValue(ValueType.LONG, 1), False)
    assert classify(strict, "int", "1") == "type"
    assert classify(sql, "int", "1") is None  # SQL compares numbers by value: a match, not a miss
    assert classify(sql, "string", "1") == "type"
    assert classify(strict, "long", "1") is None
    text = Equality("region", TypedValue.infer("eu"), False)
    assert classify(text, "string", "EU") == "case" and classify(text, "string", "eu") is None
    assert classify(text, "sys", "sys.Label") == "system-property"
    assert equalities(Rule("r", SqlFilter("region = 'eu' AND sys.Label = 'x'"))) == [text]
    assert equalities(Rule("r", SqlFilter("region = 'eu' OR a = 1"))) == []


@pytest.mark.spark
@pytest.mark.slow
def test_never_matched_names_its_near_misses_with_counts_and_examples(spark, run_cli, monkeypatch, tmp_path, output_schema):
    _write(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("analyze", "rules", "--traffic", "sample", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    output_schema("analyze").validate(doc)
    never = {f["rule"]: f for f in doc["findings"] if f["code"] == "never-matched"}
    assert set(never) == {"first-attempt", "eu", "orders", "three"}
    for finding in never.values():  # the topic's 20 messages over its 190 s, not the sample's 100
        assert (finding["evidence"]["sample_messages"], finding["evidence"]["sample_seconds"]) == (20, 190.0)
        assert "none of the 20 sampled messages of jobs (190 s of traffic)" in finding["message"]

    def misses(rule):
        return [(m["cause"], m["property"], m["type"], m["value"], m["count"]) for m in never[rule]["evidence"]["near_misses"]]

    assert misses("first-attempt") == [("type", "attempt", "int", "1", 20)]
    assert "20 carry attempt as int 1, not long 1 (e.g. job-00, " in never["first-attempt"]["message"]
    assert misses("eu") == [("case", "region", "string", "EU", 5)]
    assert misses("orders") == [("system-property", "sys.Label", "string", "order", 7)]
    assert misses("three") == [("type", "code", "long", "3", 3)]
    examples = never["three"]["evidence"]["near_misses"][0]["examples"]
    assert examples == ["job-00", "job-01", "job-02"] and set(examples) <= set(doc["example_messages"])

    code, text, err = run_cli("analyze", "rules", "--traffic", "sample")
    assert code == 0, err
    assert "near misses: 5 carry region as string EU, not string eu (e.g." in text
