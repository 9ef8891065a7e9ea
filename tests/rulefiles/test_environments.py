"""Environments (sbrules.yaml): variables, overlays, topic renames, render, and their located errors."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.model import CorrelationFilter, SqlFilter, TypedValue, ValueType
from reconciler.rulefiles import RuleFileErrors, load_paths
from reconciler.rulefiles.environment import load_every_environment, load_rules, locate
from reconciler.rulefiles.render import render_documents
from reconciler.sql import ast, parse_action, parse_filter
from reconciler.sql.parser import _SCANNER
from reconciler.sql.template import substitute_sql, value_text

pytestmark = pytest.mark.unit

PROJECT = """\
environments:
  dev:
    connection_string_env: SB_DEV
    vars: {region: eu-dev, threshold: {int: 10}}
  prod:
    connection_string_env: SB_PROD
    vars: {region: eu, threshold: {int: 1000}}
    overlays: [overlays/prod]
    topics: {orders: orders-v2}
"""

ORDERS = """\
topic: orders
subscriptions:
  audit-${region}:
    rules:
      - name: big
        sql: amount > ${threshold} AND region = ${region}
      - name: tier
        correlation:
          subject: order-${region}
          properties: {tier: "${threshold}"}
      - name: label
        sql: sys.Label LIKE '${region}-%'
"""

PROD_OVERLAY = """\
topic: orders
subscriptions:
  audit-eu:
    rules:
      - {name: label, remove: true}
      - {name: big, sql: "amount > ${threshold} * 2"}
      - {name: extra, filter: true, add: true}
  prod-only:
    rules: [{name: all, filter: true}]
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write(tmp_path / "rules", {
        "sbrules.yaml": PROJECT, "orders.yaml": ORDERS, "overlays/prod/orders.yaml": PROD_OVERLAY,
    })


def rules_of(result) -> dict[tuple[str, str], dict]:
    return {(t.name, s.name): {r.name: r for r in s.rules or ()} for t, s in result.state.subscriptions()}


def errors(result) -> list[str]:
    return [f"{d.origin}: {d.code}: {d.message}" for d in result.diagnostics if d.severity == "error"]


def test_variables_are_typed_values_in_their_place(project):
    result = load_rules(locate([project]), "dev")
    assert errors(result) == []
    rules = rules_of(result)[("orders", "audit-eu-dev")]
    assert rules["big"].filter == SqlFilter("amount > 10 AND region = 'eu-dev'")
    assert rules["label"].filter == SqlFilter("sys.Label LIKE 'eu-dev-%'")
    tier = rules["tier"].filter
    assert isinstance(tier, CorrelationFilter) and tier.subject == "order-eu-dev"
    assert tier.property_map["tier"] == TypedValue(ValueType.INT, 10)  # an int stays an int


def test_prod_overlays_replace_remove_add_and_rename_the_topic(project):
    result = load_rules(locate([project]), "prod")
    assert errors(result) == []
    subs = rules_of(result)
    assert set(subs) == {("orders-v2", "audit-eu"), ("orders-v2", "prod-only")}
    audit = subs[("orders-v2", "audit-eu")]
    assert list(audit) == ["big", "tier", "extra"]  # replaced in place, removed, added at the end
    assert audit["big"].filter == SqlFilter("amount > 1000 * 2")
    assert audit["big"].origin.file.endswith("overlays/prod/orders.yaml")
    assert result.files == 2


def test_overlay_directories_are_never_base_rule_files(project):
    # dev has no overlays, and prod's overlay directory sits under the rule directory
    dev = load_rules(locate([project]), "dev")
    assert ("orders", "prod-only") not in rules_of(dev)
    assert dev.files == 1


def test_without_a_project_file_nothing_changes(tmp_path):
    write(tmp_path, {"orders.yaml": "topic: orders\nsubscriptions:\n  a:\n    rules: [{name: r, sql: 'x = 1'}]\n"})
    source = locate([tmp_path])
    assert source.project is None
    assert load_rules(source, None).state == load_paths([tmp_path])
    with pytest.raises(Exception, match=r"no sbrules\.yaml"):
        load_rules(source, "dev")


def test_a_project_requires_an_environment_and_knows_its_names(project):
    with pytest.raises(Exception, match=r"defines environments \(dev, prod\)"):
        load_rules(locate([project]), None)
    with pytest.raises(Exception, match=r"'test' is not defined .*defined: dev, prod"):
        load_rules(locate([project]), "test")


