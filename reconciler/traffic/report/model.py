"""The traffic impact report and the routing-health document as typed, frozen values.

The builders (:mod:`reconciler.traffic.analysis.impact`, :mod:`reconciler.traffic.analysis.health`) make them
from one Spark pass; every renderer (text, markdown, html, the Mermaid chart, the routing-health
sections) reads them, and ``to_json()`` is the JSON document (``schemas/traffic-report.schema.json``,
``schemas/analyze.schema.json``). What every format says beyond the numbers — which subscriptions
move most, the verdict, the sample's time span — is derived here, once.

Topic names are the rule files' (declared) names; under an environment that renames a topic, the
namespace's name is kept beside them (``namespace_topic``).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from reconciler.model import Message
from reconciler.plan import Change
from reconciler.scalars import format_timestamp


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 subscription``, ``2,000 subscriptions``."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


#: A topic's declared name from its name in the namespace (an environment may rename topics).
Naming = Callable[[str], str]


def as_declared(topic: str) -> str:
    """The naming of rule files without environment renames: a topic's name is the namespace's."""
    return topic


def named(topic: str, declared: Naming) -> tuple[str, str | None]:
    """A topic's declared name, and its name in the namespace when an environment renames it."""
    name = declared(topic)
    return name, (topic if name != topic else None)


def renamed(topic: str, namespace_topic: str | None) -> str:
    """A topic as a person reads it: its declared name, the namespace's beside it when renamed."""
    return f"{topic} ({namespace_topic} in the namespace)" if namespace_topic else topic


# ------------------------------------------------------------------------------------------------
# The sample
# ------------------------------------------------------------------------------------------------


def iso(micros: int | None) -> str | None:
    """A time in µs since the epoch as ISO 8601 UTC (milliseconds), None when none is known."""
    if micros is None:
        return None
    return format_timestamp(dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros))


@dataclass(frozen=True)
class TimeRange:
    """When the sampled messages were enqueued (ISO 8601 UTC, milliseconds); None where unknown."""

    first: str | None = None
    last: str | None = None

    @property
    def span(self) -> str | None:
        """``enqueued 2024-05-01 10:00:00 → 2024-05-01 12:30:00 UTC``, or None when unknown."""
        if not self.first or not self.last:
            return None
        short = lambda iso: iso.replace("T", " ").removesuffix("Z").split(".")[0]  # noqa: E731
        return f"enqueued {short(self.first)} → {short(self.last)} UTC"

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last}


@dataclass(frozen=True)
class ExampleMessage:
    """An example message as reports show it: its topic, body size and properties."""

    topic: str | None
    body_size: int | None
    message: Message

    def to_json(self) -> dict[str, Any]:
        """The properties in the message JSON shape (``{"sys", "user"}``) that ``sbrules route --message`` reads."""
        return {"topic": self.topic, "body_size": self.body_size, "message": self.message.to_json()}


def _examples_json(found: Mapping[str, ExampleMessage]) -> dict[str, Any]:
    return {ident: example.to_json() for ident, example in sorted(found.items())}


# ------------------------------------------------------------------------------------------------
# The impact of a change, per subscription
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one filter matches and fails on in the sample."""

    matched: int
    errors: int

    def to_json(self) -> dict[str, int]:
        return {"matched": self.matched, "errors": self.errors}


@dataclass(frozen=True)
class RuleTraffic:
    """A declared rule's traffic, and whether Spark evaluates it natively or through Python."""

    name: str
    matched: int
    errors: int
    python: bool = False

    def to_json(self) -> dict[str, Any]:
        evaluation = "python" if self.python else "native"
        return {"name": self.name, "matched": self.matched, "errors": self.errors, "evaluation": evaluation}


@dataclass(frozen=True)
class ChangeTraffic:
    """A rule change (as the plan states it) with what its old and new filter match."""

    change: Change
    before: Outcome | None
    after: Outcome | None

    def to_json(self) -> dict[str, Any]:
        sides = {"before": self.before, "after": self.after}
        return {**self.change.to_json(), "traffic": {k: None if v is None else v.to_json() for k, v in sides.items()}}


@dataclass(frozen=True)
class Examples:
    """Up to three example message ids (sorted) of each bucket of a subscription's messages."""

    gained: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def buckets(self) -> list[tuple[str, tuple[str, ...]]]:
        """The non-empty buckets, named, in the report's order."""
        return [(name, ids) for name, ids in (("gained", self.gained), ("lost", self.lost), ("errors", self.errors)) if ids]

    def to_json(self) -> dict[str, list[str]]:
        return {"gained": list(self.gained), "lost": list(self.lost), "errors": list(self.errors)}


