"""``sbrules rules list``: the live rules of one subscription, read over AMQP `$management`."""

from __future__ import annotations

import io
import json
from typing import Any

import click

from reconciler import model
from reconciler.cli.common import connection_option, format_option, require_connection_string


@click.group()
def rules() -> None:
    """Read live subscription rules from a namespace."""


@rules.command("list")
@click.option("--topic", required=True, help="Topic name.")
@click.option("--subscription", required=True, help="Subscription name.")
@format_option("table", "json", "yaml")
@connection_option
@click.option("--auth", type=click.Choice(["sas", "entra"]), default="sas", show_default=True,
              help="sas: keys or signature from the connection string; entra: Entra ID via azure-identity.")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds per request.")
def list_rules(topic: str, subscription: str, fmt: str, connection_string: str | None, auth: str, timeout: float) -> None:
    """List the rules of --topic/--subscription (JSON, a rule-file YAML fragment, or a table)."""
    from reconciler.amqp.client import ManagementClient

    with ManagementClient(require_connection_string(connection_string), timeout=timeout, auth=auth) as client:
        live = client.list_rules(topic, subscription)
    click.echo(render(topic, subscription, live, fmt), nl=False)


def _json_rule(rule: model.Rule) -> dict[str, Any]:
    doc = model.rule_to_doc(rule)
    return {"name": doc["name"], "filter": model.filter_to_doc(rule.filter), "action": doc.get("action")}


def render(topic: str, subscription: str, live: list[model.Rule], fmt: str) -> str:
    """The rules as ``json`` ({"rules": [...]}), ``yaml`` (a rule-file fragment) or a ``table``."""
    if fmt == "json":
        return json.dumps({"rules": [_json_rule(r) for r in live]}, indent=2, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        import yaml

        fragment = {"topic": topic, "subscriptions": {subscription: {"rules": [model.rule_to_doc(r) for r in live]}}}
        return yaml.safe_dump(fragment, sort_keys=False, allow_unicode=True, width=120)
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
