"""``sbrules rules list``: the live rules of one subscription, read over AMQP `$management`."""

from __future__ import annotations

import io

import click

from reconciler import model
from reconciler.app import operations
from reconciler.app.operations import project_environment
from reconciler.app.target import TargetOptions
from reconciler.cli.common import env_option, format_option, namespace_options, open_target


@click.group()
def rules() -> None:
    """Read live subscription rules from a namespace."""


@rules.command("list")
@click.option("--topic", required=True, help="Topic name (with --env, as the rule files declare it).")
@click.option("--subscription", required=True, help="Subscription name.")
@format_option("table", "json", "yaml")
@env_option
@namespace_options
def list_rules(topic: str, subscription: str, fmt: str, env: str | None, namespace: TargetOptions) -> None:
    """List the rules of --topic/--subscription: a rule-file document (JSON or YAML) or a table."""
    environment = project_environment(env)
    target = open_target(namespace, environment)
    actual = environment.actual_topic(topic) if environment is not None else topic
    live = operations.live_rules(target, [(actual, subscription)])
    for path in live.read_over_rest:
        click.echo(f"note: {'/'.join(path)}: rules read over the management REST API (auto-forwarding)", err=True)
    if actual != topic:
        click.echo(f"note: topic {topic} is {actual} in the namespace of environment {env}", err=True)
    click.echo(render(topic, subscription, list(live[(actual, subscription)]), fmt), nl=False)


def render(topic: str, subscription: str, live: list[model.Rule], fmt: str) -> str:
    """The rules as a rule-file document (``json`` or ``yaml``: the same document) or a ``table``."""
    if fmt in ("json", "yaml"):
        from reconciler.export import dump_yaml, rule_file_doc
        from reconciler.json_text import json_text

        doc = rule_file_doc(topic, {subscription: live})
        return json_text(doc) if fmt == "json" else dump_yaml(doc)
    return _table(topic, subscription, live)


def _filter_text(flt: model.Filter) -> str:
    if isinstance(flt, model.SqlFilter):
        return flt.expression
    if isinstance(flt, model.TrueFilter):
        return "true"
    if isinstance(flt, model.FalseFilter):
        return "false"
    parts = [f"{name}={value!r}" for name, value in flt.system_fields().items()]
    parts += [f"{name}={value.describe()}" for name, value in flt.properties]
    return "correlation: " + ", ".join(parts)


def _table(topic: str, subscription: str, live: list[model.Rule]) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{topic}/{subscription}: {len(live)} rule(s)", title_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("filter")
    table.add_column("action")
    for rule in live:
        action = rule.action.expression if isinstance(rule.action, model.SqlRuleAction) else ""
        table.add_row(Text(rule.name), Text(_filter_text(rule.filter)), Text(action))
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(table)
    return out.getvalue()
