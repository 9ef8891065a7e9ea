"""`sbrules validate` end to end: exit codes, formats, golden JSON, fuzzing, no JVM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden") / "validate.json"

GOLDEN_RULES = {
    "rules/orders.yaml": """\
topic: orders
subscriptions:
  billing:
    rules:
      - name: high-value
        sql: "amount > 1000 AND AND currency = 'EUR'"
      - name: refunds
        correlation: {subject: refund, properties: {tier: 3}}
  audit: {}
  empty:
    rules: []
""",
    "rules/payments.yaml": """\
topic: payments
subscriptions:
  fraud:
    rules:
      - {name: "bad/name", filter: true}
      - {name: $Default, filter: true}
    colour: red
""",
}


@pytest.mark.unit
def test_example_rules_validate_clean(run_cli, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out, err = run_cli("validate", "rules/")
    assert code == 0, out + err
    assert "valid:" in out and "0 errors" in out and "warning" not in out.split("valid:")[0]


@pytest.mark.unit
def test_default_path_is_rules_dir(run_cli, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    assert run_cli("validate")[0] == 0
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("validate")
    assert code == 64 and "no ./rules directory" in err


@pytest.mark.unit
def test_missing_path_is_a_usage_error(run_cli, tmp_path):
    assert run_cli("validate", tmp_path / "nope")[0] == 64


def _golden_tree(tmp_path: Path) -> None:
    for name, text in GOLDEN_RULES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.unit
def test_json_output_matches_golden(run_cli, monkeypatch, tmp_path):
    _golden_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli("validate", "rules", "--format", "json")
    assert code == 1
    doc = json.loads(out)
    if os.environ.get("SBRULES_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(doc, indent=2) + "\n")
    assert doc == json.loads(GOLDEN.read_text())


@pytest.mark.unit
def test_text_output_has_location_and_caret(run_cli, monkeypatch, tmp_path):
    _golden_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("validate", "rules")
    assert code == 1 and err == ""  # the findings are validate's result: stdout, valid or not
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if "sql-syntax" in line)
    assert lines[head].startswith("rules/orders.yaml:6:33:")
    assert lines[head + 1].strip() == "amount > 1000 AND AND currency = 'EUR'"
    caret = lines[head + 2]
    assert caret.strip() == "^" and caret.index("^") == lines[head + 1].index("AND AND") + 4
    assert "payments.yaml:7:5: error[unknown-key]" in out
    assert lines[-1].startswith("invalid:")


@pytest.mark.unit
def test_github_annotations(run_cli, monkeypatch, tmp_path):
    _golden_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli("validate", "rules", "--format", "github")
    assert code == 1
    assert "::error file=rules/payments.yaml,line=7,col=5::[unknown-key] unknown key 'colour'" in out
    assert "::warning file=rules/orders.yaml,line=8,col=59::[ambiguous-integer]" in out


yaml_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.sampled_from(["topic", "subscriptions", "rules", "name", "sql", "correlation", "filter", "action", "properties", "int", "s", "x"]),
            children,
            max_size=4,
        ),
    ),
    max_leaves=20,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=yaml_values)
def test_fuzz_random_documents_never_crash(run_cli, tmp_path_factory, doc):
    import yaml

    path = tmp_path_factory.mktemp("fz") / "f.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = run_cli("validate", path, "--format", "json")
    report = json.loads(out)
    assert code == (0 if report["valid"] else 1)
    assert "Traceback" not in err


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_fuzz_random_bytes_exit_1_with_a_message(run_cli, tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fz") / "f.yaml"
    path.write_bytes(data)
    code, out, err = run_cli("validate", path)
    assert code in (0, 1)
    if code == 1:
        assert "error[" in out
    assert "Traceback" not in out + err


def test_cli_import_and_validate_do_not_load_pyspark():
    script = (
        "import sys\n"
        "from reconciler.cli import main\n"
        "try:\n"
        "    main(['validate', 'rules', '--format', 'json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'pyspark' not in sys.modules, 'pyspark imported'\n"
        "assert 'proton' not in sys.modules, 'proton imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_validate_without_the_proofs_does_not_load_the_solver():
    script = (
        "import sys\n"
        "from reconciler.cli import main\n"
        "try:\n"
        "    main(['validate', 'rules', '--static-budget', '0'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'z3' not in sys.modules, 'z3 imported'\n"
        "try:\n"
        "    main(['validate', 'rules'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'z3' in sys.modules, 'the proofs ran without the solver'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_python_dash_m_entry_point():
    done = subprocess.run([sys.executable, "-m", "reconciler", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and "sbrules" in done.stdout


@pytest.mark.unit
def test_the_rule_file_example_of_the_docs_is_valid(run_cli, tmp_path):
    page = (REPO / "docs" / "rule-files.md").read_text()
    example = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.yaml"
    path.write_text(example)
    code, out, err = run_cli("validate", path, "--format", "json")
    report = json.loads(out)
    assert code == 0, report
    assert report["summary"]["subscriptions"] == 5 and report["summary"]["rules"] == 6


@pytest.mark.unit
def test_exit_codes_from_ctx_exit_are_kept(run_cli):
    import click

    from reconciler.cli import cli

    @cli.command("test-exit-code")
    @click.pass_context
    def _exit_three(ctx):
        ctx.exit(3)

    try:
        assert run_cli("test-exit-code")[0] == 3
    finally:
        cli.commands.pop("test-exit-code")



@pytest.mark.unit
def test_names_the_service_refuses_fail_validate_at_the_name(run_cli, write):
    path = write(
        "orders.yaml",
        'topic: "orders#eu"\nsubscriptions:\n  "team/billing":\n    rules:\n      - {name: x.SBRULES-TMP, filter: true}\n',
    )
    code, out, err = run_cli("validate", path)
    assert code == 1 and "Traceback" not in out + err
    lines = (out + err).splitlines()
    assert any(":1:8: error[topic-name]" in line and "contains #" in line for line in lines)
    assert any(":3:3: error[subscription-name]" in line and "contains /" in line for line in lines)
    assert any(":5:9: error[rule-name]" in line and ".sbrules-tmp" in line for line in lines)


ISSUE_15_REPRODUCTIONS = """\
topic: orders
subscriptions:
  "team/billing?#":
    rules:
      - {name: x.sbrules-tmp, filter: true}
  sssssssssssssssssssssssssssssssssssssssssssssssssss:
    rules:
      - {name: flags, correlation: {properties: {on: yes, scale: 1e3, when: 1:30}}}
      - {name: nan, correlation: {properties: {d: {double: .nan}}}}
      - {name: typo, correlation: {properties: {tier: {int: 99999999999}}}}
      - {name: sql, sql: "a = = 1"}
