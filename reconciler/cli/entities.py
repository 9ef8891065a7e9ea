"""``sbrules topics`` and ``sbrules subscriptions``: what exists in the namespace (management REST API)."""

from __future__ import annotations

import io

import click

from reconciler.cli.common import Namespace, format_option, namespace_options
from reconciler.cli.output import echo_json
from reconciler.names import name_key


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
@namespace_options
def topics(fmt: str, namespace: Namespace) -> None:
    """List the namespace's topics (needs Manage rights)."""
    from reconciler.discovery import discover_namespace

    with namespace.rest() as rest:
        inventory = discover_namespace(rest)
    found = {name: len(subs or ()) for name, subs in sorted(inventory.topics.items(), key=lambda kv: name_key(kv[0]))}
    if fmt == "json":
        echo_json({"format_version": 1, "topics": [{"name": name, "subscriptions": count} for name, count in found.items()]})
    else:
        click.echo(_table(f"{len(found)} topic(s)", ["topic", "subscriptions"],
                          [[name, str(count)] for name, count in found.items()]), nl=False)


@click.command()
@click.option("--topic", required=True, help="The topic whose subscriptions to list.")
@format_option("table", "json")
@namespace_options
def subscriptions(topic: str, fmt: str, namespace: Namespace) -> None:
    """List a topic's subscriptions with forwarding and session settings (needs Manage rights)."""
    from reconciler.amqp.errors import NotFoundError
    from reconciler.discovery import discover_namespace

    with namespace.rest() as rest:
        subs = discover_namespace(rest, [topic]).topics[topic]
    if subs is None:
        raise NotFoundError(f"topic {topic!r} does not exist in the namespace")
    if fmt == "json":
        doc = {"format_version": 1, "topic": topic, "subscriptions": [
            {"name": s.name, "forward_to": s.forward_to, "forward_dead_lettered_messages_to":
             s.forward_dead_lettered_messages_to, "requires_session": s.requires_session, "status": s.status}
            for s in subs
        ]}
        echo_json(doc)
    else:
        rows = [[s.name, s.forward_to or "", "yes" if s.requires_session else "no", s.status] for s in subs]
        click.echo(_table(f"{topic}: {len(subs)} subscription(s)", ["subscription", "forwards to", "sessions", "status"],
                          rows), nl=False)
