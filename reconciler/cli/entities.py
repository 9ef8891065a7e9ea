"""``sbrules topics`` and ``sbrules subscriptions``: what exists in the namespace (management REST API)."""

from __future__ import annotations

import io

import click

from reconciler.app.operations import project_environment
from reconciler.app.target import TargetOptions
from reconciler.cli.common import env_option, format_option, namespace_options, open_target
from reconciler.cli.output import echo_json
from reconciler.names import name_key, shown_topic


def _table(title: str, columns: list[str], rows: list[list[str]]) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(table)
    return out.getvalue()


@click.command()
@format_option("table", "json")
@env_option
@namespace_options
def topics(fmt: str, env: str | None, namespace: TargetOptions) -> None:
    """List the namespace's topics (needs Manage rights). With --env, topics are named as the rule
    files declare them, the namespace's name beside a renamed one."""
    from reconciler.discovery import discover_namespace

    environment = project_environment(env)
    target = open_target(namespace, environment)
    with target.rest() as rest:
        inventory = discover_namespace(rest)
    found = []
    rows = []
    for actual, subs in sorted(inventory.topics.items(), key=lambda kv: name_key(kv[0])):
        declared = environment.declared_topic(actual) if environment is not None else actual
        entry: dict[str, object] = {"name": declared, "subscriptions": len(subs or ())}
        if declared != actual:
            entry["namespace_name"] = actual
        found.append(entry)
        rows.append([shown_topic(declared, actual), str(len(subs or ()))])
    if fmt == "json":
        echo_json({"format_version": 1, "topics": found})
    else:
        click.echo(_table(f"{len(found)} topic(s)", ["topic", "subscriptions"],
                          rows), nl=False)


@click.command()
@click.option("--topic", required=True, help="The topic whose subscriptions to list (with --env, as declared).")
@format_option("table", "json")
@env_option
@namespace_options
def subscriptions(topic: str, fmt: str, env: str | None, namespace: TargetOptions) -> None:
    """List a topic's subscriptions with forwarding and session settings (needs Manage rights)."""
    from reconciler.discovery import discover_namespace
    from reconciler.namespace.errors import NotFoundError

    environment = project_environment(env)
    target = open_target(namespace, environment)
    actual = environment.actual_topic(topic) if environment is not None else topic
    with target.rest() as rest:
        subs = discover_namespace(rest, [actual]).topics[actual]
    if subs is None:
        raise NotFoundError(f"topic {shown_topic(topic, actual)!r} does not exist in the namespace")
    if fmt == "json":
        doc = {"format_version": 1, "topic": topic, **({"namespace_topic": actual} if actual != topic else {}),
               "subscriptions": [
            {"name": s.name, "forward_to": s.forward_to, "forward_dead_lettered_messages_to":
             s.forward_dead_lettered_messages_to, "requires_session": s.requires_session, "status": s.status}
            for s in subs
        ]}
        echo_json(doc)
    else:
        rows = [[s.name, s.forward_to or "", "yes" if s.requires_session else "no", s.status] for s in subs]
        title = shown_topic(topic, actual)
        click.echo(_table(f"{title}: {len(subs)} subscription(s)", ["subscription", "forwards to", "sessions", "status"],
                          rows), nl=False)
