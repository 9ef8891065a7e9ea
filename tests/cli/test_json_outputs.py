"""Every `--format json` output is one document that its schema under schemas/ accepts, checked on
real runs of the commands (against the emulator where they need a namespace).

A command that gains a JSON output adds its schema to schemas/ (and to OUTPUT_SCHEMAS below) and a
test here that runs it; test_every_json_output_has_a_schema fails until it does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest

from reconciler.cli import cli
from tests.readme.pages import table

from .conftest import RULES, SCHEMAS_DIR

#: command path → the schema (schemas/<name>.schema.json) of what it prints with --format json; or
#: the schemas of the documents it prints again (show).
OUTPUT_SCHEMAS: dict[str, str | tuple[str, ...]] = {
    "validate": "validate",
    "analyze": "analyze",  # run in tests/traffic/test_analyze.py (it needs Spark)
    "plan": "plan",
    "impact": "traffic-report",  # run in tests/traffic/test_impact.py (it needs Spark)
    "drift": "drift",
    "apply": "apply",
    "export": "export",
    "route": "route",
    "test": "test",
    "rules list": "rules",
    "sample": "sample",
    "sql check": "sql-check",
    "topics": "topics",
    "subscriptions": "subscriptions",
    "show": ("plan", "traffic-report", "analyze"),  # run in tests/cli/test_show.py and tests/traffic
}


def schemas_of(command: str) -> tuple[str, ...]:
    named = OUTPUT_SCHEMAS[command]
    return named if isinstance(named, tuple) else (named,)


def json_commands(group: click.Group = cli, prefix: str = "") -> list[str]:
    """Every command (by path) that offers --format json."""
    found = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found += json_commands(command, path + " ")
            continue
        for param in command.params:
            if "--format" in getattr(param, "opts", ()) and "json" in getattr(param.type, "choices", ()):
                found.append(path)
    return found


def one_document(out: str) -> dict:
    """stdout parsed as exactly one JSON document (json.loads refuses trailing data)."""
    return json.loads(out)


@pytest.mark.unit
def test_every_json_output_has_a_schema():
    assert sorted(json_commands()) == sorted(OUTPUT_SCHEMAS)
    for name in {name for command in OUTPUT_SCHEMAS for name in schemas_of(command)} | {"error"}:
        assert (SCHEMAS_DIR / f"{name}.schema.json").is_file(), name


@pytest.mark.unit
def test_the_docs_name_each_output_schema():
    """docs/output.md "Output, errors and exit codes": one row per command, naming its schema file."""
    listed = {}
    for command, schema, *_ in table("| command | schema |"):
        name = re.search(r"`sbrules ([a-z ]+)`", command)
        if name:
            listed[name.group(1)] = tuple(re.findall(r"schemas/([a-z-]+)\.schema\.json", schema))
    assert listed == {command: schemas_of(command) for command in OUTPUT_SCHEMAS}


@pytest.mark.unit
def test_every_schema_is_valid_and_named_by_its_file(output_schema):
    for path in SCHEMAS_DIR.glob("*.schema.json"):
        validator = output_schema(path.name.removesuffix(".schema.json"))
        type(validator).check_schema(validator.schema)
        assert validator.schema["$id"].endswith("/schemas/" + path.name)


@pytest.mark.unit
def test_validate(run_cli, output_schema, tmp_path):
    code, out, _ = run_cli("validate", RULES, "--format", "json")
    doc = one_document(out)
    output_schema("validate").validate(doc)
    assert code == 0 and doc["valid"] is True and "traffic" not in doc

    broken = tmp_path / "broken.yaml"
    broken.write_text("topic: t\nsubscriptions:\n  s:\n    rules:\n      - {name: a/b, sql: 'x >'}\n  e: {rules: []}\n")
    code, out, _ = run_cli("validate", broken, "--format", "json")
    doc = one_document(out)
    output_schema("validate").validate(doc)
    assert code == 1 and doc["valid"] is False and doc["summary"]["errors"] == 3


@pytest.mark.unit
@pytest.mark.parametrize(
    "traffic", [("--traffic", "samples"), ("--traffic=samples", "--against", "plan.json"), ("--traffic", "s", "--out", "r.html")],
    ids=" ".join,
)
def test_validate_is_offline_and_names_where_the_traffic_report_went(traffic, run_cli):
    # Also with the options only the old traffic report took: those are not what the person must hear about.
    code, out, _ = run_cli("validate", RULES, *traffic, "--format", "json")
    error = one_document(out)["error"]
    assert code == 64 and error["code"] == "usage"
    assert "`sbrules plan --traffic DATASET`" in error["message"] and "`sbrules impact PLAN.json --traffic DATASET`" in error["message"]


@pytest.mark.unit
def test_sql_check(run_cli, output_schema):
    for args, expected_code in ((["a=1"], 0), (["--action", "SET sys.Size = 1"], 1), (["a = = 1"], 1)):
        code, out, _ = run_cli("sql", "check", "--format", "json", *args)
        output_schema("sql-check").validate(one_document(out))
        assert code == expected_code


@pytest.mark.unit
def test_route(run_cli, output_schema, tmp_path):
    message = tmp_path / "msg.json"
    message.write_text('{"sys": {"Label": "refund"}, "user": {"amount": "many", "tier": {"int": 3}, "region": "eu"}}')
    code, out, _ = run_cli("route", RULES, "--message", message, "--format", "json")
    doc = one_document(out)
    output_schema("route").validate(doc)
    results = {r["result"] for d in doc["deliveries"] for r in d["rules"]}
    assert code == 0 and {"true", "false", "error"} <= results


@pytest.mark.unit
def test_test(run_cli, output_schema, tmp_path):
    failing = tmp_path / "failing.test.yaml"
    failing.write_text(
        "cases:\n- {name: n, topic: orders, given: {sys: {Label: refund}}, expect: {only: [shipping]}}\n"
        "- {name: o, topic: orders, given: {sys: {Label: refund}}, expect: {includes: [audit]}}\n"
        "- {name: m, given: {}, expect: {unrouted: true}}\n"
    )
    code, out, _ = run_cli("test", RULES, failing, "--format", "json", "--coverage", "--mutate")
    doc = one_document(out)
    output_schema("test").validate(doc)
    assert doc["coverage"]["uncovered"] and doc["mutation"]["survivors"]
    statuses = {c["status"] for c in doc["cases"]}
    assert code == 1 and statuses == {"passed", "failed"} and doc["summary"]["errors"] == 1
    assert any(f["rules"] for c in doc["cases"] for f in c["findings"])


def test_plan_drift_rules_list_topics_and_subscriptions_against_a_namespace(drifted, run_cli, output_schema, monkeypatch, tmp_path):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    code, out, _ = run_cli("plan", RULES, "--format", "json", "--out", tmp_path / "plan.json")
    doc = one_document(out)
    output_schema("plan").validate(doc)
    assert code == 0 and doc["changes"] and doc == json.loads((tmp_path / "plan.json").read_text())

    code, out, _ = run_cli("drift", RULES, "--format", "json")
    doc = one_document(out)
    output_schema("drift").validate(doc)
    assert code == 2 and doc["in_sync"] is False and len(doc["drift"]) == len(doc["changes"])

    code, out, _ = run_cli("rules", "list", "--topic", "orders", "--subscription", "billing", "--format", "json")
    doc = one_document(out)
    output_schema("rules").validate(doc)
    assert code == 0 and doc["topic"] == "orders" and doc["subscriptions"]["billing"]["rules"]

    code, out, _ = run_cli("topics", "--format", "json")
    doc = one_document(out)
    output_schema("topics").validate(doc)
    assert code == 0 and [t["name"] for t in doc["topics"]] == ["orders", "payments"]

    code, out, _ = run_cli("subscriptions", "--topic", "orders", "--format", "json")
    doc = one_document(out)
    output_schema("subscriptions").validate(doc)
    assert code == 0 and "billing" in {s["name"] for s in doc["subscriptions"]}


def test_sample(drifted, run_cli, output_schema, tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(drifted.connection_string, retry_total=0) as client:
        with client.get_topic_sender("orders") as sender:
            sender.send_messages([ServiceBusMessage("x", application_properties={"n": i}, message_id=f"m{i}") for i in range(3)])
    code, out, err = run_cli(
        "sample", "--topic", "orders", "--subscription", "audit", "--out", tmp_path / "sample",
        "--connection-string", drifted.connection_string, "--format", "json",
    )
    doc = one_document(out)
    output_schema("sample").validate(doc)
    assert code == 0 and doc["written"] == 3, err


def test_apply_and_export_are_one_document_each(drifted, run_cli, output_schema, monkeypatch, tmp_path):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    code, out, err = run_cli("apply", RULES, "--auto-approve", "--format", "json")
    doc = one_document(out)
    output_schema("apply").validate(doc)
    assert code == 0 and doc["ok"] and doc["outcome"] == "complete" and doc["summary"]["applied"] == 5, err
    assert "Plan: 1 to create" in err  # the plan it made goes to stderr, stdout is the report alone
    applied = {(s["topic"], s["subscription"]): s for s in doc["subscriptions"]}
    assert applied[("orders", "billing")]["applied"] == [{"rule": "$Default", "change": "delete"}]
    code, out, _ = run_cli("apply", RULES, "--auto-approve", "--format", "json")
    doc = one_document(out)
    output_schema("apply").validate(doc)
    assert code == 0 and doc["subscriptions"] == [] and doc["summary"]["applied"] == 0

    code, out, err = run_cli("export", "--all", "--format", "json", "--out", tmp_path / "exported")
    doc = one_document(out)
    output_schema("export").validate(doc)
    assert code == 0 and [d["topic"] for d in doc["topics"]] == ["orders", "payments"], err
    assert sorted(Path(f).name for f in doc["files"]) == ["orders.yaml", "payments.yaml"]
    code, out, _ = run_cli("export", "--topic", "orders", "--subscription", "billing", "--format", "json")
    doc = one_document(out)
    output_schema("export").validate(doc)
    assert code == 0 and doc["files"] == [] and list(doc["topics"][0]["subscriptions"]) == ["billing"]
