"""``sbrules unlock``: remove the apply lock a killed run left on a subscription (after a confirmation)."""

from __future__ import annotations

import click

from reconciler.app import operations
from reconciler.app.operations import project_environment
from reconciler.app.target import TargetOptions
from reconciler.cli.common import env_option, namespace_options, open_target
from reconciler.cli.reconcile import confirm
from reconciler.lock import LockRule, find_locks
from reconciler.names import shown_path
from reconciler.namespace.errors import NotFoundError


def _target(text: str) -> tuple[str, str]:
    topic, _, subscription = text.rpartition("/")
    if not topic or not subscription:
        raise click.UsageError(f"{text!r}: name a subscription as TOPIC/SUBSCRIPTION")
    return topic, subscription


@click.command()
@click.argument("subscriptions", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every subscription of every topic (listing them needs Manage rights).")
@click.option("--yes", "approved", is_flag=True, help="Remove the locks found without asking.")
@env_option
@namespace_options
def unlock(subscriptions: tuple[str, ...], every: bool, approved: bool, env: str | None, namespace: TargetOptions) -> None:
    """Remove the apply lock of TOPIC/SUBSCRIPTION... (or of --all subscriptions).

    A run killed while writing leaves its lock behind; the next apply takes it over once it has seen
    it unchanged for its lease and margin (docs/locking.md), and this removes it at once. The locks
    found are listed, with who holds them and when their holder expected them to end (by its own
    clock: shown, never trusted), before the confirmation. Removing a lock whose holder is still
    running lets another apply write the subscription while its holder does.
    """
    from reconciler.export import discovered_targets

    if every == bool(subscriptions):
        raise click.UsageError("name TOPIC/SUBSCRIPTION... or give --all")
    environment = project_environment(env)
    target = open_target(namespace, environment)
    actual = environment.actual_topic if environment is not None else str  # TOPIC as the rule files declare it
    declared = environment.declared_topic if environment is not None else str

    def shown(topic: str, sub: str) -> str:
        return shown_path(declared(topic), sub, topic)

    if every:
        with target.rest() as rest:
            targets = [(topic, sub) for topic, subs in discovered_targets(rest).items() for sub in subs]
    else:
        targets = [(actual(topic), sub) for topic, sub in map(_target, subscriptions)]
    live = operations.live_rules(target, targets)
    found: list[tuple[str, str, LockRule]] = [
        (topic, sub, lock) for topic, sub in targets for lock in find_locks(live[(topic, sub)])
    ]
    if not found:
        click.echo(f"No locks in {len(targets)} subscription(s).")
        return
    for topic, sub, lock in found:
        click.echo(f"{shown(topic, sub)}: {lock.describe()} ({lock.name}, lease {lock.lease:g}s)")
    click.echo("If a holder above is still running, removing its lock lets another apply write alongside it.")
    confirm(
        approved, f"Remove {len(found)} lock(s)?",
        refused="refusing to unlock without confirmation: input is not a terminal. Pass --yes",
        cancelled="unlock cancelled: nothing was changed",
    )
    with target.amqp() as client:
        for topic, sub, lock in found:
            try:
                client.remove_rule(topic, sub, lock.name)
                click.echo(f"removed {shown(topic, sub)} {lock.name}")
            except NotFoundError:
                click.echo(f"{shown(topic, sub)} {lock.name}: already gone (released or taken over meanwhile)")
