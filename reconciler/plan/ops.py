"""The plan as data: rule operations per subscription, and the versioned JSON a person reviews.

A Plan is what CI applies unchanged: it serialises to ``schemas/plan.schema.json`` with rules in
the rule files' form, and records a fingerprint of the live rule set of each subscription it was
computed from, so apply can refuse a stale plan.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Mapping

from reconciler.errors import ErrorCode, SbrulesError
from reconciler.limits import RULE_NAME, TEMP_RULE_SUFFIX
from reconciler.model import Rule, rule_from_doc, rule_to_doc
from reconciler.names import shown_path

#: Version 2 names a change's kind ``change``; version 1 called it ``action``, the word a rule's SQL
#: action uses. Apply still reads version 1 plans.
PLAN_FORMAT_VERSION = 2

#: Suffix of the temporary rule a gapless replacement adds; plan and apply treat any live rule
#: carrying it as a leftover of an interrupted apply and remove it (reserved in ``limits``).
TEMP_SUFFIX = TEMP_RULE_SUFFIX


class PlanError(SbrulesError):
    """The declared rules cannot be planned (bad SQL, reserved name, an unreadable plan file)."""

    code = ErrorCode.INPUT


class ChangeKind(StrEnum):
    """What a change does to one rule, in the order apply runs them within a subscription."""

    CREATE = "create"
    REPLACE = "replace"
    DELETE = "delete"

    @property
    def sides(self) -> tuple[bool, bool]:
        """Whether a change of this kind has a ``before`` (live) and an ``after`` (declared) rule."""
        return self is not ChangeKind.CREATE, self is not ChangeKind.DELETE


class DriftKind(StrEnum):
    """How drift names a change: the live state moved away from the files."""

    ADDED = "added out of band"
    REMOVED = "removed"
    MODIFIED = "modified"

    @classmethod
    def of(cls, kind: ChangeKind) -> "DriftKind":
        """A rule the plan would delete was added out of band; one it would create was removed."""
        return {ChangeKind.DELETE: cls.ADDED, ChangeKind.CREATE: cls.REMOVED, ChangeKind.REPLACE: cls.MODIFIED}[kind]


def temp_rule_name(name: str) -> str:
    """The temporary name used while replacing ``name`` without a gap (a legal rule name's length)."""
    candidate = name + TEMP_SUFFIX
    if len(candidate) <= RULE_NAME.value:
        return candidate
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    keep = RULE_NAME.value - len(TEMP_SUFFIX) - len(digest) - 1
    return f"{name[:keep]}-{digest}{TEMP_SUFFIX}"



@dataclass(frozen=True)
class Change:
    """One rule operation: create (after only), delete (before only) or replace (both)."""

    topic: str
    subscription: str
    rule: str
    kind: ChangeKind
    reasons: tuple[str, ...]
    before: Rule | None = None
    after: Rule | None = None
    diff: tuple[str, ...] = ()
    #: Which framework the live rule looks like it was written by (a recognizer's label).
    looks_like: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "topic": self.topic,
            "subscription": self.subscription,
            "rule": self.rule,
            "change": self.kind.value,
            "reasons": list(self.reasons),
            "before": rule_to_doc(self.before) if self.before else None,
            "after": rule_to_doc(self.after) if self.after else None,
        }
        if self.diff:
            doc["diff"] = list(self.diff)
        doc |= live_facts(self.before, self.looks_like)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Change":
        change = cls(
            topic=doc["topic"],
            subscription=doc["subscription"],
            rule=doc["rule"],
            kind=ChangeKind(doc["change"]),
            reasons=tuple(doc["reasons"]),
            before=rule_from_doc(doc["before"]) if doc.get("before") else None,
            after=rule_from_doc(doc["after"]) if doc.get("after") else None,
            diff=tuple(doc.get("diff", ())),
            looks_like=doc.get("looks_like"),
        )
        if change.before is not None and doc.get("created_at"):
            change = replace(change, before=replace(change.before, created_at=read_time(doc["created_at"])))
        if change.kind.sides != (change.before is not None, change.after is not None):
            raise ValueError(f"change of rule {change.rule!r}: {change.kind.value} with that before/after")
        return change


def live_facts(rule: Rule | None, looks_like: str | None) -> dict[str, Any]:
    """What a plan knows of a live rule beyond its definition: when it was created, and which
    framework it looks like it was written by (each only where known)."""
    facts: dict[str, Any] = {}
    if rule is not None and rule.created_at is not None:
        facts["created_at"] = iso_time(rule.created_at)
    if looks_like:
        facts["looks_like"] = looks_like
    return facts


