"""Issue 15's validation gaps: every violation in one pass, YAML 1.1 scalars that change type in
correlation properties, route refusing what validate refuses, one output stream."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from reconciler.lint import lint
from reconciler.rulefiles import load

pytestmark = pytest.mark.unit

MANY_MISTAKES = """\
topic: orders
subscriptions:
  billing:
    rules:
      - {name: typo, correlation: {properties: {tier: {int: 99999999999}}}}
      - {name: sql, sql: "a = = 1"}
      - {name: extra, filter: true, colour: red}
  audit:
    rules: {name: not-a-list}
  "team/ops":
    rules:
      - {name: all, filter: true}
"""


def codes_at(diagnostics) -> list[tuple[int, str]]:
    return sorted((d.origin.line, d.code) for d in diagnostics if d.severity == "error")


def test_a_schema_error_spoils_only_its_rule_or_subscription(write):
    result = load([write("orders.yaml", MANY_MISTAKES)])
    found = codes_at([*result.diagnostics, *lint(result.state)])
    assert found == [
        (5, "typed-value"), (6, "sql-syntax"), (7, "unknown-key"), (9, "type"), (10, "subscription-name"),
    ]
    # The unknown key spoils nothing: the rule is built and checked like the others.
    assert [r.name for r in result.state.topic("orders").subscription("billing").rules] == ["sql", "extra"]


def test_a_subscription_whose_every_rule_is_in_error_is_not_also_empty(write):
    path = write("t.yaml", "topic: t\nsubscriptions:\n  s:\n    rules:\n      - {name: x, sql: a, filter: true}\n")
    result = load([path])
    found = codes_at([*result.diagnostics, *lint(result.state)])
    assert found == [(5, "filter-kind")]


def test_validate_reports_them_all_on_stdout_in_one_run(run_cli, write):
    code, out, err = run_cli("validate", write("orders.yaml", MANY_MISTAKES))
    assert code == 1 and err == "" and "Traceback" not in out
    for name in ("typed-value", "sql-syntax", "unknown-key", "type", "subscription-name"):
        assert f"error[{name}]" in out, name
    assert out.rstrip().splitlines()[-1].startswith("invalid:")


AMBIGUOUS = """\
topic: orders
subscriptions:
  s:
    rules:
      - name: flags
        correlation:
          properties: {on: yes, off: Off, short: n, scale: 1e3, when: 1:30, mode: 010, quoted: 'yes', typed: {bool: true}}
"""


def test_yaml_1_1_scalars_in_correlation_properties_are_warned_with_their_type_and_the_pin(write):
    result = load([write("orders.yaml", AMBIGUOUS)])
    warned = {d.message.split("property ")[1].split(" ")[0]: d for d in result.diagnostics if d.code == "ambiguous-yaml"}
    assert set(warned) == {"'on'", "'off'", "'short'", "'scale'", "'when'", "'mode'"}
    assert all(d.severity == "warning" and d.origin.line == 7 for d in warned.values())
    assert warned["'on'"].origin.column == 28  # at the value, not the rule
    assert "the bool true" in warned["'on'"].message and "{string: 'yes'}" in warned["'on'"].message
    assert "the string '1e3'" in warned["'scale'"].message and "{double: 1000.0}" in warned["'scale'"].message
    assert "the long 90" in warned["'when'"].message and "{string: '1:30'}" in warned["'when'"].message
    assert "the long 8" in warned["'mode'"].message and "{long: 10}" in warned["'mode'"].message
    assert "the string 'n'" in warned["'short'"].message and "{bool: false}" in warned["'short'"].message


def test_an_ambiguous_scalar_inside_a_typed_map_is_warned_too(write):
    path = write("t.yaml", "topic: t\nsubscriptions:\n  s:\n    rules:\n"
                 "      - {name: r, correlation: {properties: {mode: {long: 010}}}}\n"
                 "      - {name: q, correlation: {properties: {word: {string: yes}}}}\n")
    result = load([path])
    (warned,) = [d.message for d in result.diagnostics if d.code == "ambiguous-yaml"]
    assert "'mode' is written 010" in warned and "the long 8" in warned and "the long 10" in warned
    (error,) = [d.message for d in result.diagnostics if d.severity == "error"]
    assert "'word'" in error and "yes is the bool true in YAML 1.1" in error and "'yes'" in error


def test_ambiguous_scalars_warn_but_do_not_fail_validate(run_cli, write):
    code, out, err = run_cli("validate", write("orders.yaml", AMBIGUOUS))
    assert code == 0 and err == ""
    assert out.count("warning[ambiguous-yaml]") == 6


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "rules"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_ambiguous_scalars_after_variables_and_overlays_are_located(run_cli, tmp_path):
    root = project(tmp_path, {
        "sbrules.yaml": """\
            environments:
              dev: {vars: {flag: yes}}
              prod: {vars: {flag: {bool: true}}, overlays: [overlays/prod]}
            """,
        "orders.yaml": """\
            topic: orders
            subscriptions:
              s:
                rules:
                  - {name: r, correlation: {properties: {on: "${flag}"}}}
            """,
        "overlays/prod/orders.yaml": """\
            topic: orders
            subscriptions:
              s:
                rules:
                  - {name: extra, correlation: {properties: {ready: on}}}
            """,
    })
    code, out, err = run_cli("validate", root, "--format", "json")
    assert code == 0, out
    found = sorted(
        (d["file"], d["line"], d["message"]) for d in json.loads(out)["diagnostics"] if d["code"] == "ambiguous-yaml"
    )
    assert len(found) == 2
    (base, base_line, dev), (overlay, overlay_line, prod) = found
    assert base.endswith("orders.yaml") and base_line == 5
    assert dev.startswith("environment 'dev':") and "${flag}" in dev and "sbrules.yaml:2:" in dev
    assert "the bool true" in dev and "{string: 'yes'}" in dev
    assert overlay.endswith("prod/orders.yaml") and overlay_line == 5
    assert prod.startswith("environment 'prod':") and "'ready' is written on" in prod


ROUTE_INVALID = """\
topic: orders
subscriptions:
  s:
    rules:
      - {name: all, filter: true}
      - {name: x.sbrules-tmp, sql: "a = 1"}
