"""``sbrules send``: publish test messages to a topic, so a user closes the loop without SDK code."""

from __future__ import annotations

from typing import Any

import click

from reconciler.app.operations import project_environment
from reconciler.app.target import TargetOptions
from reconciler.cli.common import MESSAGE_HELP, env_option, namespace_options, open_target, read_message
from reconciler.names import shown_topic

#: The most messages one send may publish (test traffic, not a load generator).
MAX_COUNT = 10_000


@click.command()
@click.option("--topic", required=True, help="The topic (or queue) to send to; with --env, as the rule files declare it.")
@click.option("--message", "message_file", required=True, type=click.File("r", encoding="utf-8"), help=MESSAGE_HELP)
@click.option("--count", type=click.IntRange(min=1, max=MAX_COUNT), default=1, show_default=True,
              help="Send the message this many times.")
@env_option
@namespace_options
def send(topic: str, message_file: Any, count: int, env: str | None, namespace: TargetOptions) -> None:
    """Publish a test message, described in the same JSON as ``sbrules route --message`` (typed
    user properties, system properties, body), to TOPIC: the emulator's or a dev namespace's
    subscriptions then hold what their rules let through. Needs a key with Send rights.

    Each message is sent at-least-once (answered when the service accepts it); exit 0 when every
    message was accepted, else the first refusal's error and exit code."""
    message = read_message(message_file)
    environment = project_environment(env)
    target = open_target(namespace, environment)
    actual = environment.actual_topic(topic) if environment is not None else topic  # --topic as declared
    with target.amqp() as client:
        failures = [error for error in client.send_messages(actual, [message] * count) if error is not None]
    sent = count - len(failures)
    where = shown_topic(topic, actual)
    click.echo(f"sent {sent} of {count} message(s) to {where}", err=bool(failures))
    if failures:
        raise failures[0]