@dataclass(frozen=True)
class Contest:
    """A rule another writer changed after sbrules wrote it: re-created after the previous apply
    (``--since``), or found changed, removed, re-created or added again right after apply's own
    write (``found``; ``created_at`` is the live rule's, None when it is gone)."""

    topic: str
    subscription: str
    rule: str
    created_at: _dt.datetime | None
    applied_at: _dt.datetime
    likely_owner: str | None = None
    found: str = "re-created"

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "subscription": self.subscription, "rule": self.rule,
            "created_at": iso_time(self.created_at) if self.created_at else None,
            "applied_at": iso_time(self.applied_at), "likely_owner": self.likely_owner, "found": self.found,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Contest":
        created = read_time(doc["created_at"]) if doc.get("created_at") else None
        return cls(doc["topic"], doc["subscription"], doc["rule"], created, read_time(doc["applied_at"]),
                   doc.get("likely_owner"), doc.get("found", "re-created"))

    def describe(self) -> str:
        owner = f"; likely owner: {self.likely_owner}" if self.likely_owner else ""
        created = f"created {_shown(self.created_at)}" if self.created_at else "created at an unknown time"
        what = {
            "re-created": f"{created}, after sbrules applied it at {_shown(self.applied_at)}",
            "changed": f"changed by another writer ({created}) right after sbrules wrote it at {_shown(self.applied_at)}",
            "removed": f"removed by another writer right after sbrules wrote it at {_shown(self.applied_at)}",
            "re-added": f"added again ({created}) right after sbrules removed it at {_shown(self.applied_at)}",
        }[self.found]
        return (f"contested {self.topic}/{self.subscription} rule {self.rule!r}: {what}{owner} (another writer "
                "writes it too: hand it to one owner, see docs/gitops.md)")


def _shown(when: _dt.datetime) -> str:
    return f"{when.astimezone(_dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def iso_time(when: _dt.datetime) -> str:
    """A time in the plan's JSON: UTC, ISO 8601 with ``Z``."""
    return when.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")


def read_time(text: str) -> _dt.datetime:
    """A ``created_at`` as :func:`live_facts` writes it."""
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Foreign:
    """A live rule outside its subscription's ``owns:``: never changed, never drift; shown with its
    filter, its creation time and, where known, its owner and the framework it looks like."""

    rule: Rule
    owner: str | None = None
    looks_like: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"rule": rule_to_doc(self.rule), **({"owner": self.owner} if self.owner else {})}
        return doc | live_facts(self.rule, self.looks_like)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Foreign":
        rule = rule_from_doc(doc["rule"])
        if doc.get("created_at"):
            rule = replace(rule, created_at=read_time(doc["created_at"]))
        return cls(rule, doc.get("owner"), doc.get("looks_like"))


@dataclass(frozen=True)
class SubscriptionPlan:
    """The changes for one managed subscription, in execution order, and the state they assume."""

    topic: str
    subscription: str
    fingerprint: str
    target_fingerprint: str
    unchanged: int
    rules_after: int
    allow_empty: bool = False
    changes: tuple[Change, ...] = ()
    #: The topic as the rule files declare it, where the environment renames it to ``topic``.
    declared_topic: str | None = None
    #: The ``owns:`` patterns (None: every live rule is sbrules'); apply reads only the owned rules.
    owns: tuple[str, ...] | None = None
    #: The live rules ``owns`` leaves out: never changed, never drift, shown for the reviewer.
    foreign: tuple[Foreign, ...] = ()

    @property
    def path(self) -> str:
        """The namespace's ``topic/subscription`` (what ``unlock`` and the journal take)."""
        return f"{self.topic}/{self.subscription}"

    @property
    def shown_path(self) -> str:
        """The path as a person reads it: declared, the namespace's topic name beside a renamed one."""
        return shown_path(self.declared_topic or self.topic, self.subscription, self.topic)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "subscription": self.subscription,
            "fingerprint": self.fingerprint,
            "target_fingerprint": self.target_fingerprint,
            "unchanged": self.unchanged,
            "rules_after": self.rules_after,
            "allow_empty": self.allow_empty,
            **({"declared_topic": self.declared_topic} if self.declared_topic else {}),
            **({"owns": list(self.owns)} if self.owns is not None else {}),
            **({"foreign": [f.to_json() for f in self.foreign]} if self.foreign else {}),
        }


