"""``sbrules impact PLAN.json --traffic DATASET``: a saved plan's traffic impact, offline (for CI).

Also the one home of the traffic options and of writing a traffic report, which ``plan --traffic``
and ``analyze`` share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from reconciler import progress
from reconciler.app import operations
from reconciler.cli.common import env_option
from reconciler.cli.output import write_output
from reconciler.plan import read_plan_file


def traffic_option(required: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--traffic DATASET``: the sample a traffic report reads, the one declaration every command shares."""
    return click.option(
        "--traffic",
        metavar="DATASET",
        required=required,
        help="Parquet sample (from `sbrules sample`): a local directory or a URL Spark reads "
        "(s3a://, abfss://, gs://, hdfs://, file:///).",
    )



spark_master_option = click.option(
    "--spark-master", envvar="SPARK_REMOTE", help="Spark master URL (default local[*]; $SPARK_REMOTE)."
)


def report_options(schema: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--format text|json|markdown|html`` and ``--out FILE`` of a command that writes a traffic
    report (``schema``: the file its JSON follows)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option(
            "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to this file instead of stdout."
        )(command)
        return click.option(
            "--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text", show_default=True,
            help=f"text: for a terminal; json: one document (schemas/{schema}); markdown: a pull-request comment; "
            "html (with --out): a self-contained page.",
        )(command)

    return decorate


@click.command()
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@traffic_option(required=True)
@report_options("traffic-report.schema.json")
@spark_master_option
@env_option
def impact(
    plan_file: Path, paths: tuple[Path, ...], traffic: str, fmt: str, out: Path | None, spark_master: str | None,
    env: str | None,
) -> None:
    """What a saved plan (`sbrules plan --out PLAN.json`) does to sampled traffic, with no namespace.

    The rules after the plan are the rule files' (default PATH: ./rules; with the plan's
    environment unless --env names one); the rules before it are those the plan leaves alone and
    every change's before side.
    """
    if fmt == "html" and out is None:
        raise click.UsageError("--format html writes a page: give --out FILE.html")
    saved = read_plan_file(plan_file)
    rules = operations.load_rules(paths, env if env is not None else saved.environment)
    with progress.task():
        result = operations.impact(rules, saved, traffic, against=str(plan_file), spark_master=spark_master)
        tell(result)
        text = render(result, fmt)
    emit_report(text, out)


def tell(result: "operations.Traffic[Any]") -> None:
    """A traffic report's warnings (gaps in the sample) and notes, on stderr."""
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)


def render(result: "operations.Traffic[Any]", fmt: str) -> str:
    """The report in ``fmt`` (text, json, markdown, html): a traffic task's last phase."""
    from reconciler.traffic.report.render import render_analysis, render_report
    from reconciler.traffic.report.routing import Analysis

    progress.phase("writing the report")
    if isinstance(result.report, Analysis):
        return render_analysis(result.report, fmt)
    return render_report(result.report, fmt)


def emit_report(text: str, out: Path | None, what: str = "the traffic report") -> None:
    """The rendered report on stdout, or in ``out`` (said on stderr)."""
    if out is None:
        click.echo(text)
    else:
        write_output(out, text + "\n", what)
        click.echo(f"wrote {what} to {out}", err=True)
