"""``sbrules sample``: peek a topic's subscriptions into a Parquet traffic sample."""

from __future__ import annotations

import click

from reconciler.app import operations
from reconciler.app.target import TargetOptions
from reconciler.cli.common import env_option, format_option, namespace_options, open_target, progress_bars
from reconciler.cli.output import ExitCode, echo_json
from reconciler.names import shown_path


@click.command()
@click.option("--topic", required=True, help="Topic whose traffic to sample.")
@click.option(
    "--subscription",
    "subscriptions",
    multiple=True,
    help="Subscription to peek (repeatable). Peek shows what a subscription's current rules let through: "
    "for all of the topic's traffic, name a catch-all subscription (rule 1=1).",
)
@click.option("--max", "max_messages", type=click.IntRange(min=1), help="Peek at most N messages per subscription this run.")
@click.option(
    "--out", "dataset", default="traffic-sample", show_default=True, help="Dataset directory (created; re-runs continue)."
)
@click.option("--page-size", type=click.IntRange(1, 1000), default=250, show_default=True, help="Messages per peek request.")
@env_option
@namespace_options
@format_option("text", "json")
def sample(
    topic: str,
    subscriptions: tuple[str, ...],
    max_messages: int | None,
    dataset: str,
    page_size: int,
    env: str | None,
    namespace: TargetOptions,
    fmt: str,
) -> None:
    """Peek messages (without locking them) into a Parquet dataset for `plan --traffic`, `impact` and `analyze`.

    A second run continues after the last sequence number peeked from each subscription; a message
    seen through several subscriptions is stored once. With --env, --topic is the declared name.
    """
    if not subscriptions:
        raise click.UsageError("name at least one --subscription (a catch-all subscription sees all traffic)")
    environment = operations.project_environment(env)
    target = open_target(namespace, environment)
    declared = topic
    if environment is not None:
        topic = environment.actual_topic(topic)
    bars = {f"{topic}/{s}": max_messages for s in subscriptions}
    with progress_bars(bars, target.pacer()) as advance:
        stats = operations.sample(
            target, topic, subscriptions, dataset, max_messages=max_messages, page_size=page_size,
            on_page=lambda subscription, count: advance(f"{topic}/{subscription}", count),
        )
    if fmt == "json":
        echo_json({"format_version": 1, **stats.to_json()})
    else:
        for s in stats.subscriptions:
            click.echo(
                f"{shown_path(declared, s.subscription, s.topic)}: peeked {s.peeked} from sequence {s.start_sequence}, "
                f"stored {s.written}, {s.duplicates} already stored"
            )
        click.echo(f"{stats.written} new messages in {stats.dataset} ({len(stats.files)} files)")
    for held in stats.manifest:
        if held.warning is not None and held.topic == topic:
            click.echo(f"warning: {held.warning}", err=True)
    if stats.interrupted:
        click.echo(
            f"interrupted: the {stats.written} messages peeked so far are stored; run the same command again to "
            "continue from there",
            err=True,
        )
        raise SystemExit(ExitCode.INTERRUPTED)

