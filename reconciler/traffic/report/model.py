"""The traffic impact report as typed, frozen values.

:mod:`reconciler.traffic.analysis.impact` builds it from one Spark pass; every renderer (text,
markdown, html, the Mermaid chart) reads it; ``to_json()`` writes the document
(``schemas/traffic-report.schema.json``) and ``from_json()`` reads it back. What every format says
beyond the numbers — which subscriptions move most, the verdict — is derived here, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from reconciler.plan import Change
from reconciler.traffic.report.parts import (
    DocumentKind,
    ExampleMessage,
    TimeRange,
    examples_from_json,
    examples_json,
    plural,
    topic_json,
)
from reconciler.traffic.report.routing import RoutingHealth


@dataclass(frozen=True)
class Outcome:
    """What one filter matches and fails on in the sample."""

    matched: int
    errors: int

    def to_json(self) -> dict[str, int]:
        return {"matched": self.matched, "errors": self.errors}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> "Outcome | None":
        return None if doc is None else cls(doc["matched"], doc["errors"])


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "RuleTraffic":
        return cls(doc["name"], doc["matched"], doc["errors"], {"native": False, "python": True}[doc["evaluation"]])


@dataclass(frozen=True)
class ChangeTraffic:
    """A rule change (as the plan states it) with what its old and new filter match."""

    change: Change
    before: Outcome | None
    after: Outcome | None

    def to_json(self) -> dict[str, Any]:
        sides = {"before": self.before, "after": self.after}
        return {**self.change.to_json(), "traffic": {k: None if v is None else v.to_json() for k, v in sides.items()}}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "ChangeTraffic":
        traffic = doc["traffic"]
        return cls(Change.from_json(doc), Outcome.from_json(traffic["before"]), Outcome.from_json(traffic["after"]))


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Examples":
        return cls(tuple(doc["gained"]), tuple(doc["lost"]), tuple(doc["errors"]))


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
        return {
            **topic_json(self.topic, self.namespace_topic),
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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "SubscriptionImpact":
        return cls(
            topic=doc["topic"],
            subscription=doc["subscription"],
            current_rules=doc["current_rules"],
            delivered=doc["delivered"],
            delivered_before=doc["delivered_before"],
            gained=doc["gained"],
            lost=doc["lost"],
            errors=doc["errors"],
            examples=Examples.from_json(doc["examples"]),
            rules=tuple(map(RuleTraffic.from_json, doc["rules"])),
            changes=tuple(map(ChangeTraffic.from_json, doc["changes"])),
            namespace_topic=doc.get("namespace_topic"),
        )


@dataclass(frozen=True)
class TopicTraffic:
    """A reported topic's sampled messages and those no reported subscription takes."""

    topic: str
    messages: int
    unrouted: int
    namespace_topic: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**topic_json(self.topic, self.namespace_topic), "messages": self.messages, "unrouted": self.unrouted}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TopicTraffic":
        return cls(doc["topic"], doc["messages"], doc["unrouted"], doc.get("namespace_topic"))


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "RuleRef":
        return cls(doc["topic"], doc["subscription"], doc["rule"], doc.get("reason"))


@dataclass(frozen=True)
class Skipped:
    """A declared subscription not reported on, and why."""

    topic: str
    subscription: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"topic": self.topic, "subscription": self.subscription, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Skipped":
        return cls(doc["topic"], doc["subscription"], doc["reason"])


# ------------------------------------------------------------------------------------------------
# The impact report
# ------------------------------------------------------------------------------------------------


#: The traffic impact report (``impact``, ``plan --traffic``): only it has ``never_matching_rules``.
IMPACT_REPORT = DocumentKind("traffic impact report", "never_matching_rules", 1, "traffic-report.schema.json")

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
        """The document: what it is and what it compared first, the counts next, the example messages last."""
        doc: dict[str, Any] = {
            "format_version": IMPACT_REPORT.format_version,
            "dataset": self.dataset,
            "against": self.against,
            "messages": self.messages,
            "time_range": self.time_range.to_json(),
            "topics": [t.to_json() for t in self.topics],
            "unrouted": self.unrouted,
            "unrouted_examples": list(self.unrouted_examples),
            "subscriptions": [s.to_json() for s in self.subscriptions],
            "never_matching_rules": [r.to_json() for r in self.never_matching_rules],
            "python_fallback_rules": [r.to_json() for r in self.python_fallback_rules],
            "skipped": [s.to_json() for s in self.skipped],
        }
        if self.routing_health is not None:
            doc["routing_health"] = self.routing_health.to_json()
        doc["example_messages"] = examples_json(self.example_messages)
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> "ImpactReport":
        """The document :meth:`to_json` wrote; another kind or version of document, or a malformed
        one, is one :class:`~reconciler.errors.InputError` line."""
        with IMPACT_REPORT.reading(doc) as doc:
            health = doc.get("routing_health")
            return cls(
                messages=doc["messages"],
                time_range=TimeRange.from_json(doc["time_range"]),
                topics=tuple(map(TopicTraffic.from_json, doc["topics"])),
                unrouted=doc["unrouted"],
                unrouted_examples=tuple(doc["unrouted_examples"]),
                subscriptions=tuple(map(SubscriptionImpact.from_json, doc["subscriptions"])),
                never_matching_rules=tuple(map(RuleRef.from_json, doc["never_matching_rules"])),
                python_fallback_rules=tuple(map(RuleRef.from_json, doc["python_fallback_rules"])),
                example_messages=examples_from_json(doc["example_messages"]),
                dataset=doc["dataset"],
                against=doc["against"],
                skipped=tuple(map(Skipped.from_json, doc["skipped"])),
                routing_health=None if health is None else RoutingHealth.from_json(health),
            )