@dataclass(frozen=True)
class SubscriptionImpact:
    """One subscription's delivered messages before → after, split into kept, lost and gained,
    and the messages its declared filters fail on (dead-letter candidates)."""

    topic: str
    subscription: str
    #: where the current rules came from: live, plan, new or unchanged
    current_rules: str
    delivered: int
    delivered_before: int
    gained: int
    lost: int
    errors: int
    examples: Examples = field(default_factory=Examples)
    rules: tuple[RuleTraffic, ...] = ()
    changes: tuple[ChangeTraffic, ...] = ()
    namespace_topic: str | None = None

    @property
    def path(self) -> str:
        return f"{self.topic}/{self.subscription}"

    @property
    def kept(self) -> int:
        """Delivered both before and after the change."""
        return self.delivered_before - self.lost

    @property
    def moved(self) -> int:
        return self.gained + self.lost

    @property
    def changes_traffic(self) -> bool:
        return bool(self.gained or self.lost)

    @property
    def movement(self) -> str:
        """``gains 25 sampled messages (60 → 85)``, ``loses 171 of its 300 sampled messages``."""
        before, after = self.delivered_before, self.delivered
        if not self.gained:
            return f"loses {self.lost:,} of its {plural(before, 'sampled message')}"
        if not self.lost:
            return f"gains {plural(self.gained, 'sampled message')} ({before:,} → {after:,})"
        return f"gains {self.gained:,} and loses {self.lost:,} sampled messages ({before:,} → {after:,})"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "topic": self.topic,
            "subscription": self.subscription,
            "current_rules": self.current_rules,
            "delivered": self.delivered,
            "delivered_before": self.delivered_before,
            "gained": self.gained,
            "lost": self.lost,
            "errors": self.errors,
            "examples": self.examples.to_json(),
            "rules": [rule.to_json() for rule in self.rules],
            "changes": [change.to_json() for change in self.changes],
        }
        if self.namespace_topic:
            doc["namespace_topic"] = self.namespace_topic
        return doc


@dataclass(frozen=True)
class TopicTraffic:
    """A reported topic's sampled messages and those no reported subscription takes."""

    topic: str
    messages: int
    unrouted: int
    namespace_topic: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"topic": self.topic, "messages": self.messages, "unrouted": self.unrouted}
        if self.namespace_topic:
            doc["namespace_topic"] = self.namespace_topic
        return doc


@dataclass(frozen=True)
class RuleRef:
    """A rule of the report; ``reason`` says why it is named (a Python fallback's), when it says."""

    topic: str
    subscription: str
    rule: str
    reason: str | None = None

    @property
    def path(self) -> str:
        return f"{self.topic}/{self.subscription}/{self.rule}"

    def to_json(self) -> dict[str, str]:
        doc = {"topic": self.topic, "subscription": self.subscription, "rule": self.rule}
        return doc if self.reason is None else {**doc, "reason": self.reason}


@dataclass(frozen=True)
class Skipped:
    """A declared subscription not reported on, and why."""

    topic: str
    subscription: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"topic": self.topic, "subscription": self.subscription, "reason": self.reason}


# ------------------------------------------------------------------------------------------------
# Routing health
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """A value of a system property, and how many unrouted messages carry it."""

    value: str
    count: int


