"""``sbrules analyze``: what is wrong with a topic's routing, measured on a traffic sample."""

from __future__ import annotations

import os
from pathlib import Path

import click

from reconciler import progress
from reconciler.app import operations
from reconciler.app.target import CONNECTION_ENV, TargetOptions
from reconciler.cli.common import env_option, namespace_options, open_target
from reconciler.cli.impact import emit_report, render, report_options, spark_master_option, tell, traffic_option


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@traffic_option(required=True)
@click.option(
    "--live",
    is_flag=True,
    help="Analyse the namespace's current rules instead of the rule files' rules (the declared subscriptions, "
    "and the other subscriptions of the declared topics).",
)
@report_options("analyze.schema.json")
@spark_master_option
@env_option
@namespace_options
def analyze(
    paths: tuple[Path, ...],
    traffic: str,
    live: bool,
    fmt: str,
    out: Path | None,
    spark_master: str | None,
    env: str | None,
    namespace: TargetOptions,
) -> None:
    """Report messages no subscription receives, what the rules cost, and rules that never fire,
    are covered by another, can match nothing or could be cheaper (default PATH: ./rules).

    Offline by default (the rule files' rules); with --live, the namespace's current rules.
    """
    if fmt == "html" and out is None:
        raise click.UsageError("--format html writes a page: give --out FILE.html")
    rules = operations.load_rules(paths, env)
    if live and not (namespace.connection_string or os.environ.get(CONNECTION_ENV)) and rules.environment is None:
        raise click.UsageError("--live reads the namespace: give --connection-string or $SERVICEBUS_CONNECTION_STRING")
    target = open_target(namespace, rules.environment) if live else None
    with progress.task():
        result = operations.analyze(rules, traffic, spark_master=spark_master, target=target)
        text = render(result, fmt)
    tell(result)
    emit_report(text, out, "the routing-health report")
