"""``sbrules render``: an environment's rules, fully resolved, as plain rule files."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli.common import env_option, load_rules


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@env_option
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path),
    help="Write one <topic>.yaml per topic here (default: stdout, one YAML document per topic).",
)
def render(paths: tuple[Path, ...], env: str | None, out: Path | None) -> None:
    """Print the rule files of --env NAME (default PATH: ./rules) with its variables substituted,
    its overlays merged and its topics renamed: plain rule files that plan exactly as --env does."""
    from reconciler.rulefiles.render import render_documents, write_documents

    if env is None:
        raise click.UsageError("name the environment to render with --env NAME")
    documents = render_documents(load_rules(paths, env).state, env)
    if out is None:
        click.echo("---\n".join(documents.values()), nl=False)
        return
    for path in write_documents(documents, out):
        click.echo(f"wrote {path}", err=True)