@dataclass(frozen=True)
class Unrouted:
    """A topic's messages that reach no subscription: their count, share, examples and largest groups."""

    count: int
    share: float
    examples: tuple[str, ...] = ()
    #: per breakdown (``label``: sys.Label, ``to``: sys.To): the largest groups, the largest first
    by: Mapping[str, tuple[Group, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        groups = {f"by_{name}": [{"value": g.value, "count": g.count} for g in found] for name, found in self.by.items()}
        return {"count": self.count, "share": self.share, "examples": list(self.examples), **groups}


@dataclass(frozen=True)
class Credits:
    """What a sent message costs in throttling credits on a Standard namespace."""

    per_message: int
    filters: int
    #: False when some subscription's rules are unknown (more filters than counted)
    exact: bool
    estimated_per_second: float | None
    share_of_namespace: float | None
    #: In a plan's impact report: the filters on the topic before the change (None elsewhere)
    filters_before: int | None = None
    #: The topic's enqueued span in the sample (None: unknown)
    span_seconds: float | None = None
    #: The span is too short to mean a rate: the sample was published in a burst
    burst: bool = False

    @property
    def amount(self) -> str:
        """``10 credits``, or ``at least 10 credits`` when some filters on the topic are unknown."""
        return f"{self.per_message} credits" if self.exact else f"at least {self.per_message} credits"

    @property
    def rate(self) -> str:
        """The credit rate at the sampled pace, or why there is none."""
        if self.burst:
            return (f"rate not measurable from this sample (its messages were enqueued within "
                    f"{self.span_seconds or 0:,.1f} s, a burst)")
        if self.estimated_per_second is None or self.share_of_namespace is None:
            return "rate unknown (no enqueued times in the sample)"
        bound = "" if self.exact else "at least "
        return (f"{bound}about {self.estimated_per_second:,} credits/s at the sampled rate, "
                f"{self.share_of_namespace * 100:.1f}% of a Standard namespace's 1,000/s")

    @property
    def per_message_before(self) -> int | None:
        return None if self.filters_before is None else self.per_message - self.filters + self.filters_before

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "per_message": self.per_message, "filters": self.filters, "exact": self.exact,
            "estimated_per_second": self.estimated_per_second, "share_of_namespace": self.share_of_namespace,
            "span_seconds": self.span_seconds, "burst": self.burst,
        }
        if self.filters_before is not None:
            out["before"] = {"per_message": self.per_message_before, "filters": self.filters_before}
        return out


@dataclass(frozen=True)
class Quota:
    """A topic's filters against its per-topic limits."""

    sql_filters: int
    sql_limit: int
    correlation_filters: int
    correlation_limit: int

    def to_json(self) -> dict[str, int]:
        return {
            "sql_filters": self.sql_filters, "sql_limit": self.sql_limit,
            "correlation_filters": self.correlation_filters, "correlation_limit": self.correlation_limit,
        }


@dataclass(frozen=True)
class Bystander:
    """A subscription of the topic that the rule files do not name: what it receives (None: its
    rules are unknown)."""

    subscription: str
    receives: int | None
    #: who owns it, where sbrules.yaml's ``owners:`` names one
    owner: str | None = None

    @property
    def shown(self) -> str:
        """``$Default (receives 14)``, ``audit (unknown)``, ``nsb-sales (owned by nservicebus, receives 14)``."""
        owned = f"owned by {self.owner}, " if self.owner else ""
        return f"{self.subscription} ({owned}{'unknown' if self.receives is None else f'receives {self.receives:,}'})"

    def to_json(self) -> dict[str, Any]:
        return {"subscription": self.subscription, "receives": self.receives, **({"owner": self.owner} if self.owner else {})}


@dataclass(frozen=True)
class TopicHealth:
    """One topic's routing health."""

    topic: str
    messages: int
    unrouted: Unrouted
    #: (subscription, reason): the sampling tap and the fall-through, which receive but are not counted
    not_receiving: tuple[tuple[str, str], ...]
    unknown_subscriptions: tuple[str, ...]
    credits: Credits
    quota: Quota
    namespace_topic: str | None = None
    #: when the topic's sampled messages were enqueued
    time_range: TimeRange = field(default_factory=TimeRange)
    #: the topic's subscriptions the files do not name
    undeclared: tuple[Bystander, ...] = ()

    @property
    def title(self) -> str:
        return renamed(self.topic, self.namespace_topic)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "topic": self.topic,
            "messages": self.messages,
            "unrouted": self.unrouted.to_json(),
            "not_receiving": [{"subscription": s, "reason": reason} for s, reason in self.not_receiving],
            "unknown_subscriptions": list(self.unknown_subscriptions),
            "undeclared_subscriptions": [b.to_json() for b in self.undeclared],
            "time_range": self.time_range.to_json(),
            "credits": self.credits.to_json(),
            "quota": self.quota.to_json(),
        }
        if self.namespace_topic:
            doc["namespace_topic"] = self.namespace_topic
        return doc


@dataclass(frozen=True)
class Finding:
    """Something wrong with a rule (codes in docs/analyze.md); ``evidence`` is its JSON object,
    whose keys depend on the code and its ``kind`` (static or traffic)."""

    code: str
    severity: str
    topic: str
    subscription: str | None
    rule: str | None
    message: str
    evidence: Mapping[str, Any]

    @property
    def where(self) -> str:
        return "/".join(part for part in (self.topic, self.subscription, self.rule) if part)

    @property
    def suggestion(self) -> str | None:
        """The cheaper rule a correlation candidate suggests, as JSON: verified on the sample, or
        unverified for want of matching messages; None when the sample contradicts it."""
        suggested = self.evidence.get("suggested")
        if not suggested or (not self.evidence.get("verified") and self.evidence.get("examples")):
            return None
        return json.dumps(suggested, sort_keys=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code, "severity": self.severity, "topic": self.topic, "subscription": self.subscription,
            "rule": self.rule, "message": self.message, "evidence": dict(self.evidence),
        }