def test_the_project_file_is_found_in_the_parents_of_a_path(project):
    assert locate([project / "orders.yaml"]).project.file == project / "sbrules.yaml"
    assert set(load_every_environment(locate([project]))) == {"dev", "prod"}


def test_undefined_variables_are_located_in_the_rule_file(project):
    write(project, {"orders.yaml": ORDERS.replace("region = ${region}", "region = ${regoin}")})
    result = load_rules(locate([project]), "dev")
    (diag,) = [d for d in result.diagnostics if d.severity == "error"]
    assert diag.code == "variable" and "'regoin'" in diag.message
    # line 6: "        sql: amount > ${threshold} AND region = ${regoin}"
    line = (project / "orders.yaml").read_text().splitlines()[5]
    assert (diag.origin.line, diag.origin.column) == (6, line.index("${regoin}") + 1)
    assert diag.sql is not None and diag.sql.text[diag.sql.column - 1:].startswith("${regoin}")


def test_unused_variables_warn_where_they_are_defined(project):
    write(project, {"sbrules.yaml": PROJECT.replace("threshold: {int: 10}}", "threshold: {int: 10}, spare: 1}")})
    result = load_rules(locate([project]), "dev")
    (warning,) = [d for d in result.diagnostics if d.code == "unused-variable"]
    assert warning.severity == "warning" and "'spare'" in warning.message
    assert warning.origin.file.endswith("sbrules.yaml") and warning.origin.line == 4


def test_a_value_sql_cannot_spell_is_an_error_not_a_guess(project):
    write(project, {"sbrules.yaml": PROJECT.replace("region: eu-dev", "region: {uuid: 12345678-1234-1234-1234-123456789012}")})
    result = load_rules(locate([project]), "dev")
    assert any("is a uuid" in e for e in errors(result))


def test_project_file_errors_are_located(tmp_path):
    write(tmp_path, {
        "sbrules.yaml": """\
            environments:
              dev:
                conection_string_env: SB_DEV
              prod:
                endpoint: sb://prod.servicebus.windows.net/
                overlays: [missing/]
                vars: {n: {int: 3000000000}}
            """,
        "orders.yaml": ORDERS,
    })
    with pytest.raises(RuleFileErrors) as caught:
        locate([tmp_path])
    found = {(d.code, d.origin.line) for d in caught.value.diagnostics}
    assert ("unknown-key", 3) in found
    assert found >= {("typed-value", 7)}
    # the schema reports first; with the schema satisfied the cross-field checks speak
    write(tmp_path, {"sbrules.yaml": "environments:\n  prod:\n    endpoint: sb://p.servicebus.windows.net/\n    overlays: [missing/]\n"})
    with pytest.raises(RuleFileErrors) as caught:
        locate([tmp_path])
    assert {(d.code, d.origin.line) for d in caught.value.diagnostics} == {("environment", 3), ("overlay", 4)}


def test_overlay_conflicts_and_impossible_removals_are_located(project):
    write(project, {"overlays/prod/more.yaml": """\
        topic: orders
        subscriptions:
          audit-eu:
            rules:
              - {name: big, sql: "amount > 1"}
              - {name: ghost, remove: true}
          nowhere:
            remove: true
        """})
    result = load_rules(locate([project]), "prod")
    by_code = {d.code: d for d in result.diagnostics if d.severity == "error"}
    conflict = by_code["overlay-conflict"]
    assert "rule 'big' of orders/audit-eu" in conflict.message
    files = {conflict.origin.file.rsplit("/", 1)[-1], conflict.related[0].file.rsplit("/", 1)[-1]}
    assert files == {"orders.yaml", "more.yaml"}
    messages = [d.message for d in result.diagnostics if d.code == "overlay"]
    assert any("'ghost'" in m for m in messages) and any("orders/nowhere" in m for m in messages)


def test_later_overlays_see_what_earlier_ones_made(project):
    write(project, {
        "sbrules.yaml": PROJECT.replace("overlays: [overlays/prod]", "overlays: [overlays/prod, overlays/late.yaml]"),
        "overlays/late.yaml": "topic: orders\nsubscriptions:\n  audit-eu:\n    rules: [{name: extra, remove: true}]\n",
    })
    result = load_rules(locate([project]), "prod")
    assert errors(result) == []
    assert "extra" not in rules_of(result)[("orders-v2", "audit-eu")]


