"""``sbrules impact PLAN.json --traffic DATASET``: a saved plan's traffic impact, offline (for CI).

Also the one home of writing a traffic report, which ``plan --traffic`` and the deprecated
``validate --traffic`` share.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from reconciler import progress
from reconciler.cli.common import env_option, load_rules
from reconciler.cli.output import write_output
from reconciler.model import DesiredState
from reconciler.plan import Plan, read_plan_file

if TYPE_CHECKING:
    from reconciler.rulefiles.project import Environment
    from reconciler.traffic.report.model import ImpactReport

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
    rules = load_rules(paths, env if env is not None else saved.environment)
    with progress.task():
        report = traffic_report(
            rules.state, saved, traffic, against=str(plan_file), spark_master=spark_master, environment=rules.environment
        )
        text = render(report, fmt)
    emit_report(text, out)


def traffic_report(
    desired: DesiredState, plan: Plan, dataset: str, *, against: str, spark_master: str | None,
    new: frozenset[tuple[str, str]] = frozenset(), environment: "Environment | None" = None,
) -> "ImpactReport":
    """The impact report (Spark) of ``plan`` on the sample ``dataset``, its topics named as the rule
    files declare them in ``environment``."""
    from reconciler.traffic.analysis.impact import impact_report

    report = impact_report(
        desired, plan, dataset, against=against, spark_master=spark_master, new=new, declared=declared_names(environment)
    )
    warn_of_gaps(dataset, [t.name for t in desired.topics])
    return report


def warn_of_gaps(dataset: str, topics: list[str]) -> None:
    """A warning on stderr for each of ``topics`` (as the namespace names them) whose sampled
    messages have gaps (the sample's manifest, :mod:`reconciler.traffic.sample.manifest`)."""
    from reconciler.traffic.sample.manifest import gap_warnings

    for warning in gap_warnings(dataset, topics):
        click.echo(f"warning: {warning}", err=True)


def declared_names(environment: "Environment | None") -> Callable[[str], str]:
    """A topic's declared name from its name in the namespace (``environment`` may rename topics)."""
    if environment is None:
        return lambda topic: topic
    return environment.declared_topic


def render(report: "ImpactReport", fmt: str) -> str:
    """The report in ``fmt`` (text, json, markdown, html): a traffic task's last phase."""
    from reconciler.traffic.report.render import render_report

    progress.phase("writing the report")
    return render_report(report, fmt)


def emit_report(text: str, out: Path | None) -> None:
    """The rendered report on stdout, or in ``out`` (said on stderr)."""
    if out is None:
        click.echo(text)
    else:
        write_report(out, text)


def write_report(out: Path, text: str) -> None:
    write_output(out, text + "\n", "the traffic report")
    click.echo(f"wrote the traffic report to {out}", err=True)
