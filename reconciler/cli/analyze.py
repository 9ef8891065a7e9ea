"""``sbrules analyze``: what is wrong with a topic's routing, measured on a traffic sample."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler import progress
from reconciler.cli.common import Namespace, env_option, load_rules, namespace_options
from reconciler.cli.impact import declared_names, report_options, spark_master_option, traffic_option, warn_of_gaps
from reconciler.cli.output import write_output
from reconciler.model import DesiredState


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
    namespace: Namespace,
) -> None:
    """Report messages no subscription receives, what the rules cost, and rules that never fire,
    are covered by another, can match nothing or could be cheaper (default PATH: ./rules).

    Offline by default (the rule files' rules); with --live, the namespace's current rules.
    """
    if fmt == "html" and out is None:
        raise click.UsageError("--format html writes a page: give --out FILE.html")
    rules = load_rules(paths, env)
    from reconciler.traffic.analysis.analyze import analyze_report
    from reconciler.traffic.analysis.impact import desired_subscribers
    from reconciler.traffic.report.render import render_analysis

    subscribers, complete = desired_subscribers(rules.state), False
    if live:
        subscribers, complete = _live(rules.state, subscribers, namespace.for_environment(rules.environment))
    with progress.task():
        doc = analyze_report(
            subscribers, "live" if live else "desired", traffic, spark_master, declared_names(rules.environment),
            complete=complete,
        )
        progress.phase("writing the report")
        text = render_analysis(doc, fmt)
    warn_of_gaps(traffic, [t.name for t in rules.state.topics])
    if out is None:
        click.echo(text)
        return
    write_output(out, text + "\n", "the report")
    click.echo(f"wrote the routing-health report to {out}", err=True)


def _live(desired: DesiredState, subscribers: list, namespace: Namespace) -> tuple[list, bool]:
    """The declared subscriptions with their current rules (those missing from the namespace left
    out), and the subscriptions of the declared topics that no file mentions, with theirs; and
    whether discovery listed them all."""
    from dataclasses import replace

    from reconciler.discovery import discover, undeclared_subscriptions
    from reconciler.observe import observe_subscriptions
    from reconciler.plan.live import read_bystanders
    from reconciler.traffic.analysis.health import Subscriber

    if not namespace.connection_string:
        raise click.UsageError("--live reads the namespace: give --connection-string or $SERVICEBUS_CONNECTION_STRING")
    with namespace.clients.amqp() as client, namespace.clients.rest() as rest:
        live = observe_subscriptions(client, [(s.topic, s.subscription) for s in subscribers], missing_ok=True)
        inventory = discover(rest, [t.name for t in desired.topics], enabled=namespace.discovery)
        undeclared = undeclared_subscriptions(desired, inventory)
        others = read_bystanders(client, desired, undeclared, every=True, fallback=rest)
    if inventory.note:
        click.echo(f"note: {inventory.note}", err=True)
    declared = [replace(s, rules=live[(s.topic, s.subscription)]) for s in subscribers if (s.topic, s.subscription) in live]
    found = [
        Subscriber(t, s, others.get((t, s)), declared=False, owner=desired.owners.of_subscription(t, s))
        for t, s in undeclared
    ]
    return declared + found, inventory.listed