@dataclass(frozen=True)
class RoutingHealth:
    """The routing health of a set of subscriptions on a sample: per topic, then the findings."""

    source: str
    messages: int
    topics: tuple[TopicHealth, ...]
    findings: tuple[Finding, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "messages": self.messages,
            "topics": [t.to_json() for t in self.topics], "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class Analysis:
    """The ``sbrules analyze`` document: routing health with the sample it was measured on."""

    dataset: str
    health: RoutingHealth
    time_range: TimeRange
    skipped_topics: tuple[str, ...]
    example_messages: Mapping[str, ExampleMessage]

    @property
    def sample_line(self) -> str:
        line = f"Sample {self.dataset}: {self.health.messages:,} messages"
        if self.time_range.first and self.time_range.last:
            line += f" enqueued {self.time_range.first} to {self.time_range.last}"
        if self.skipped_topics:
            line += f"; no sampled messages of {', '.join(self.skipped_topics)}"
        return line

    def to_json(self) -> dict[str, Any]:
        section = self.health.to_json()
        return {
            "format_version": 1,
            "dataset": self.dataset,
            "source": self.health.source,
            "messages": self.health.messages,
            "time_range": self.time_range.to_json(),
            "topics": section["topics"],
            "findings": section["findings"],
            "skipped_topics": list(self.skipped_topics),
            "example_messages": _examples_json(self.example_messages),
        }


# ------------------------------------------------------------------------------------------------
# The impact report
# ------------------------------------------------------------------------------------------------


#: What every format says the unrouted count is (the routing health's receivers: ``analysis.Health.receiving``).
UNROUTED_MEANS = "no subscription receives them; sampling taps and the fall-through are not receivers"


@dataclass(frozen=True)
class ImpactReport:
    """What the declared rules would deliver from a traffic sample, compared with the current rules."""

    messages: int
    time_range: TimeRange
    topics: tuple[TopicTraffic, ...]
    unrouted: int
    unrouted_examples: tuple[str, ...]
    subscriptions: tuple[SubscriptionImpact, ...]
    never_matching_rules: tuple[RuleRef, ...]
    python_fallback_rules: tuple[RuleRef, ...]
    example_messages: Mapping[str, ExampleMessage]
    dataset: str = "?"
    #: "live", or the plan file whose before side is the current rules
    against: str = "live"
    skipped: tuple[Skipped, ...] = ()
    routing_health: RoutingHealth | None = None

    def ranked(self) -> list[SubscriptionImpact]:
        """The subscriptions, those that gain or lose the most messages first; then, in the report's
        order, those that do not change."""
        moving = sorted(
            (s for s in self.subscriptions if s.changes_traffic),
            key=lambda s: (-s.moved, -abs(s.delivered - s.delivered_before), s.topic, s.subscription),
        )
        return moving + [s for s in self.subscriptions if not s.changes_traffic]

    def changed(self) -> list[SubscriptionImpact]:
        """The subscriptions that gain or lose messages, the largest movement first."""
        return [s for s in self.ranked() if s.changes_traffic]

    @property
    def verdict(self) -> str:
        """One line for a reviewer: how many subscriptions change, the biggest move, the errors."""
        subs = self.subscriptions
        moves = self.changed()
        if moves:
            verb = "changes" if len(moves) == 1 else "change"
            line = f"{len(moves):,} of {plural(len(subs), 'subscription')} {verb}; {moves[0].path} {moves[0].movement}"
        else:
            line = f"No subscription changes: the {plural(len(subs), 'subscription')} take the same sampled messages as before"
        failing = [s for s in subs if s.errors]
        if failing:
            errors = sum(s.errors for s in failing)
            line += (
                f"; {plural(errors, 'message copy', 'message copies')} would be dead-lettered "
                f"(filter errors in {plural(len(failing), 'subscription')})"
            )
        return line + "."

    @property
    def compared_with(self) -> str:
        return "the live rules" if self.against == "live" else f"the 'before' side of {self.against}"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "messages": self.messages,
            "time_range": self.time_range.to_json(),
            "topics": [t.to_json() for t in self.topics],
            "unrouted": self.unrouted,
            "unrouted_examples": list(self.unrouted_examples),
            "subscriptions": [s.to_json() for s in self.subscriptions],
            "never_matching_rules": [r.to_json() for r in self.never_matching_rules],
            "python_fallback_rules": [r.to_json() for r in self.python_fallback_rules],
            "example_messages": _examples_json(self.example_messages),
            "dataset": self.dataset,
            "against": self.against,
            "skipped": [s.to_json() for s in self.skipped],
        }
        if self.routing_health is not None:
            doc["routing_health"] = self.routing_health.to_json()
        return doc