@dataclass(frozen=True)
class Skipped:
    """A declared subscription the plan leaves alone, and why."""

    topic: str
    subscription: str
    reason: str


@dataclass(frozen=True)
class Plan:
    subscriptions: tuple[SubscriptionPlan, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    warnings: tuple[str, ...] = ()
    #: Subscriptions of declared topics that exist but that no rule file mentions (topic, subscription).
    undeclared: tuple[tuple[str, str], ...] = ()
    #: How the namespace was read, where it matters (rules read over REST, discovery refused).
    notes: tuple[str, ...] = ()
    #: The sbrules.yaml environment the rules were rendered for (None without one).
    environment: str | None = None
    #: The namespace read (host, and port when not the default): a saved plan applies only there.
    namespace: str | None = None
    #: The live rules of the subscriptions it leaves alone, where the plan read them: undeclared ones
    #: (on a topic with a fall-through subscription, and for a traffic report) and, for a traffic
    #: report, declared unmanaged ones. They receive messages too. Saved with the plan
    #: (``undeclared[].rules``, ``skipped[].rules``), so a report on the saved plan knows what the plan knew.
    bystanders: Mapping[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict, compare=False)
    #: Discovery listed every subscription of the declared topics: ``undeclared`` is all of the others
    #: (a traffic report's credits are then exact where their rules are known).
    listed: bool = False
    #: When the namespace was read (the ages of live rules are told from it).
    read_at: _dt.datetime | None = field(default=None, compare=False)
    #: Declared rules found re-created since the previous apply (``--since``).
    contested: tuple[Contest, ...] = ()
    #: The undeclared subscriptions a named owner (sbrules.yaml ``owners:``) claims: not drift.
    claimed: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @property
    def unclaimed(self) -> tuple[tuple[str, str], ...]:
        """The undeclared subscriptions nobody claims: what ``drift --strict`` counts."""
        return tuple(u for u in self.undeclared if u not in self.claimed)

    def check_target(self, environment: str | None, namespace: str) -> None:
        """Refuse to apply this plan to another namespace, or for another environment, than it was made for."""
        made_for = f" (environment {self.environment})" if self.environment else ""
        if self.namespace is not None and self.namespace != namespace:
            raise PlanError(
                f"this plan was made for namespace {self.namespace}{made_for}; refusing to apply it to {namespace}"
            )
        if environment is not None and self.environment is not None and environment != self.environment:
            raise PlanError(f"this plan was made for environment {self.environment}, not {environment}")

    def drifted(self, strict: bool = False) -> bool:
        """Rule changes; with ``strict``, undeclared subscriptions no owner claims count too."""
        return self.has_changes or (strict and bool(self.unclaimed))

    @property
    def changes(self) -> list[Change]:
        return [c for sp in self.subscriptions for c in sp.changes]

    def summary(self) -> dict[str, int]:
        counts = {kind.value: 0 for kind in ChangeKind}
        for change in self.changes:
            counts[change.kind] += 1
        counts["unchanged"] = sum(sp.unchanged for sp in self.subscriptions)
        return counts

    @property
    def has_changes(self) -> bool:
        return any(sp.changes for sp in self.subscriptions)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": PLAN_FORMAT_VERSION,
            "environment": self.environment,
            "namespace": self.namespace,
            "summary": self.summary(),
            "changes": [c.to_json() for c in self.changes],
            "subscriptions": [sp.to_json() for sp in self.subscriptions],
            "skipped": [self._with_rules(asdict(s)) for s in self.skipped],
            "warnings": list(self.warnings),
            "undeclared": [
                self._with_rules({"topic": t, "subscription": s} | self._owner(t, s)) for t, s in self.undeclared
            ],
            "notes": list(self.notes),
            "listed": self.listed,
            **({"read_at": iso_time(self.read_at)} if self.read_at else {}),
            **({"contested": [c.to_json() for c in self.contested]} if self.contested else {}),
        }

    def _owner(self, topic: str, subscription: str) -> dict[str, str]:
        """An undeclared subscription's ``owner``, where sbrules.yaml's ``owners:`` claims it."""
        owner = self.claimed.get((topic, subscription))
        return {"owner": owner} if owner else {}

    def _with_rules(self, doc: dict[str, Any]) -> dict[str, Any]:
        """A left-alone subscription's entry, with its live rules where the plan read them."""
        rules = self.bystanders.get((doc["topic"], doc["subscription"]))
        return doc if rules is None else {**doc, "rules": [rule_to_doc(rule) for rule in rules]}

    @classmethod
    def from_json(cls, doc: Any) -> "Plan":
        """Read a plan document written by :meth:`to_json` (apply runs exactly what was reviewed)."""
        if not isinstance(doc, Mapping) or "format_version" not in doc:
            raise PlanError("not an sbrules plan file (no format_version)")
        readable = (*_UPGRADES, PLAN_FORMAT_VERSION)
        if doc["format_version"] not in readable:
            raise PlanError(
                f"plan format_version {doc['format_version']!r} is not supported "
                f"(this sbrules reads {', '.join(map(str, readable))})"
            )
        try:
            while doc["format_version"] in _UPGRADES:
                doc = _UPGRADES[doc["format_version"]](doc)
            by_subscription: dict[tuple[str, str], list[Change]] = {}
            for entry in doc["changes"]:
                change = Change.from_json(entry)
                by_subscription.setdefault((change.topic, change.subscription), []).append(change)
            subs = [
                SubscriptionPlan(
                    topic=entry["topic"],
                    subscription=entry["subscription"],
                    fingerprint=entry["fingerprint"],
                    target_fingerprint=entry["target_fingerprint"],
                    unchanged=entry["unchanged"],
                    rules_after=entry["rules_after"],
                    allow_empty=entry.get("allow_empty", False),
                    changes=tuple(by_subscription.pop((entry["topic"], entry["subscription"]), ())),
                    declared_topic=entry.get("declared_topic"),
                    owns=tuple(entry["owns"]) if "owns" in entry else None,
                    foreign=tuple(Foreign.from_json(f) for f in entry.get("foreign", ())),
                )
                for entry in doc["subscriptions"]
            ]
            skipped = tuple(Skipped(s["topic"], s["subscription"], s["reason"]) for s in doc.get("skipped", ()))
            warnings = tuple(doc.get("warnings", ()))
            undeclared = tuple((u["topic"], u["subscription"]) for u in doc.get("undeclared", ()))
            bystanders = {
                (u["topic"], u["subscription"]): tuple(rule_from_doc(r) for r in u["rules"])
                for u in (*doc.get("undeclared", ()), *doc.get("skipped", ())) if "rules" in u
            }
            notes = tuple(doc.get("notes", ()))
            environment, namespace = doc.get("environment"), doc.get("namespace")
            listed = bool(doc.get("listed", False))
            claimed = {(u["topic"], u["subscription"]): u["owner"] for u in doc.get("undeclared", ()) if "owner" in u}
            read_at = read_time(doc["read_at"]) if doc.get("read_at") else None
            contested = tuple(Contest.from_json(c) for c in doc.get("contested", ()))
        except (KeyError, TypeError, ValueError) as exc:
            from reconciler.rulefiles.schema import first_violation

            cause = first_violation("plan.schema.json", doc) or f"{type(exc).__name__}: {exc}"
            raise PlanError(f"malformed plan file: {cause}") from None
        if by_subscription:
            topic, sub = next(iter(by_subscription))
            raise PlanError(f"malformed plan file: changes for {topic}/{sub}, which the plan does not list")
        return cls(
            tuple(subs), skipped, warnings, undeclared, notes, environment, namespace, bystanders, listed,
            read_at=read_at, contested=contested, claimed=claimed,
        )


def read_plan_file(path: str | Path) -> Plan:
    """The plan saved in ``path`` (``plan --out``): the one reader of plan files, so apply and the
    traffic report's ``--against`` word a bad one the same way."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError(f"{path}: no such plan file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"{path}: cannot read the plan file ({exc})") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"{path}: not a JSON plan file ({exc})") from None
    try:
        return Plan.from_json(doc)
    except PlanError as exc:
        raise PlanError(f"{path}: {exc}") from None


def _upgrade_v1(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1 → 2: a change's kind was called ``action``."""
    changes = [
        {("change" if key == "action" else key): value for key, value in c.items()} if isinstance(c, Mapping) else c
        for c in doc["changes"]
    ]
    return {**doc, "format_version": 2, "changes": changes}


#: Older plan format versions and the step that reads each as the next one.
_UPGRADES = {1: _upgrade_v1}
