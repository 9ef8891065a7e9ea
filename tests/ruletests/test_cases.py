"""The routing test-file format (`*.test.yaml`) and `sbrules test` offline: cases, shared messages,
environments, located errors and warnings, the deciding sub-expression, and the formats."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reconciler.rulefiles import load

pytestmark = pytest.mark.unit

RULES = """
topic: orders
subscriptions:
  billing:
    rules:
      - name: big
        sql: "amount > 1000 AND currency = 'EUR'"
        action: "SET priority = 'high'"
      - name: refunds
        sql: "sys.Label = 'refund' AND amount > 0"
  audit:
    rules: [{name: $Default, filter: true}]
  shipping:
    rules: [{name: paid, sql: "sys.Label = 'order.paid'"}]
"""

ISSUE_CASES = """
cases:
  - name: a big EUR refund reaches billing and audit
    topic: orders
    given: {sys: {Label: refund}, user: {amount: {double: 1500.0}, currency: EUR}}
    expect:
      only: [billing, audit]            # or includes: [...] / excludes: [...]
      copies: {billing: [{rule: big, user: {priority: high}}]}
  - name: heartbeats reach nobody but audit
    topic: orders
    given: {sys: {Label: heartbeat}}
    expect: {only: [audit]}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """project(files) -> the rule directory, with the given files written (dedented) under it."""
    monkeypatch.chdir(tmp_path)

    def _project(**files: str) -> Path:
        for name, text in {"orders.yaml": RULES, **files}.items():
            path = tmp_path / "rules" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return tmp_path / "rules"

    return _project


def run_json(run_cli, *args: object) -> tuple[int, dict]:
    code, out, _err = run_cli("test", *args, "--format", "json")
    return code, json.loads(out)


def by_name(doc: dict) -> dict[str, dict]:
    return {case["name"]: case for case in doc["cases"]}


def test_the_issue_example_works_as_written(project, run_cli):
    project(**{"orders.test.yaml": ISSUE_CASES})
    code, doc = run_json(run_cli)
    assert code == 0, doc
    assert doc["summary"] == {"cases": 2, "passed": 2, "failed": 0, "skipped": 0, "errors": 0, "warnings": 0}
    assert sorted(by_name(doc)["a big EUR refund reaches billing and audit"]["receivers"]) == ["audit", "billing"]


def test_rule_files_commands_skip_test_files(project):
    rules = project(**{"orders.test.yaml": ISSUE_CASES, "nested/more.test.yml": ISSUE_CASES})
    result = load([rules])
    assert result.ok and result.files == 1
    assert load([rules / "orders.test.yaml", rules / "orders.yaml"]).files == 1


def test_a_failure_names_the_line_the_receivers_and_the_deciding_sub_expression(project, run_cli):
    project(**{"orders.test.yaml": """
        topic: orders
        cases:
          - name: a refund without an amount is billed
            given: {sys: {Label: refund}, user: {currency: EUR}}
            expect: {includes: [billing]}
    """})
    code, out, _ = run_cli("test")
    assert code == 1
    assert "rules/orders.test.yaml:3:5: FAIL a refund without an amount is billed (topic orders)" in out
    assert "billing: expected receives the message; actually does not receive it" in out
    assert "rule big: unknown — `amount > 1000` was UNKNOWN: `amount` absent" in out
    assert "rule refunds: unknown — `amount > 0` was UNKNOWN: `amount` absent" in out
    assert out.rstrip().endswith("0 passed, 1 failed, 0 skipped")


def test_copies_are_checked_by_rule_and_listed_properties(project, run_cli):
    project(**{"orders.test.yaml": """
        topic: orders
        cases:
          - name: wrong priority
            given: {user: {amount: 2000, currency: EUR}}
            expect: {copies: {billing: [{rule: big, user: {priority: low}}]}}
          - name: the unchanged copy
            given: {sys: {Label: refund}, user: {amount: 5, currency: EUR}}
            expect: {copies: {billing: [{rule: null, sys: {Label: refund}}]}}
    """})
    code, doc = run_json(run_cli)
    cases = by_name(doc)
    assert code == 1 and cases["the unchanged copy"]["status"] == "passed"
    (finding,) = cases["wrong priority"]["findings"]
    assert finding["expected"] == "a copy from rule 'big' with priority = string 'low'"
    assert finding["actual"] == "copy from rule 'big' with priority = string 'high'"


