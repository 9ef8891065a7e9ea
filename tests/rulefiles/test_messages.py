"""Messages that tell the truth: a misspelt variable is one error with "did you mean" (not also a SQL
error), a key pasted where a variable name belongs never reaches the output, and `--` in SQL, which
is not a comment there, is a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

KEY = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEF="


def _project(root: Path, sql: str) -> Path:
    rules = root / "rules"
    rules.mkdir()
    (rules / "sbrules.yaml").write_text("environments:\n  dev:\n    vars: {region: eu}\n")
    (rules / "orders.yaml").write_text(f'topic: orders\nsubscriptions:\n  a:\n    rules:\n      - name: r\n        sql: "{sql}"\n')
    return rules


def test_a_misspelt_variable_is_one_error_with_did_you_mean(tmp_path, run_cli):
    rules = _project(tmp_path, "region = ${regoin} AND x = 1")
    code, out, _ = run_cli("validate", rules, "--env", "dev")
    assert code == 1
    errors = [line for line in out.splitlines() if "error[" in line]
    assert len(errors) == 1 and errors[0].endswith("error[variable]: undefined variable 'regoin'; did you mean 'region'?"), out
    assert "unused-variable" not in out  # the variable suggested is the one the reference was meant for


def test_a_key_pasted_where_a_variable_name_belongs_is_redacted(tmp_path, run_cli):
    secret = f"Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey={KEY}"
    rules = _project(tmp_path, "region = ${" + secret + "}")
    for fmt in ("text", "json", "github", "markdown"):
        code, out, err = run_cli("validate", rules, "--env", "dev", "--format", fmt)
        assert code == 1 and KEY not in out + err, fmt
        assert "<redacted>" in out or fmt in ("github", "markdown"), fmt  # these quote no SQL
    assert not json.loads(run_cli("validate", rules, "--env", "dev", "--format", "json")[1])["valid"]


@pytest.mark.parametrize(
    "sql, warned",
    [
        ("x = 1 -- eu", True),
        ("x = 1 --eu", True),
        ("region = '--' AND x = 1", False),
        ("[a--b] = 1", False),
        ("x = 1 - -2", False),
    ],
)
def test_a_double_dash_is_not_a_comment(tmp_path, run_cli, sql, warned):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(f'topic: orders\nsubscriptions:\n  a:\n    rules:\n      - name: r\n        sql: "{sql}"\n')
    code, out, _ = run_cli("validate", rules)
    assert code == 0
    assert ("warning[sql-dash-comment]" in out) is warned, out


def test_multi_line_sql_is_written_as_a_literal_block_and_reads_back_the_same():
    import yaml

    from reconciler.rulefiles.render import dump_rule_file

    for text in ("a = 1\nAND b = 2", "SET a = 1;\nSET b = 2\n", "tab\there\nx", "one line"):
        written = dump_rule_file({"sql": text})
        assert yaml.safe_load(written)["sql"] == text
        if "\t" not in text and "\n" in text:
            assert written.startswith("sql: |"), written


def test_yaml_errors_keep_their_context_and_name_a_tab_and_cause_no_knock_on_warnings(tmp_path, run_cli):
    rules = _project(tmp_path, "region = ${region}")
    (rules / "orders.yaml").write_text("topic: orders\nsubscriptions:\n\ta: {}\n")
    (rules / "payments.yaml").write_text('topic: x\nsubscriptions:\n  a:\n    rules:\n      - name: "unterminated\n')
    code, out, _ = run_cli("validate", rules, "--env", "dev")
    assert code == 1
    assert ("rules/orders.yaml:3:1: error[yaml]: malformed YAML: while scanning for the next token at line 3, column 1: "
            "found character that cannot start any token (a tab: YAML indents with spaces only)") in out
    assert "payments.yaml:6:1: error[yaml]: malformed YAML: while scanning a quoted scalar at line 5, column 15: found unexpected end of stream" in out
    assert "unused-variable" not in out  # the unreadable file may be the one that uses 'region'


@pytest.mark.parametrize(
    "sql, hinted",
    [("a = 1 -- eu only", True), ("a = 1 -- see ticket 42)", True), ("a = '--' AND", False), ("a = = 1", False)],
)
def test_a_syntax_error_in_sql_with_a_double_dash_says_it_is_not_a_comment(tmp_path, run_cli, sql, hinted):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(f'topic: orders\nsubscriptions:\n  a:\n    rules:\n      - name: r\n        sql: "{sql}"\n')
    code, out, _ = run_cli("validate", rules)
    assert code == 1 and "error[sql-syntax]" in out, out
    assert ("'--' is not a comment in Service Bus SQL" in out) is hinted, out
