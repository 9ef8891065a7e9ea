"""What an apply did, per subscription: its status, the changes applied and not applied, notes;
rendered as text (``render_report``) and as one JSON document (``report_to_json``,
schemas/apply.schema.json)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reconciler.plan import Change, ChangeKind, SubscriptionPlan
from reconciler.plan.ops import Contest


class ApplyStatus(StrEnum):
    """Where one subscription ended up."""

    PENDING = "pending"
    APPLIED = "applied"
    ALREADY_APPLIED = "already-applied"  # found in the planned end state: nothing to do
    UNCHANGED = "unchanged"  # the plan has no changes for it
    STALE = "stale"  # refused: the live rules are not the ones the plan was computed from
    FAILED = "failed"
    NOT_STARTED = "not-started"  # --fail-fast or Ctrl-C stopped it before it began
    INTERRUPTED = "interrupted"  # Ctrl-C: the changes in flight finished, the rest did not run
    LOCKED = "locked"  # another run held its lock for all of --lock-timeout: nothing was changed
    LOCK_LOST = "lock-lost"  # its lease could have lapsed, or another run took it over: no more writes
    UNKNOWN = "unknown"  # a change's answer never came and the subscription could not be re-read

    @property
    def ok(self) -> bool:
        return self in (ApplyStatus.APPLIED, ApplyStatus.ALREADY_APPLIED, ApplyStatus.UNCHANGED)


@dataclass
class SubscriptionResult:
    """What happened to one subscription: which changes were applied and which were not."""

    plan: SubscriptionPlan
    status: ApplyStatus = ApplyStatus.PENDING
    applied: list[Change] = field(default_factory=list)
    error: str | None = None
    #: The change whose request went unanswered and whose outcome a re-read could not establish.
    unknown: Change | None = None
    #: The live rules had changed since the plan: ``plan`` was made again under the lock.
    replanned: bool = False
    #: What else the report should say (a lock that could not be renewed or released).
    notes: list[str] = field(default_factory=list)
    #: Rules another writer changed, removed or re-created right after this apply wrote them.
    contested: list[Contest] = field(default_factory=list)

    @property
    def not_applied(self) -> list[Change]:
        """Changes run in plan order and stop at the first failure: the rest were not applied."""
        return list(self.plan.changes[len(self.applied) + (self.unknown is not None):])


@dataclass
class ApplyReport:
    results: list[SubscriptionResult]
    #: Ctrl-C stopped the apply after the changes in flight.
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return all(r.status.ok for r in self.results)

    def counts(self) -> dict[str, int]:
        return {
            "applied": sum(len(r.applied) for r in self.results),
            "not_applied": sum(
                len(r.not_applied) for r in self.results if r.status is not ApplyStatus.ALREADY_APPLIED
            ),
            "stale": sum(r.status is ApplyStatus.STALE for r in self.results),
            "failed": sum(r.status is ApplyStatus.FAILED for r in self.results),
            "not_started": sum(r.status is ApplyStatus.NOT_STARTED for r in self.results),
            "interrupted": sum(r.status is ApplyStatus.INTERRUPTED for r in self.results),
            "locked": sum(r.status is ApplyStatus.LOCKED for r in self.results),
            "lock_lost": sum(r.status is ApplyStatus.LOCK_LOST for r in self.results),
            "unknown": sum(r.unknown is not None for r in self.results),
            "contested": sum(len(r.contested) for r in self.results),
        }


_VERB = {
    ChangeKind.CREATE: ("+", "created"),
    ChangeKind.REPLACE: ("~", "replaced"),
    ChangeKind.DELETE: ("-", "deleted"),
}


def report_to_json(report: ApplyReport) -> dict[str, Any]:
    """The report as one document (``apply --format json``; schemas/apply.schema.json)."""

    def change(c: Change) -> dict[str, Any]:
        return {"rule": c.rule, "change": c.kind.value}

    outcome = "interrupted" if report.interrupted else "complete" if report.ok else "incomplete"
    return {
        "format_version": 1,
        "outcome": outcome,
        "ok": report.ok,
        "summary": report.counts(),
        "subscriptions": [
            {
                "topic": r.plan.topic,
                **({"declared_topic": r.plan.declared_topic} if r.plan.declared_topic else {}),
                "subscription": r.plan.subscription,
                "status": r.status.value,
                "applied": [change(c) for c in r.applied],
                "not_applied": [change(c) for c in r.not_applied] if r.status is not ApplyStatus.ALREADY_APPLIED else [],
                "unknown": change(r.unknown) if r.unknown is not None else None,
                "error": r.error,
                "replanned": r.replanned,
                "notes": list(r.notes),
                "contested": [c.to_json() for c in r.contested],
            }
            for r in report.results
        ],
    }


def render_report(report: ApplyReport) -> str:
    """Exactly what was and was not applied, per subscription."""
    lines: list[str] = []
    for result in report.results:
        sp = result.plan
        if result.status is ApplyStatus.UNCHANGED:
            continue
        if result.status is ApplyStatus.ALREADY_APPLIED:
            lines.append(f"{sp.shown_path}: already in the planned state, nothing to do")
            continue
        head = {
            ApplyStatus.APPLIED: f"{sp.shown_path}: applied {len(result.applied)} change(s)",
            ApplyStatus.FAILED: f"{sp.shown_path}: FAILED — {result.error}",
            ApplyStatus.STALE: f"{sp.shown_path}: REFUSED — {result.error}",
            ApplyStatus.NOT_STARTED: f"{sp.shown_path}: not started ({result.error})",
            ApplyStatus.INTERRUPTED: f"{sp.shown_path}: INTERRUPTED after {len(result.applied)} change(s) ({result.error})",
            ApplyStatus.LOCKED: f"{sp.shown_path}: {result.error}; nothing was changed",
            ApplyStatus.LOCK_LOST: f"{sp.shown_path}: LOCK LOST after {len(result.applied)} change(s) — {result.error}",
            ApplyStatus.UNKNOWN: f"{sp.shown_path}: UNKNOWN after {len(result.applied)} change(s) — {result.error}",
        }[result.status]
        lines.append(head)
        if result.replanned:
            lines.append("  (planned again under its lock: its live rules had changed since the plan)")
        for change in result.applied:
            symbol, verb = _VERB[change.kind]
            lines.append(f"  {symbol} {verb} rule {change.rule!r}")
        if result.unknown is not None:
            lines.append(f"  ? UNKNOWN: {result.unknown.kind} rule {result.unknown.rule!r} (unknown: run `sbrules plan`)")
        lines += [f"  note: {note}" for note in result.notes]
        lines += [f"  ! {contest.describe()}" for contest in result.contested]
        for change in result.not_applied:
            symbol, _ = _VERB[change.kind]
            lines.append(f"  {symbol} NOT applied: {change.kind} rule {change.rule!r}")
    c = report.counts()
    outcome = "interrupted" if report.interrupted else "complete" if report.ok else "incomplete"
    summary = f"Apply {outcome}: {c['applied']} change(s) applied"
    if not report.ok:
        interrupted = f", {c['interrupted']} interrupted" if report.interrupted else ""
        locked = f", {c['locked']} locked by another run" if c["locked"] else ""
        locked += f", {c['lock_lost']} lost its lock" if c["lock_lost"] else ""
        unknown = f", {c['unknown']} unknown" if c["unknown"] else ""
        summary += (
            f", {c['not_applied']} not applied ({c['failed']} subscription(s) failed, "
            f"{c['stale']} refused as stale, {c['not_started']} not started{interrupted}{locked}){unknown}. "
            "Re-run `sbrules plan`/`sbrules apply` to converge."
        )
    else:
        summary += "."
    if c["contested"]:
        summary += (f" {c['contested']} rule(s) contested: another writer changed them right after this apply "
                    "wrote them (see above).")
    lines.append(summary)
    return "\n".join(lines)