def test_shared_messages_are_varied_with_like(project, run_cli):
    project(**{"orders.test.yaml": """
        topic: orders
        messages:
          refund-base: {sys: {Label: refund}, user: {amount: {double: 1500.0}, currency: EUR}}
        cases:
          - name: big
            given: {like: refund-base}
            expect: {copies: {billing: [{rule: big}]}}
          - name: just under
            given: {like: refund-base, user: {amount: {double: 999.99}}}
            expect: {excludes: [shipping], copies: {billing: [{rule: null}]}}
          - name: unknown base
            given: {like: refund-bsae}
            expect: {unrouted: true}
    """})
    code, doc = run_json(run_cli)
    assert [c["status"] for c in doc["cases"]] == ["passed", "passed"]
    (error,) = doc["diagnostics"]
    assert code == 1 and error["code"] == "test-like" and (error["line"], error["column"]) == (12, 19)
    assert "refund-base" in error["message"]


def test_a_malformed_case_is_a_located_error_and_the_others_still_run(project, run_cli):
    project(**{"orders.test.yaml": """
        topic: orders
        cases:
          - name: fine
            given: {sys: {Label: order.paid}}
            expect: {only: [shipping, audit]}
          - name: bad expectation
            given: {sys: {Label: x}}
            expect: {unrouted: maybe, recieves: [audit]}
          - name: bad property
            given: {sys: {Lable: x}}
            expect: {unrouted: false}
    """})
    code, doc = run_json(run_cli)
    found = {(d["code"], d["line"], d["column"]) for d in doc["diagnostics"]}
    assert code == 1 and [c["name"] for c in doc["cases"]] == ["fine"] and doc["cases"][0]["status"] == "passed"
    assert {("type", 8, 24), ("unknown-key", 8, 31), ("test-message", 10, 12)} == found


def test_names_no_rule_mentions_are_located_warnings(project, run_cli):
    project(**{"orders.test.yaml": """
        topic: orders
        cases:
          - name: typos
            given: {user: {amout: 5, currency: EUR}}
            expect: {excludes: [biling], copies: {billing: [{rule: bgi}]}}
          - name: no such topic
            topic: ordres
            given: {}
            expect: {unrouted: true}
    """})
    _code, doc = run_json(run_cli)
    warnings = {(d["code"], d["line"]) for d in doc["diagnostics"] if d["severity"] == "warning"}
    assert warnings == {
        ("test-unknown-property", 4), ("test-unknown-subscription", 3), ("test-unknown-rule", 5), ("test-unknown-topic", 6),
    }
    assert by_name(doc)["no such topic"]["note"].startswith("topic 'ordres' is not declared")


ENVIRONMENTS = {
    "sbrules.yaml": """
        environments:
          dev: {vars: {region: eu-dev, limit: {long: 10}}}
          prod:
            vars: {region: eu, limit: {long: 1000}}
            overlays: [overlays/prod]
            topics: {orders: orders-v2}
    """,
    "orders.yaml": """
        topic: orders
        subscriptions:
          billing:
            rules:
              - {name: big, sql: "amount > ${limit} AND region = ${region}"}
          audit:
            rules: [{name: $Default, filter: true}]
    """,
    "overlays/prod/extra.yaml": """
        topic: orders
        subscriptions:
          compliance:
            rules: [{name: eu, correlation: {properties: {region: eu}}}]
    """,
    "orders.test.yaml": """
        topic: orders
        cases:
          - name: a mid-size order is big in dev only
            given: {user: {amount: 500, region: "${region}"}}
            expect: {only: [audit, billing]}
            env: [dev]
          - name: prod keeps a compliance copy
            given: {user: {amount: 5000, region: "${region}"}}
            expect: {only: [audit, billing, compliance]}
            env: [prod]
          - name: everywhere audited
            given: {}
            expect: {includes: [audit], excludes: [billing]}
    """,
}