"""


def test_route_refuses_rule_files_that_fail_validate(run_cli, write, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO('{"user": {}}'))
    code, out, err = run_cli("route", write("orders.yaml", ROUTE_INVALID), "--message", "-")
    assert code == 1 and out == "" and "Traceback" not in err
    assert any("[rule-name]" in line and ".sbrules-tmp" in line for line in err.splitlines())


def test_route_allow_invalid_routes_through_what_could_be_read(run_cli, write, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO('{"user": {}}'))
    code, out, err = run_cli(
        "route", write("orders.yaml", ROUTE_INVALID), "--message", "-", "--allow-invalid", "--format", "json"
    )
    assert code == 0 and "1 errors" in err
    (delivery,) = json.loads(out)["deliveries"]
    assert delivery["delivered"] is True


@pytest.mark.parametrize("written", ["{double: .nan}", "{double: -.inf}", "{double: 'NaN'}", "{double: 1.0e+400}", "{float: .inf}"])
def test_nan_and_infinities_are_refused_in_rule_files_at_the_property(run_cli, write, written):
    path = write("t.yaml", f"topic: t\nsubscriptions:\n  s:\n    rules:\n      - {{name: r, correlation: {{properties: {{d: {written}}}}}}}\n")
    code, out, err = run_cli("validate", path)
    assert code == 1 and "Traceback" not in out + err
    (line,) = [line for line in out.splitlines() if "error[" in line]
    assert "typed-correlation" not in out  # no note about what a refused value would match
    written_line = path.read_text().splitlines()[4]
    column = written_line.index("{", written_line.index("d: ")) + 1
    assert f":5:{column}: error[non-finite]" in line and "'d'" in line and "finite" in line


def test_nan_is_refused_in_an_environment_variable(run_cli, tmp_path):
    root = project(tmp_path, {
        "sbrules.yaml": "environments:\n  dev: {vars: {d: {double: .nan}}}\n",
        "t.yaml": "topic: t\nsubscriptions:\n  s: {rules: [{name: all, filter: true}]}\n",
    })
    code, out, err = run_cli("validate", root)
    assert code == 1 and "Traceback" not in out + err
    assert "sbrules.yaml:2:" in err and "[non-finite]" in err and "variable 'd'" in err


def test_a_nan_the_namespace_holds_is_still_read():
    """Only declared values are refused: a live rule in a plan, or a message, may carry NaN."""
    from reconciler.model import NonFiniteValueError, TypedValue, rule_from_doc

    doc = {"name": "r", "correlation": {"properties": {"d": {"double": "nan"}}}}
    assert rule_from_doc(doc).filter.properties[0][1].type.value == "double"
    with pytest.raises(NonFiniteValueError):
        TypedValue.from_typed_form({"double": "-inf"}, finite=True)