def test_renaming_an_undeclared_topic_is_an_error(project):
    write(project, {"sbrules.yaml": PROJECT.replace("{orders: orders-v2}", "{order: orders-v2}")})
    assert any("topic-rename" in e and "'order'" in e for e in errors(load_rules(locate([project]), "prod")))


def test_rendered_files_load_as_the_environment(project, tmp_path):
    for env in ("dev", "prod"):
        state = load_rules(locate([project]), env).state
        out = tmp_path / f"rendered-{env}"
        out.mkdir()
        for name, text in render_documents(state, env).items():
            (out / name).write_text(text, encoding="utf-8")
        assert load_paths([out]) == state


# ---- SQL: a value is a literal, whatever it holds ------------------------------------------------


def test_injection_attempts_stay_string_literals():
    evil = "x' OR 1=1 --"
    result = substitute_sql("region = ${r}", {"r": TypedValue.infer(evil)}.get)
    assert result.text == "region = 'x'' OR 1=1 --'"
    assert parse_filter(result.text) == ast.Comparison("=", ast.Property("user", "region"), ast.Literal(ValueType.STRING, evil))


numbers = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False))


@given(st.text(max_size=40), numbers)
def test_any_value_becomes_one_literal_and_the_shape_never_changes(text, number):
    values = {"s": TypedValue.infer(text), "n": TypedValue.infer(number)}
    result = substitute_sql("a=${s} AND b IN (${s},${n}) AND c-${n}>${n} OR [${s}] = '${s}${n}'", values.get)
    assert result.problems == () and result.used == {"s", "n"}
    # the same expression written with @parameters (which the parser turns into literals)
    name = text.replace("]", "]]")
    inside = (text + value_text(values["n"])).replace("'", "''")
    expected = parse_filter(f"a=@s AND b IN (@s,@n) AND c-@n>@n OR [{name}] = '{inside}'", values)
    assert _unnamed(parse_filter(result.text)) == _unnamed(expected)


@given(st.text(max_size=20), numbers)
def test_adjacent_references_never_fuse_into_one_token(text, number):
    values = {"s": TypedValue.infer(text), "n": TypedValue.infer(number)}
    result = substitute_sql("${s}${s}${n}${n}x", values.get)
    kinds = [t.type for t in _SCANNER.scan(result.text)]
    assert kinds.count("STRING") == 2 and kinds.count("IDENT") == 1
    assert kinds.count("INTEGER") + kinds.count("DOUBLE") == 2


def _unnamed(node):
    """The tree without the parameter names the expected side's literals remember."""
    if isinstance(node, ast.Literal):
        return dataclasses.replace(node, parameter=None)
    if isinstance(node, tuple):
        return tuple(_unnamed(n) for n in node)
    if dataclasses.is_dataclass(node):
        return dataclasses.replace(node, **{f.name: _unnamed(getattr(node, f.name)) for f in dataclasses.fields(node)})
    return node


def test_actions_take_variables_as_literals_too():
    result = substitute_sql("SET tenant = ${t}; SET n = ${n}", {"t": TypedValue.infer("a'b"), "n": TypedValue(ValueType.INT, -3)}.get)
    assert result.text == "SET tenant = 'a''b'; SET n = (-3)"
    assert parse_action(result.text).statements[0].value == ast.Literal(ValueType.STRING, "a'b")


@pytest.mark.unit
def test_the_project_file_is_looked_up_to_the_repository_root_and_never_beyond(tmp_path):
    from reconciler.rulefiles.project import find_project

    (tmp_path / "sbrules.yaml").write_text("environments: {dev: }\n")  # above the repository: another project's
    repo = tmp_path / "team-rules"
    (repo / ".git").mkdir(parents=True)
    (repo / "rules" / "orders").mkdir(parents=True)
    assert find_project(repo / "rules" / "orders") is None
    (repo / "sbrules.yaml").write_text("environments: {dev: }\n")
    assert find_project(repo / "rules" / "orders") == repo / "sbrules.yaml"
    assert find_project(tmp_path / "elsewhere") == tmp_path / "sbrules.yaml"  # outside any repository: the nearest