@pytest.mark.parametrize(("env", "passed", "skipped"), [("dev", 2, 1), ("prod", 2, 1)])
def test_cases_run_under_an_environment_with_its_variables_overlays_and_renames(project, run_cli, env, passed, skipped):
    project(**ENVIRONMENTS)
    code, doc = run_json(run_cli, "--env", env)
    assert code == 0, doc
    assert (doc["summary"]["passed"], doc["summary"]["skipped"]) == (passed, skipped)


def test_a_project_with_environments_needs_env(project, run_cli):
    project(**ENVIRONMENTS)
    code, _out, err = run_cli("test")
    assert code == 64 and "--env NAME" in err


def test_formats(project, run_cli):
    project(**{"orders.test.yaml": ISSUE_CASES + """
  - name: shipping gets refunds
    topic: orders
    given: {sys: {Label: refund}}
    expect: {includes: [shipping]}
"""})
    code, out, _ = run_cli("test", "--format", "junit")
    suite = ET.fromstring(out).find("testsuite")
    assert code == 1 and (suite.get("tests"), suite.get("failures")) == ("3", "1")
    code, out, _ = run_cli("test", "--format", "github")
    (line,) = out.splitlines()
    assert line.startswith("::error file=rules/orders.test.yaml,line=13,col=5::[test-failed] shipping gets refunds: ")
    code, out, _ = run_cli("test", "--format", "markdown")
    assert out.startswith("❌ **sbrules test**: 2 passed, 1 failed, 0 skipped")
    assert "| shipping gets refunds | `rules/orders.test.yaml:13:5` | shipping |" in out


def test_no_test_files_is_an_error(project, run_cli):
    project()
    code, out, _ = run_cli("test")
    assert code == 1 and "error[no-tests]: no routing test files (*.test.yaml) found in rules" in out


COVERAGE_RULES = """
topic: orders
subscriptions:
  billing:
    rules:
      - name: big
        sql: "amount > 1000 AND currency IN ('EUR', 'USD')"
        action: "SET priority = 'high'"
      - name: refunds
        correlation: {subject: refund, properties: {tier: {int: 3}}}
"""


def test_coverage_counts_each_condition_item_field_and_statement_both_ways(project, run_cli, tmp_path):
    project(**{"orders.yaml": COVERAGE_RULES, "orders.test.yaml": """
        topic: orders
        cases:
          - {name: big EUR, given: {user: {amount: 2000, currency: EUR}}, expect: {includes: [billing]}}
          - {name: small, given: {user: {amount: 5, currency: EUR}}, expect: {excludes: [billing]}}
          - {name: refund, given: {sys: {Label: refund}, user: {tier: {int: 3}}}, expect: {includes: [billing]}}
    """})
    code, doc = run_json(run_cli, "--coverage", "--coverage-report", tmp_path / "cov.xml")
    uncovered = {(u["rule"], u["kind"], u["branch"], tuple(u["seen"])) for u in doc["coverage"]["uncovered"]}
    assert code == 0 and uncovered == {
        ("big", "condition", "currency IN ('EUR', 'USD')", ("true",)),
        ("big", "in-item", "currency IN (… 'EUR' …)", ("true",)),
        ("big", "in-item", "currency IN (… 'USD' …)", ()),
        ("refunds", "correlation-field", "properties.tier = int 3", ("true",)),
    }
    # amount > 1000 and the subject (a message without it skips the rule) decided both ways, the statement ran
    assert (doc["coverage"]["branches"], doc["coverage"]["covered"]) == (7, 3)
    lines = ET.parse(tmp_path / "cov.xml").getroot().findall(".//line")
    assert [(line.get("number"), line.get("condition-coverage")) for line in lines] == [("6", "56% (5/9)"), ("9", "75% (3/4)")]
    code, _out, err = run_cli("test", "--min-coverage", "50")
    assert code == 1 and "error: coverage 42.9% is below --min-coverage 50" in err
