"""The exit-code table (docs/output.md) over every command: a CI gate tells changes from errors by
the exit status alone. 2 is a finding (changes, drift) and nothing else; a wrong command line is 64
for every command, and with ``--format json`` it is still one JSON error document on stdout."""

from __future__ import annotations

import json

import click
import pytest

from reconciler.cli import cli
from reconciler.errors import ExitCode
from reconciler.plan import Plan, render_json


def _invocations() -> list[list[str]]:
    """Every command and subcommand, as typed."""
    found = []
    for name in cli.list_commands(click.Context(cli)):
        command = cli.get_command(click.Context(cli), name)
        if isinstance(command, click.Group):
            found += [[name, sub] for sub in command.list_commands(click.Context(command))]
        else:
            found.append([name])
    return found


INVOCATIONS = _invocations()


@pytest.mark.unit
def test_the_codes_are_distinct_where_a_gate_reads_them() -> None:
    assert len({ExitCode.OK, ExitCode.ERROR, ExitCode.CHANGES, ExitCode.USAGE, ExitCode.INTERRUPTED}) == 5


@pytest.mark.unit
@pytest.mark.parametrize("argv", INVOCATIONS, ids=" ".join)
def test_an_unknown_option_is_a_usage_error_of_every_command(argv, run_cli) -> None:
    code, out, err = run_cli(*argv, "--no-such-option")
    assert code == ExitCode.USAGE, (code, err)
    assert out == "" and err.startswith("error: No such option") and "Traceback" not in err


@pytest.mark.unit
@pytest.mark.parametrize("argv", INVOCATIONS, ids=" ".join)
def test_a_usage_error_asked_for_as_json_is_one_error_document(argv, run_cli) -> None:
    code, out, err = run_cli(*argv, "--no-such-option", "--format", "json")
    assert code == ExitCode.USAGE, (code, err)
    assert json.loads(out)["error"]["code"] == "usage"


@pytest.mark.unit
@pytest.mark.parametrize("command", ["validate", "plan", "drift", "render", "apply"])
def test_no_path_and_no_rules_directory_is_a_usage_error(command, run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(command, *(["--env", "dev"] if command == "render" else []))
    assert code == ExitCode.USAGE, err
    assert "Traceback" not in err


@pytest.mark.unit
def test_render_without_env_and_without_rules_is_a_usage_error(run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("render")
    assert code == ExitCode.USAGE and "no PATH given" in err, err


def _takes_env(argv: list[str]) -> bool:
    command: click.Command = cli
    for name in argv:
        command = command.get_command(click.Context(command), name)  # type: ignore[attr-defined]
    return any(p.name == "env" for p in command.params)


#: What each command needs besides --env to get as far as reading it.
_REQUIRED = {
    "analyze": ["--traffic", "sample"], "export": ["--all"], "impact": ["plan.json", "--traffic", "sample"],
    "route": ["--message", "message.json"], "rules list": ["--topic", "t", "--subscription", "s"],
    "sample": ["--topic", "t", "--subscription", "s", "--out", "o"], "send": ["--topic", "t", "--message", "message.json"],
    "subscriptions": ["--topic", "t"], "unlock": ["--all"],
}


@pytest.mark.unit
@pytest.mark.parametrize("argv", [argv for argv in INVOCATIONS if _takes_env(argv)], ids=" ".join)
def test_an_env_that_names_no_environment_is_a_usage_error(argv, run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sbrules.yaml").write_text("environments:\n  dev:\n    connection_string_env: DEV_CS\n")
    (tmp_path / "plan.json").write_text(render_json(Plan()))
    (tmp_path / "message.json").write_text("{}")
    code, _, err = run_cli(*argv, *_REQUIRED.get(" ".join(argv), ()), "--env", "nope")
    assert code == ExitCode.USAGE, err
    assert "'nope' is not defined" in err, err


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv", [["plan"], ["drift"], ["apply"], ["export", "--all"], ["topics"], ["analyze", "--live", "--traffic", "s"]],
    ids=" ".join,
)
def test_every_missing_connection_string_is_a_usage_error(argv, run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("SERVICEBUS_CONNECTION_STRING", raising=False)
    monkeypatch.delenv("DEV_CS", raising=False)
    args = ["apply", "plan.json"] if argv == ["apply"] else argv
    for folder, project in (("plain", None), ("project", "environments:\n  dev:\n    connection_string_env: DEV_CS\n")):
        (tmp_path / folder / "rules").mkdir(parents=True)
        (tmp_path / folder / "rules" / "orders.yaml").write_text(
            "topic: orders\nsubscriptions: {billing: {rules: [{name: all, filter: true}]}}\n"
        )
        (tmp_path / folder / "plan.json").write_text(render_json(Plan()))
        if project:
            (tmp_path / folder / "rules" / "sbrules.yaml").write_text(project)
    monkeypatch.chdir(tmp_path / "plain")
    code, _, err = run_cli(*args)
    assert code == ExitCode.USAGE and "no connection string" in err, err
    assert f"(see 'sbrules {argv[0]} --help')" in err, err
    monkeypatch.chdir(tmp_path / "project")
    code, _, err = run_cli(*args, "--env", "dev")
    assert code == ExitCode.USAGE and "$DEV_CS, which is not set" in err, err
    assert f"(see 'sbrules {argv[0]} --help')" in err, err
    assert "Traceback" not in err


@pytest.mark.unit
@pytest.mark.parametrize("command", ["validate", "plan", "drift", "render"])
def test_a_path_that_does_not_exist_is_a_usage_error(command, run_cli, tmp_path) -> None:
    code, _, err = run_cli(command, tmp_path / "nope")
    assert code == ExitCode.USAGE, err