def test_verbose_names_the_project_file(tmp_path, run_cli, caplog):
    import logging

    (tmp_path / ".git").mkdir()
    write(tmp_path, {"sbrules.yaml": PROJECT, "orders.yaml": ORDERS, "overlays/prod/orders.yaml": PROD_OVERLAY})
    with caplog.at_level(logging.DEBUG, logger="reconciler.rulefiles.project"):
        assert run_cli("validate", tmp_path, "--env", "dev")[0] == 0
    assert f"using the project file {tmp_path / 'sbrules.yaml'}" in caplog.text  # -v sends it to stderr


def test_render_without_env_lists_the_environments(tmp_path, run_cli):
    write(tmp_path / "project", {"sbrules.yaml": PROJECT, "orders.yaml": ORDERS, "overlays/prod/orders.yaml": PROD_OVERLAY})
    code, out, err = run_cli("render", tmp_path / "project")
    assert code == 0 and "--env NAME" in err
    assert [line.split("\t")[0] for line in out.splitlines()] == ["dev", "prod"]
    plain = tmp_path / "plain"
    write(plain, {"orders.yaml": ORDERS.replace("${", "x").replace("}", "")})
    code, _, err = run_cli("render", plain / "orders.yaml")
    assert code == 64 and "there is none" in err


def test_an_overlay_rule_that_replaces_nothing_is_a_warning_unless_marked_add(tmp_path):
    from reconciler.rulefiles.environment import load_rules, locate

    overlay = """\
topic: orders
subscriptions:
  audit-eu:
    rules:
      - {name: bigg, sql: amount > 1}
      - {name: fresh, sql: amount > 2, add: true}
"""
    write(tmp_path, {"sbrules.yaml": PROJECT, "orders.yaml": ORDERS, "overlays/prod/orders.yaml": overlay})
    result = load_rules(locate([tmp_path]), "prod")
    warnings = [d for d in result.diagnostics if d.code == "overlay-adds"]
    assert len(warnings) == 1, result.diagnostics
    assert "'bigg' matches no rule of orders/audit-eu" in warnings[0].message and "did you mean 'big'?" in warnings[0].message
    assert warnings[0].origin.file.endswith("overlays/prod/orders.yaml") and warnings[0].origin.line == 5
    names = [r.name for r in next(s for _, s in result.state.subscriptions() if s.name == "audit-eu").rules]
    assert "bigg" in names and "fresh" in names


def test_route_takes_and_gives_declared_topic_names_with_the_namespaces_beside(tmp_path, run_cli, output_schema):
    import json

    project = write(tmp_path / "project", {"sbrules.yaml": PROJECT, "orders.yaml": ORDERS, "overlays/prod/orders.yaml": PROD_OVERLAY})
    message = tmp_path / "m.json"
    message.write_text('{"sys": {"Label": "eu-x"}, "user": {"amount": 5000, "region": "eu"}}')
    code, out, err = run_cli("route", project, "--env", "prod", "--topic", "orders", "--message", message, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    output_schema("route").validate(doc)
    assert {(d["topic"], d.get("namespace_topic")) for d in doc["deliveries"]} == {("orders", "orders-v2")}
    code, out, _ = run_cli("route", project, "--env", "prod", "--topic", "orders", "--message", message)
    assert code == 0 and "orders/audit-eu (orders-v2 in the namespace): delivered" in out, out


def test_validate_files_inside_a_project_validates_the_project_and_reports_those_files(tmp_path, run_cli, monkeypatch):
    project = write(tmp_path / "project", {"sbrules.yaml": PROJECT, "orders.yaml": ORDERS, "overlays/prod/orders.yaml": PROD_OVERLAY,
                                            "payments.yaml": "topic: payments\nsubscriptions:\n  p:\n    rules: [{name: x, sql: 'a = = 1'}]\n"})
    monkeypatch.chdir(project)
    code, out, _ = run_cli("validate", "orders.yaml", "--env", "prod")  # as pre-commit passes a changed file
    assert code == 0, out
    assert "payments.yaml" not in out and "(environments: prod)" in out
    assert "valid (environments: prod): 3 files" in out  # the whole project was read, its overlay included
    code, out, _ = run_cli("validate", "payments.yaml", "--env", "prod")
    assert code == 1 and "payments.yaml:4:" in out
