"""`sbrules show FILE` prints a saved plan as `plan` printed it, in each of its formats, reading
nothing but the file (no namespace, no Spark); anything else is one line with its exit code.

Traffic documents: tests/traffic/test_report_documents.py (without Spark) and
tests/traffic/test_report_agreement.py (`impact` and `analyze` runs on Spark, every format).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import REPO, RULES

PLAN = {
    "format_version": 2,
    "summary": {"create": 0, "replace": 0, "delete": 0, "unchanged": 0},
    "changes": [],
    "subscriptions": [],
}


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_a_saved_plan_shows_as_plan_printed_it(fmt, drifted, run_cli, output_schema, monkeypatch, tmp_path):
    """One `plan` run prints the plan in ``fmt`` and saves it: `show` of the file prints the same
    (one run, so the times it counts from when it read the namespace are the same)."""
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    saved = tmp_path / "plan.json"
    code, printed, err = run_cli("plan", RULES, "--out", saved, "--format", fmt)
    assert code == 0, err
    assert "Plan:" in printed or fmt == "markdown" or json.loads(printed)["changes"]
    monkeypatch.delenv("SERVICEBUS_CONNECTION_STRING")
    code, shown, err = run_cli("show", saved, "--format", fmt)
    assert (code, err) == (0, "") and shown == printed
    if fmt == "json":
        output_schema("plan").validate(json.loads(shown))
        assert shown == saved.read_text(encoding="utf-8")


@pytest.mark.unit
def test_show_writes_to_out_and_says_so(run_cli, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    code, printed, _ = run_cli("show", plan, "--format", "markdown")
    code, out, err = run_cli("show", plan, "--format", "markdown", "--out", tmp_path / "plan.md")
    assert code == 0 and out == "" and err == f"wrote the plan to {tmp_path / 'plan.md'}\n"
    assert (tmp_path / "plan.md").read_text(encoding="utf-8") == printed


@pytest.mark.unit
@pytest.mark.parametrize(
    ("content", "args", "exit_code", "cause"),
    [
        ("not json", [], 1, r"^error: .*doc\.json: not a JSON document \(Expecting value"),
        (json.dumps([1, 2]), [], 1, r"doc\.json: not a plan, a traffic impact report or a routing-health document"),
        (json.dumps({"error": {"code": "usage", "message": "x"}}), [], 1, "not a plan, a traffic impact report"),
        (json.dumps({**PLAN, "in_sync": True, "drift": []}), [], 1, "not a plan, a traffic impact report"),
        (json.dumps({**PLAN, "format_version": 9}), [], 1, r"doc\.json: plan format_version 9 is not supported"),
        (json.dumps({"format_version": 3, "never_matching_rules": []}), ["--format", "json"], 1,
         r"doc\.json: traffic impact report format_version 3 is not supported \(this sbrules reads 1\)"),
        (json.dumps({"format_version": 1, "skipped_topics": []}), [], 1,
         r"doc\.json: malformed routing-health document: the document: '\w+' is a required property"),
        (json.dumps(PLAN), ["--format", "html", "--out", "p.html"], 64,
         r"doc\.json is a plan, shown as text, markdown, json; not as html"),
        (json.dumps(PLAN), ["--format", "html"], 64, r"--format html writes a page: give --out FILE\.html"),
    ],
)
def test_what_show_cannot_show_is_one_line(content, args, exit_code, cause, run_cli, check, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "doc.json").write_text(content, encoding="utf-8")
    code, out, err = run_cli("show", "doc.json", *args)
    check.one_error(code, out, err, exit_code, cause)
    if "json" in args:
        assert json.loads(out)["error"]["code"] == "input"


@pytest.mark.unit
def test_a_missing_file_is_a_usage_error(run_cli, check, tmp_path):
    code, out, err = run_cli("show", tmp_path / "nothing.json")
    check.one_error(code, out, err, 64, "does not exist")


def test_show_needs_no_spark_amqp_or_arrow(tmp_path):
    """A saved report and a saved plan are shown by a process that never imports pyspark, pyarrow
    or proton (so no Java either)."""
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    report = REPO / "tests" / "traffic" / "golden" / "analyze.json"
    script = (
        "import sys\n"
        "from reconciler.cli import main\n"
        f"for argv in ([{str(report)!r}, '--format', 'markdown'], [{str(tmp_path / 'plan.json')!r}]):\n"
        "    try:\n"
        "        main(['show', *argv])\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
        "heavy = sorted({'pyspark', 'pyarrow', 'proton', 'py4j'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Routing health" in done.stdout and "No changes." in done.stdout
