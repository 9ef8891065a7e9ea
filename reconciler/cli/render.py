"""``sbrules render``: an environment's rules, fully resolved, as plain rule files or as the
Config.json of Microsoft's Service Bus emulator."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.app.operations import load_rules
from reconciler.cli.common import env_option
from reconciler.cli.output import write_output
from reconciler.json_text import json_text


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@env_option
@click.option(
    "--format", "fmt", type=click.Choice(["yaml", "emulator-config"]), default="yaml", show_default=True,
    help="yaml: plain rule files; emulator-config: one Config.json for Microsoft's Service Bus emulator (Docker).",
)
@click.option(
    "--out", type=click.Path(path_type=Path),
    help="yaml: write one <topic>.yaml per topic into this directory; emulator-config: write this file "
    "(default: stdout).",
)
def render(paths: tuple[Path, ...], env: str | None, fmt: str, out: Path | None) -> None:
    """Print the rule files of --env NAME (default PATH: ./rules) with its variables substituted,
    its overlays merged and its topics renamed: plain rule files that plan exactly as --env does.

    With --format emulator-config, the same topology as the Config.json that Microsoft's Service Bus
    emulator starts from (--env is needed only with an sbrules.yaml).
    """
    if fmt == "emulator-config":
        _render_emulator_config(paths, env, out)
        return
    from reconciler.rulefiles.render import render_documents, write_documents

    if env is None:
        _list_environments(paths)
        return
    if out is not None and out.is_file():
        raise click.UsageError(f"--out {out}: a directory for the rule files, not a file")
    documents = render_documents(load_rules(paths, env).state, env)
    if out is None:
        click.echo("---\n".join(documents.values()), nl=False)
        return
    for path in write_documents(documents, out):
        click.echo(f"wrote {path}", err=True)


def _render_emulator_config(paths: tuple[Path, ...], env: str | None, out: Path | None) -> None:
    from reconciler import diagnostics
    from reconciler.rulefiles import RuleFileErrors
    from reconciler.rulefiles.emulator_config import to_config

    if out is not None and out.is_dir():
        raise click.UsageError(f"--out {out}: the Config.json file to write, not a directory")
    config, findings = to_config(load_rules(paths, env).state)
    errors = [d for d in findings if d.severity == "error"]
    if errors:
        raise RuleFileErrors(errors)
    if findings:
        click.echo(diagnostics.render_text(findings), err=True)
    text = json_text(config)
    if out is None:
        click.echo(text, nl=False)
        return
    write_output(out, text, "the emulator's Config.json")
    click.echo(f"wrote {out}", err=True)


def _list_environments(paths: tuple[Path, ...]) -> None:
    """``render`` without ``--env``: the environments there are to render, one a line, and where each
    takes its namespace from."""
    from reconciler.rulefiles.environment import locate

    project = locate(paths).project
    if project is None:
        raise click.UsageError(
            "render resolves an environment of sbrules.yaml, and there is none: plain rule files need no rendering"
        )
    for name, environment in project.environments.items():
        if environment.connection_string_env:
            where = f"namespace from ${environment.connection_string_env}"
        elif environment.endpoint:
            where = f"namespace {environment.endpoint}"
        else:
            where = "namespace from the command line"
        click.echo(f"{name}\t{where}")
    click.echo("render one with --env NAME", err=True)
