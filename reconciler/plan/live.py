"""A plan against the live namespace: discover, check that what the files declare exists, read, diff.

One discovery pass over the management REST API lists the subscriptions of every declared topic
(so a declared subscription that does not exist is a located error, and an existing one no file
mentions is reported as undeclared); the rules are then read over AMQP, pipelined, with the REST
API as the fallback where AMQP refuses (auto-forwarding). A key without Manage rights, an API that
cannot be used, or ``--no-discovery`` skips discovery: the plan is made from the declared names and
says so once.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Callable, Collection, Protocol, Sequence

from reconciler.discovery import (
    EntityLister,
    Inventory,
    MissingEntitiesError,
    discover,
    missing_entities,
    missing_subscription,
    undeclared_subscriptions,
)
from reconciler.model import DesiredState, Rule
from reconciler.names import name_key
from reconciler.observe import DEFAULT_CONCURRENCY, FallbackReader, RuleReader, observe, observe_subscriptions
from reconciler.plan.compare import compute_plan
from reconciler.plan.contest import LastApply, with_contests
from reconciler.plan.ops import Plan
from reconciler.rulefiles.loader import with_bystanders

REST_NOTE = (
    "{path}: rules read over the management REST API (auto-forwarding is enabled, and the service "
    "refuses to enumerate its rules over AMQP)"
)


class RestReader(EntityLister, FallbackReader, Protocol):
    """What the live plan needs of the REST client: listing, and reading rules AMQP refuses."""


def plan_live(
    client: RuleReader, rest: RestReader, desired: DesiredState, *, concurrency: int = DEFAULT_CONCURRENCY,
    discovery: bool = True, bystanders: bool = False,
    clock: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.timezone.utc), since: LastApply | None = None,
) -> Plan:
    """The plan for ``desired`` against the namespace, with undeclared subscriptions and reading notes
    (``discovery=False``: from the declared names only, as with a Listen-only key).

    The rules of undeclared subscriptions are read where they change what the plan writes (a topic
    with a fall-through subscription, whose filter leaves their messages out too), where sbrules.yaml's
    ``owners:`` claims them (a traffic report of the saved plan counts what they receive, as the
    owner's) and, with ``bystanders``, everywhere (a traffic report counts what they receive). ``clock`` tells when the
    namespace was read, from which the plan tells the ages of live rules; ``since``, the previous
    apply, makes the plan name the declared rules another writer re-created after it (contested)."""
    read_at = clock()
    inventory: Inventory = discover(rest, [t.name for t in desired.topics], enabled=discovery)
    missing = missing_entities(desired, inventory)
    if missing:
        raise MissingEntitiesError(missing)
    undeclared = undeclared_subscriptions(desired, inventory)
    claimed = {(t, s): owner for t, s in undeclared if (owner := desired.owners.of_subscription(t, s))}
    others = read_bystanders(
        client, desired, undeclared, every=bystanders, concurrency=concurrency, fallback=rest, claimed=claimed
    )
    unmanaged = [
        (t.name, s.name) for t, s in desired.subscriptions()
        if not s.managed and (bystanders or desired.owners.of_subscription(t.name, s.name))
    ]
    alone = observe_subscriptions(client, unmanaged, concurrency=concurrency, missing_ok=True, fallback=rest)
    desired = with_bystanders(desired, others)
    actual = observe(client, desired, concurrency=concurrency, fallback=rest, missing_ok=True)
    absent = [
        missing_subscription(topic, sub)
        for topic, sub in desired.subscriptions()
        if sub.managed and (topic.name, sub.name) not in actual
    ]
    if absent:
        raise MissingEntitiesError(absent)
    plan = compute_plan(desired, actual)
    if since is not None:
        plan = with_contests(plan, desired, actual, since)
    notes = [REST_NOTE.format(path=f"{t}/{s}") for t, s in actual.read_over_rest]
    if inventory.note:
        notes.append(inventory.note)
    return dataclasses.replace(
        plan, undeclared=tuple(undeclared), notes=(*plan.notes, *notes), bystanders={**others, **alone},
        listed=inventory.listed, claimed=claimed, read_at=read_at,
    )


def read_bystanders(
    client: RuleReader, desired: DesiredState, undeclared: Sequence[tuple[str, str]], *, every: bool,
    concurrency: int = DEFAULT_CONCURRENCY, fallback: FallbackReader | None = None,
    claimed: Collection[tuple[str, str]] = (),
) -> dict[tuple[str, str], tuple[Rule, ...]]:
    """The live rules of the ``undeclared`` subscriptions on topics with a fall-through subscription,
    and of those an owner ``claimed`` (``every``: of all)."""
    with_fallthrough = {name_key(t.name) for t in desired.topics if any(s.fallthrough for s in t.subscriptions)}
    wanted = [(t, s) for t, s in undeclared if every or name_key(t) in with_fallthrough or (t, s) in claimed]
    live = observe_subscriptions(client, wanted, concurrency=concurrency, missing_ok=True, fallback=fallback)
    return dict(live.items())
