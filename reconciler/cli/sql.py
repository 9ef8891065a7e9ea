"""``sbrules sql check`` (validate and normalise one expression) and ``sbrules route`` (where would
this message go?), both offline and built on ``reconciler.sql``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from reconciler.app.operations import load_rules
from reconciler.cli.common import MESSAGE_HELP, env_option, format_option, read_message
from reconciler.cli.output import ExitCode, echo_json
from reconciler.errors import InputError
from reconciler.model import DesiredState, Message
from reconciler.names import same_name, shown_path
from reconciler.sql import Outcome, SqlError, canonical_action, canonical_filter
from reconciler.sql.router import topic_router


@click.group()
def sql() -> None:
    """Work with Service Bus SQL filter and action expressions."""


@sql.command()
@click.argument("expression")
@click.option("--action", "is_action", is_flag=True, help="Check a rule action (SET/REMOVE) instead of a filter.")
@format_option("text", "json")
def check(expression: str, is_action: bool, fmt: str) -> None:
    """Print the canonical form of EXPRESSION, or the error with a caret. Exit 0 valid, 1 invalid."""
    kind = "action" if is_action else "filter"
    try:
        normal = canonical_action(expression) if is_action else canonical_filter(expression)
    except SqlError as exc:
        if fmt == "json":
            diagnostic = {"message": exc.message, "line": exc.line, "column": exc.column}
            echo_json({"format_version": 1, "kind": kind, "valid": False, "canonical": None, "diagnostic": diagnostic})
        else:
            click.echo(f"error: {exc.render(expression)}", err=True)
        raise SystemExit(ExitCode.ERROR) from None
    if fmt == "json":
        echo_json({"format_version": 1, "kind": kind, "valid": True, "canonical": normal, "diagnostic": None})
    else:
        click.echo(normal)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--message",
    "message_file",
    required=True,
    type=click.File("r", encoding="utf-8"),
    help=MESSAGE_HELP,
)
@click.option("--topic", help="Only route through this topic's subscriptions.")
@click.option(
    "--allow-invalid",
    is_flag=True,
    help="Route through rule files that fail validate: the rules that could be read are used, a rule the "
    "service would refuse evaluates as it would here, and a warning on stderr counts the errors.",
)
@format_option("text", "json")
@env_option
def route(
    paths: tuple[Path, ...], message_file: Any, topic: str | None, allow_invalid: bool, fmt: str, env: str | None
) -> None:
    """Route one sample message through the declared rules (default: ./rules) and show, per
    subscription, whether it is delivered, how each rule evaluated and the copies after actions.
    With --env, through that environment's rules; topics are named as the rule files declare them
    (in --topic and in the output), the namespace's name beside a renamed one.

    Rule files that fail ``sbrules validate`` are refused (exit 1) unless --allow-invalid."""
    message = read_message(message_file)
    rules = load_rules(paths, env, allow_invalid=allow_invalid)
    if rules.errors:
        click.echo(
            f"warning: the rule files have {rules.errors} errors (see sbrules validate); routing through the "
            "rules that could be read",
            err=True,
        )
    state = rules.state
    environment = rules.environment
    if topic is not None and environment is not None:
        topic = environment.actual_topic(topic)
    deliveries = route_state(state, message, topic)
    if environment is not None:
        for delivery in deliveries:
            declared = environment.declared_topic(delivery["topic"])
            if declared != delivery["topic"]:
                delivery["namespace_topic"], delivery["topic"] = delivery["topic"], declared
    if fmt == "json":
        echo_json({"format_version": 1, "deliveries": deliveries})
    else:
        unmanaged = {(t.name, s.name) for t, s in state.subscriptions() if s.rules is None}
        _print_text(deliveries, unmanaged)


def route_state(state: DesiredState, message: Message, topic: str | None = None) -> list[dict[str, Any]]:
    """The ``deliveries`` list of ``route --format json`` for every (selected) subscription.

    Subscriptions whose rules the files leave unmanaged are routed as if they had ``$Default``.
    """
    if topic is not None and state.topic(topic) is None:
        known = ", ".join(t.name for t in state.topics) or "none"
        raise InputError(f"topic {topic!r} is not declared (declared: {known})")
    deliveries = []
    for top in state.topics:
        if topic is not None and not same_name(top.name, topic):
            continue
        router = topic_router(top)
        for (name, _rules), result in zip(router.subscriptions, router.route_every_rule(message)):
            deliveries.append(
                {
                    "topic": top.name,
                    "subscription": name,
                    "delivered": result.delivered,
                    "rules": [_rule_json(rule, outcome) for rule, outcome in result.rule_results],
                    "copies": [{"rule": rule, **copy.to_json()} for rule, copy in result.copies],
                }
            )
    return deliveries


def _rule_json(name: str, outcome: Outcome) -> dict[str, Any]:
    return {"name": name, "result": outcome.label, "error": outcome.error}


_RESULT_STYLE = {"true": "green", "false": "dim", "unknown": "yellow", "error": "bold red"}


def _print_text(deliveries: list[dict[str, Any]], unmanaged: set[tuple[str, str]]) -> None:
    console = Console(highlight=False, soft_wrap=True)
    if not deliveries:
        console.print("no subscriptions declared")
        return
    for delivery in deliveries:
        where = escape(shown_path(delivery["topic"], delivery["subscription"], delivery.get("namespace_topic")))
        copies = len(delivery["copies"])
        if delivery["delivered"]:
            verdict = f"[bold green]delivered[/] ({copies} cop{'y' if copies == 1 else 'ies'})"
        else:
            verdict = "[bold red]not delivered[/]"
        unmanaged_here = (delivery.get("namespace_topic", delivery["topic"]), delivery["subscription"]) in unmanaged
        note = " [dim](rules unmanaged: routed as $Default)[/]" if unmanaged_here else ""
        console.print(f"[bold]{where}[/]: {verdict}{note}")
        for rule in delivery["rules"]:
            style = _RESULT_STYLE[rule["result"]]
            line = f"  rule {escape(rule['name'])}: [{style}]{rule['result']}[/]"
            if rule["error"]:
                line += f" — {escape(rule['error'])}"
            console.print(line)
        for copy in delivery["copies"]:
            origin = "unchanged" if copy["rule"] is None else f"from rule {escape(copy['rule'])}"
            console.print(f"  copy ({origin}): sys={escape(_compact(copy['sys']))} user={escape(_compact(copy['user']))}")


def _compact(values: dict[str, Any]) -> str:
    return json.dumps(values, separators=(", ", ": "), ensure_ascii=False, default=str)
