"""Which topics and subscriptions exist: one discovery pass over the management REST API.

AMQP cannot list a namespace's entities; the management REST API can, given Manage rights. The
rule files are compared with what exists: a declared subscription that does not exist is a
located error (sbrules manages rules, not entities), and a subscription of a declared topic that
the files do not mention is *undeclared*. With a Listen-only key the API answers 401/403; then
discovery is skipped, commands work from the names the files declare, and say so once. Discovery
never blocks a command that can work without it: an API that cannot be reached, fails TLS, times
out or is not the Service Bus API is skipped the same way, with one note naming the cause, and
``--no-discovery`` skips it on purpose.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from reconciler.diagnostics import Diagnostic, render_text
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.model import DesiredState, Subscription, Topic
from reconciler.names import name_key, same_name
from reconciler.namespace.errors import (
    AuthenticationError,
    ConnectFailed,
    ConnectionLostError,
    NotFoundError,
    OperationTimeoutError,
    UnauthorizedError,
)
from reconciler.rest.atom import SubscriptionInfo

MANAGE_RIGHTS_NOTE = (
    "discovery needs Manage rights: the management REST API refused these credentials ({reason}), so only the "
    "subscriptions the rule files name were read (undeclared subscriptions are not reported)"
)
SKIPPED_NOTE = (
    "discovery skipped: {reason}, so only the subscriptions the rule files name were read (undeclared "
    "subscriptions are not reported)"
)
#: Failures of the REST API that leave the rules, read over AMQP, within reach: discovery is skipped.
UNAVAILABLE = (ConnectFailed, ConnectionLostError, OperationTimeoutError)


#: Topics whose subscriptions are listed at once: each listing is a walk of pages, one round trip
#: each, and a namespace's topics are independent of each other.
LISTING_CONCURRENCY = 8


class EntityLister(Protocol):
    """Lists entities; called from several threads at once."""

    def list_topics(self) -> list[str]: ...

    def list_subscriptions(self, topic: str) -> list[SubscriptionInfo]: ...


class MissingEntitiesError(SbrulesError):
    """Declared topics or subscriptions that do not exist; each diagnostic names file and line."""

    code = ErrorCode.NOT_FOUND

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__(render_text(self.diagnostics))


class DiscoveryRefused(SbrulesError):
    """A command that cannot work without discovery met a key without Manage rights."""

    code = ErrorCode.AUTH


@dataclass(frozen=True)
class Inventory:
    """What exists, per topic asked about: its subscriptions, or None when the topic does not exist.

    ``refused`` is set (and ``topics`` empty) when the API would not answer for lack of rights;
    ``skipped`` says why nothing was listed otherwise (unreachable, ``--no-discovery``).
    """

    topics: Mapping[str, tuple[SubscriptionInfo, ...] | None] = field(default_factory=dict)
    refused: str | None = None
    skipped: str | None = None

    @property
    def listed(self) -> bool:
        """Whether the topics were listed: only then is a name missing from them known to be absent."""
        return not (self.refused or self.skipped)

    @property
    def note(self) -> str | None:
        """The one line a command prints when discovery was refused or skipped."""
        if self.refused:
            return MANAGE_RIGHTS_NOTE.format(reason=self.refused)
        return SKIPPED_NOTE.format(reason=self.skipped) if self.skipped else None

    def subscriptions(self, topic: str) -> tuple[SubscriptionInfo, ...] | None:
        for name, subs in self.topics.items():
            if same_name(name, topic):
                return subs
        return None


def _refusal(exc: UnauthorizedError) -> str:
    return f"HTTP {exc.status}" if exc.status else "unauthorized"


def discover(rest: EntityLister, topics: Sequence[str], *, enabled: bool = True) -> Inventory:
    """The subscriptions of each of ``topics`` (listed ``LISTING_CONCURRENCY`` topics at a time); an
    Inventory with ``refused`` set for a Listen-only key, or ``skipped`` when the API cannot be used
    (or ``enabled`` is False)."""
    if not enabled:
        return Inventory(skipped="--no-discovery was given")

    def listing(topic: str) -> tuple[SubscriptionInfo, ...] | None:
        try:
            return tuple(rest.list_subscriptions(topic))
        except NotFoundError:
            return None

    try:
        with ThreadPoolExecutor(max(1, min(LISTING_CONCURRENCY, len(topics))), "sbrules-discovery") as pool:
            found = dict(zip(topics, pool.map(listing, topics)))
    except AuthenticationError:
        raise  # no token at all (expired, no credential): nothing else would work either
    except UnauthorizedError as exc:
        return Inventory(refused=_refusal(exc))
    except UNAVAILABLE as exc:
        return Inventory(skipped=f"the management REST API could not be used ({exc})")
    return Inventory(found)


def discover_namespace(rest: EntityLister, topics: Sequence[str] = ()) -> Inventory:
    """Every topic of the namespace (or only ``topics``) with its subscriptions; raises DiscoveryRefused
    for a key without Manage rights, since nothing can be done from declared names here."""
    try:
        names = list(topics) or rest.list_topics()
    except AuthenticationError:
        raise
    except UnauthorizedError as exc:
        raise DiscoveryRefused(_needs_manage(_refusal(exc))) from None
    inventory = discover(rest, names)
    if inventory.refused:
        raise DiscoveryRefused(_needs_manage(inventory.refused))
    return inventory


def _needs_manage(reason: str) -> str:
    return (
        f"listing topics and subscriptions needs Manage rights: the management REST API refused these "
        f"credentials ({reason}); use a key with Manage rights (or, with --auth entra, an identity with the "
        f"Azure Service Bus Data Owner role), or name what to read with --topic and --subscription"
    )


def missing_entities(desired: DesiredState, inventory: Inventory) -> list[Diagnostic]:
    """A located error for each declared topic or subscription the namespace does not have."""
    if not inventory.listed:
        return []
    out: list[Diagnostic] = []
    for topic in desired.topics:
        existing = inventory.subscriptions(topic.name)
        if existing is None:
            out.append(Diagnostic(
                "error", "missing-topic",
                f"topic {topic.name!r} does not exist in the namespace; sbrules manages rules, not entities: "
                f"create the topic and its subscriptions first (portal, `az servicebus topic create --name "
                f"{topic.name} ...`, or your infrastructure code), then run this again",
                topic.origin,
            ))
            continue
        names = {name_key(s.name) for s in existing}
        out += [missing_subscription(topic, sub) for sub in topic.subscriptions if name_key(sub.name) not in names]
    return out


def missing_subscription(topic: Topic, sub: Subscription) -> Diagnostic:
    """The located error for a declared subscription the namespace does not have."""
    return Diagnostic(
        "error", "missing-subscription",
        f"subscription {topic.name}/{sub.name} does not exist in the namespace; sbrules manages rules, not "
        f"entities: create it first (portal, `az servicebus topic subscription create --topic-name {topic.name} "
        f"--name {sub.name} ...`, or your infrastructure code), then run this again",
        sub.origin,
    )


def undeclared_subscriptions(desired: DesiredState, inventory: Inventory) -> list[tuple[str, str]]:
    """(topic, subscription) of every subscription of a declared topic that the files do not mention."""
    out = []
    for topic in desired.topics:
        declared = {name_key(s.name) for s in topic.subscriptions}
        for info in inventory.subscriptions(topic.name) or ():
            if name_key(info.name) not in declared:
                out.append((topic.name, info.name))
    return out