"""


@pytest.mark.unit
@pytest.mark.parametrize("command", [["validate"], ["plan"], ["route", "--message", "-"]], ids=lambda c: c[0])
def test_what_the_service_would_refuse_is_refused_offline_in_one_pass(run_cli, write, command, monkeypatch):
    """Every reproduction of issue 15's validation gaps, in one file: one run reports all of them,
    and the commands that would act on the files refuse them (exit 1) without touching the network."""
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO('{"user": {}}'))
    path = write("orders.yaml", ISSUE_15_REPRODUCTIONS)
    namespace = ["--connection-string", "Endpoint=sb://x/;SharedAccessKeyName=a;SharedAccessKey=b"]
    code, out, err = run_cli(*command, path, *(namespace if command == ["plan"] else []))
    assert code == 1 and "Traceback" not in out + err
    report = out if command == ["validate"] else err
    lines = report.splitlines()
    for code_name, words in [
        ("subscription-name", "contains # / ?"),
        ("subscription-name", "limit is 50"),
        ("rule-name", ".sbrules-tmp"),
        ("ambiguous-yaml", "'on' is written yes"),
        ("ambiguous-yaml", "'scale' is written 1e3"),
        ("ambiguous-yaml", "'when' is written 1:30"),
        ("non-finite", "'d'"),
        ("typed-value", "'tier'"),
        ("sql-syntax", "'sql'"),
    ]:
        if code_name == "ambiguous-yaml" and command != ["validate"]:
            continue  # a warning: plan and route show the errors that stop them
        assert any(f"[{code_name}]" in line and words in line for line in lines), (code_name, words)


@pytest.mark.unit
def test_json_diagnostics_are_folded_per_code_as_text_is(run_cli, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    subscriptions = {f"s{i}": {"rules": [{"name": "r", "sql": f"n = {i}"}]} for i in range(40)}
    (rules / "t.yaml").write_text(json.dumps({"topic": "t", "subscriptions": subscriptions}))
    folded = json.loads(run_cli("validate", rules, "--format", "json", "--static-budget", "0")[1])
    every = json.loads(run_cli("validate", rules, "--format", "json", "--static-budget", "0", "--verbose")[1])
    notes = [d for d in every["diagnostics"] if d["code"] == "default-removed"]
    assert len(notes) == 40 and folded["summary"] == every["summary"] and every["summary"]["info"] >= 40
    (one,) = [d for d in folded["diagnostics"] if d["code"] == "default-removed"]
    assert one["message"].startswith("40 notes like this first one (--verbose lists them)")
