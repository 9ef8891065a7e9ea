"""The routing-health document (``sbrules analyze``, and the impact report's ``routing_health``
section) as typed, frozen values.

:mod:`reconciler.traffic.analysis.health` builds it from one Spark pass; the renderers read it;
``to_json()`` writes the document (``schemas/analyze.schema.json``) and ``from_json()`` reads it back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from reconciler.traffic.report.parts import (
    DocumentKind,
    ExampleMessage,
    TimeRange,
    examples_from_json,
    examples_json,
    renamed,
    topic_json,
)

#: The ``sbrules analyze`` document: only it has ``skipped_topics``.
ANALYSIS = DocumentKind("routing-health document", "skipped_topics", 1, "analyze.schema.json")

@dataclass(frozen=True)
class Group:
    """A value of a system property, and how many unrouted messages carry it."""

    value: str
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "count": self.count}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Group":
        return cls(doc["value"], doc["count"])


@dataclass(frozen=True)
class Unrouted:
    """A topic's messages that reach no subscription: their count, share, examples and largest groups."""

    count: int
    share: float
    examples: tuple[str, ...] = ()
    #: per breakdown (``label``: sys.Label, ``to``: sys.To): the largest groups, the largest first
    by: Mapping[str, tuple[Group, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        groups = {f"by_{name}": [g.to_json() for g in found] for name, found in self.by.items()}
        return {"count": self.count, "share": self.share, "examples": list(self.examples), **groups}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Unrouted":
        by = {key.removeprefix("by_"): tuple(map(Group.from_json, found)) for key, found in doc.items() if key.startswith("by_")}
        return cls(doc["count"], doc["share"], tuple(doc["examples"]), by)


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Credits":
        return cls(
            doc["per_message"], doc["filters"], doc["exact"], doc["estimated_per_second"], doc["share_of_namespace"],
            doc["before"]["filters"] if "before" in doc else None, doc["span_seconds"], doc["burst"],
        )


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Quota":
        return cls(doc["sql_filters"], doc["sql_limit"], doc["correlation_filters"], doc["correlation_limit"])


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Bystander":
        return cls(doc["subscription"], doc["receives"], doc.get("owner"))


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
        return {
            **topic_json(self.topic, self.namespace_topic),
            "messages": self.messages,
            "unrouted": self.unrouted.to_json(),
            "not_receiving": [{"subscription": s, "reason": reason} for s, reason in self.not_receiving],
            "unknown_subscriptions": list(self.unknown_subscriptions),
            "undeclared_subscriptions": [b.to_json() for b in self.undeclared],
            "time_range": self.time_range.to_json(),
            "credits": self.credits.to_json(),
            "quota": self.quota.to_json(),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TopicHealth":
        return cls(
            topic=doc["topic"],
            messages=doc["messages"],
            unrouted=Unrouted.from_json(doc["unrouted"]),
            not_receiving=tuple((n["subscription"], n["reason"]) for n in doc["not_receiving"]),
            unknown_subscriptions=tuple(doc["unknown_subscriptions"]),
            credits=Credits.from_json(doc["credits"]),
            quota=Quota.from_json(doc["quota"]),
            namespace_topic=doc.get("namespace_topic"),
            time_range=TimeRange.from_json(doc["time_range"]),
            undeclared=tuple(map(Bystander.from_json, doc["undeclared_subscriptions"])),
        )


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Finding":
        return cls(
            doc["code"], doc["severity"], doc["topic"], doc["subscription"], doc["rule"], doc["message"],
            dict(doc["evidence"]),
        )


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "RoutingHealth":
        """The section as :meth:`to_json` writes it (also the members of an ``analyze`` document)."""
        topics = tuple(map(TopicHealth.from_json, doc["topics"]))
        return cls(doc["source"], doc["messages"], topics, tuple(map(Finding.from_json, doc["findings"])))


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
            "format_version": ANALYSIS.format_version,
            "dataset": self.dataset,
            "source": self.health.source,
            "messages": self.health.messages,
            "time_range": self.time_range.to_json(),
            "topics": section["topics"],
            "findings": section["findings"],
            "skipped_topics": list(self.skipped_topics),
            "example_messages": examples_json(self.example_messages),
        }

    @classmethod
    def from_json(cls, doc: Any) -> "Analysis":
        """The document :meth:`to_json` wrote; another kind or version of document, or a malformed
        one, is one :class:`~reconciler.errors.InputError` line."""
        with ANALYSIS.reading(doc) as doc:
            return cls(
                dataset=doc["dataset"],
                health=RoutingHealth.from_json(doc),
                time_range=TimeRange.from_json(doc["time_range"]),
                skipped_topics=tuple(doc["skipped_topics"]),
                example_messages=examples_from_json(doc["example_messages"]),
            )


