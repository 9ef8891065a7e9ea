"""``sbrules show FILE``: a saved plan or traffic document rendered again, with no namespace and no Spark."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.app import operations
from reconciler.cli.output import write_output


@click.command()
@click.argument("file", metavar="FILE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text", show_default=True,
    help="text: for a terminal; json: the document again, as sbrules writes it; markdown: a pull-request comment; "
    "html (with --out; traffic documents only): a self-contained page.",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write it to this file instead of stdout.")
def show(file: Path, fmt: str, out: Path | None) -> None:
    """Show a saved plan (`sbrules plan --out FILE`), traffic impact report (`sbrules impact --format
    json`) or routing-health document (`sbrules analyze --format json`) in any of its formats.

    The output is what the command that wrote FILE prints in that format; nothing is read but FILE.
    """
    if fmt == "html" and out is None:
        raise click.UsageError("--format html writes a page: give --out FILE.html")
    saved = operations.show(file)
    if fmt not in saved.formats:
        raise click.UsageError(f"{file} is a {saved.kind}, shown as {', '.join(saved.formats)}; not as {fmt}")
    text = saved.shown(fmt)
    if out is None:
        click.echo(text, nl=False)
        return
    write_output(out, text, f"the {saved.kind}")
    click.echo(f"wrote the {saved.kind} to {out}", err=True)
