"""Diff the declared rules against the live ones and describe the difference as a Plan (pure data).

The diff is set algebra per subscription, as in alembic's autogenerate: declared − live → create,
live − declared → delete, and for the rules in both, normalised *signatures* are compared field
by field → replace, with one reason per differing field. Normalised means: SQL by its canonical
print (whitespace, keyword case and redundant parentheses never show), ``1=1`` / ``1=0`` SQL as
the true / false filters the service stores, compatibility level and created-at not at all, and
correlation properties with their AMQP type (int 3 is not long 3).

A Plan is what a person reviews and CI applies unchanged: it serialises to versioned JSON
(``schemas/plan.schema.json``) with rules in the rule files' form, and records a fingerprint of
the live rule set of each subscription it was computed from, so apply can refuse a stale plan.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from reconciler import sql
from reconciler.errors import SbrulesError
from reconciler.model import (
    CORRELATION_FIELDS,
    DEFAULT_RULE_NAME,
    CorrelationFilter,
    DesiredState,
    FalseFilter,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    rule_from_doc,
    rule_to_doc,
)

PLAN_FORMAT_VERSION = 1
CREATE, REPLACE, DELETE = "create", "replace", "delete"
ACTIONS = (CREATE, REPLACE, DELETE)
RULE_NAME_MAX = 50

#: Suffix of the temporary rule a gapless replacement adds; plan and apply treat any live rule
#: carrying it as a leftover of an interrupted apply and remove it.
TEMP_SUFFIX = ".sbrules-tmp"

#: The live rules of each observed subscription, keyed by (topic, subscription).
ActualState = Mapping[tuple[str, str], Sequence[Rule]]


class PlanError(SbrulesError):
    """The declared rules cannot be planned (bad SQL, reserved name, an unreadable plan file)."""


def temp_rule_name(name: str) -> str:
    """The temporary name used while replacing ``name`` without a gap (at most 50 characters)."""
    candidate = name + TEMP_SUFFIX
    if len(candidate) <= RULE_NAME_MAX:
        return candidate
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    keep = RULE_NAME_MAX - len(TEMP_SUFFIX) - len(digest) - 1
    return f"{name[:keep]}-{digest}{TEMP_SUFFIX}"


def is_temp_rule_name(name: str) -> bool:
    return name.endswith(TEMP_SUFFIX)


# ------------------------------------------------------------------------------------------------
# Normalised signatures
# ------------------------------------------------------------------------------------------------


@functools.cache
def _canonical_true_false() -> dict[str, str]:
    return {sql.canonical_filter("1=1"): "true", sql.canonical_filter("1=0"): "false"}


@dataclass(frozen=True)
class _Canon:
    """A SQL text, its canonical form (shown) and its comparison key, or the parse error.

    Filters are compared with user property names case-folded (the broker looks them up
    case-insensitively); actions are compared exactly, since SET creates properties as written.
    """

    text: str
    canonical: str
    key: str
    error: str | None = None


def _canon(text: str, kind: str) -> _Canon:
    try:
        if kind == "filter":
            return _Canon(text, sql.canonical_filter(text), sql.filter_key(text))
        canon = sql.canonical_action(text)
        return _Canon(text, canon, canon)
    except sql.SqlError as exc:
        collapsed = " ".join(text.split())
        return _Canon(text, collapsed, collapsed, str(exc))


@dataclass(frozen=True)
class Signature:
    """The comparable content of a rule: filter kind and normal form, action normal form."""

    kind: str  # sql | correlation | true | false
    sql: _Canon | None = None
    correlation: CorrelationFilter | None = None
    action: _Canon | None = None

    @functools.cached_property
    def token(self) -> str:
        """A string equal for equal signatures (what the fingerprint hashes)."""
        corr = None
        if self.correlation is not None:
            corr = [
                self.correlation.system_fields(),
                [[k, v.type.value, str(v.value)] for k, v in self.correlation.properties],
            ]
        key = [
            self.kind,
            self.sql.key if self.sql else None,
            corr,
            self.action.key if self.action else None,
        ]
        return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def check(self, where: str) -> None:
        """Declared rules must parse: a PlanError now beats a failure halfway through apply."""
        for part, kind in ((self.sql, "filter"), (self.action, "action")):
            if part is not None and part.error is not None:
                raise PlanError(f"{where}: SQL {kind} does not parse: {part.error}")


@functools.lru_cache(maxsize=65536)
def signature(rule: Rule) -> Signature:
    """The normalised form of ``rule`` (cached: plans compare the same rules again and again)."""
    action = _canon(rule.action.expression, "action") if isinstance(rule.action, SqlRuleAction) else None
    flt = rule.filter
    if isinstance(flt, TrueFilter):
        return Signature("true", action=action)
    if isinstance(flt, FalseFilter):
        return Signature("false", action=action)
    if isinstance(flt, CorrelationFilter):
        return Signature("correlation", correlation=flt, action=action)
    assert isinstance(flt, SqlFilter)
    canon = _canon(flt.expression, "filter")
    special = _canonical_true_false().get(canon.canonical) if canon.error is None else None
    if special:
        return Signature(special, action=action)
    return Signature("sql", sql=canon, action=action)


def _sql_diff(label: str, before: str, after: str) -> list[str]:
    return list(
        difflib.unified_diff(
            before.splitlines() or [""],
            after.splitlines() or [""],
            fromfile=f"{label} (live)",
            tofile=f"{label} (declared)",
            lineterm="",
            n=1,
        )
    )


def _describe_kind(sig: Signature) -> str:
    return {"sql": "SQL", "correlation": "correlation", "true": "true", "false": "false"}[sig.kind]


def compare(before: Signature, after: Signature) -> tuple[list[str], list[str]]:
    """Field-level reasons why ``before`` (live) differs from ``after`` (declared), and SQL diffs."""
    reasons: list[str] = []
    diff: list[str] = []
    if before.kind != after.kind:
        reasons.append(f"filter kind: {_describe_kind(before)} → {_describe_kind(after)}")
    elif before.kind == "sql":
        assert before.sql and after.sql
        if before.sql.key != after.sql.key:
            reasons.append("SQL filter changed (canonical form)")
            diff += _sql_diff("filter", before.sql.canonical, after.sql.canonical)
    elif before.kind == "correlation":
        assert before.correlation and after.correlation
        reasons += _correlation_reasons(before.correlation, after.correlation)
    if before.action is None and after.action is not None:
        reasons.append("action added")
        diff += _sql_diff("action", "", after.action.canonical)
    elif before.action is not None and after.action is None:
        reasons.append("action removed")
        diff += _sql_diff("action", before.action.canonical, "")
    elif before.action and after.action and before.action.key != after.action.key:
        reasons.append("action changed (canonical form)")
        diff += _sql_diff("action", before.action.canonical, after.action.canonical)
    return reasons, diff


def _correlation_reasons(before: CorrelationFilter, after: CorrelationFilter) -> list[str]:
    reasons = []
    for name in CORRELATION_FIELDS:
        old, new = getattr(before, name), getattr(after, name)
        if old != new:
            reasons.append(f"correlation {name}: {_show(old)} → {_show(new)}")
    old_props, new_props = before.property_map, after.property_map
    for key in sorted(set(old_props) | set(new_props)):
        old, new = old_props.get(key), new_props.get(key)
        if old == new:
            continue
        if old is None:
            reasons.append(f"correlation property {key!r} added: {new.describe()}")  # type: ignore[union-attr]
        elif new is None:
            reasons.append(f"correlation property {key!r} removed (was {old.describe()})")
        else:
            reasons.append(f"correlation property {key!r}: {old.describe()} → {new.describe()}")
    return reasons


def _show(value: str | None) -> str:
    return "unset" if value is None else repr(value)


def same_rule(a: Rule, b: Rule) -> bool:
    """Whether two rules are equal once normalised (what the planner would call unchanged)."""
    return a.name.casefold() == b.name.casefold() and signature(a).token == signature(b).token


def fingerprint(rules: Iterable[Rule]) -> str:
    """sha256 of the canonical live rule set: what apply re-reads and compares."""
    entries = sorted(json.dumps(rule.name) + ":" + signature(rule).token for rule in rules)
    return "sha256:" + hashlib.sha256("\n".join(entries).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# The plan
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One rule operation: create (after only), delete (before only) or replace (both)."""

    topic: str
    subscription: str
    rule: str
    action: str
    reasons: tuple[str, ...]
    before: Rule | None = None
    after: Rule | None = None
    diff: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "topic": self.topic,
            "subscription": self.subscription,
            "rule": self.rule,
            "action": self.action,
            "reasons": list(self.reasons),
            "before": rule_to_doc(self.before) if self.before else None,
            "after": rule_to_doc(self.after) if self.after else None,
        }
        if self.diff:
            doc["diff"] = list(self.diff)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Change":
        change = cls(
            topic=doc["topic"],
            subscription=doc["subscription"],
            rule=doc["rule"],
            action=doc["action"],
            reasons=tuple(doc["reasons"]),
            before=rule_from_doc(doc["before"]) if doc.get("before") else None,
            after=rule_from_doc(doc["after"]) if doc.get("after") else None,
            diff=tuple(doc.get("diff", ())),
        )
        needs = {CREATE: (False, True), DELETE: (True, False), REPLACE: (True, True)}.get(change.action)
        if needs != (change.before is not None, change.after is not None):
            raise ValueError(f"change of rule {change.rule!r}: action {change.action!r} with that before/after")
        return change


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

    @property
    def path(self) -> str:
        return f"{self.topic}/{self.subscription}"

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "subscription": self.subscription,
            "fingerprint": self.fingerprint,
            "target_fingerprint": self.target_fingerprint,
            "unchanged": self.unchanged,
            "rules_after": self.rules_after,
            "allow_empty": self.allow_empty,
        }


@dataclass(frozen=True)
class Skipped:
    topic: str
    subscription: str
    reason: str


@dataclass(frozen=True)
class Plan:
    subscriptions: tuple[SubscriptionPlan, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def changes(self) -> list[Change]:
        return [c for sp in self.subscriptions for c in sp.changes]

    def summary(self) -> dict[str, int]:
        counts = {action: 0 for action in ACTIONS}
        for change in self.changes:
            counts[change.action] += 1
        counts["unchanged"] = sum(sp.unchanged for sp in self.subscriptions)
        return counts

    @property
    def has_changes(self) -> bool:
        return any(sp.changes for sp in self.subscriptions)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": PLAN_FORMAT_VERSION,
            "summary": self.summary(),
            "changes": [c.to_json() for c in self.changes],
            "subscriptions": [sp.to_json() for sp in self.subscriptions],
            "skipped": [asdict(s) for s in self.skipped],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_json(cls, doc: Any) -> "Plan":
        """Read a plan document written by :meth:`to_json` (apply runs exactly what was reviewed)."""
        if not isinstance(doc, Mapping) or "format_version" not in doc:
            raise PlanError("not an sbrules plan file (no format_version)")
        if doc["format_version"] != PLAN_FORMAT_VERSION:
            raise PlanError(
                f"plan format_version {doc['format_version']!r} is not supported (expected {PLAN_FORMAT_VERSION})"
            )
        try:
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
                )
                for entry in doc["subscriptions"]
            ]
            skipped = tuple(Skipped(**s) for s in doc.get("skipped", ()))
            warnings = tuple(doc.get("warnings", ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"malformed plan file: {type(exc).__name__}: {exc}") from None
        if by_subscription:
            topic, sub = next(iter(by_subscription))
            raise PlanError(f"malformed plan file: changes for {topic}/{sub}, which the plan does not list")
        return cls(tuple(subs), skipped, warnings)


def managed_subscriptions(desired: DesiredState) -> list[tuple[str, str]]:
    """(topic, subscription) of every declared subscription whose rule set the files own."""
    return [(t.name, s.name) for t, s in desired.subscriptions() if s.managed]


def compute_plan(desired: DesiredState, actual: ActualState) -> Plan:
    """The plan that turns ``actual`` into ``desired`` for every managed subscription."""
    subs: list[SubscriptionPlan] = []
    skipped: list[Skipped] = []
    warnings: list[str] = []
    for topic, sub in desired.subscriptions():
        if not sub.managed:
            skipped.append(Skipped(topic.name, sub.name, "no rules declared (unmanaged): left as it is"))
            continue
        live = actual.get((topic.name, sub.name))
        if live is None:
            raise PlanError(f"no live state was read for {topic.name}/{sub.name}")
        plan = plan_subscription(topic.name, sub.name, sub.rules or (), live, allow_empty=sub.allow_empty)
        subs.append(plan)
        for change in plan.changes:
            if change.action == REPLACE and (
                (change.after and change.after.has_action) or (change.before and change.before.has_action)
            ):
                warnings.append(
                    f"{plan.path}: rule {change.rule!r} has an action; while it is replaced without a gap, a "
                    "message matching both versions may be delivered twice (--replace-strategy direct avoids "
                    "that at the cost of a moment without the rule)"
                )
    return Plan(tuple(subs), tuple(skipped), tuple(warnings))


def plan_subscription(
    topic: str, subscription: str, declared: Sequence[Rule], live: Sequence[Rule], *, allow_empty: bool = False
) -> SubscriptionPlan:
    """Set algebra over rule names (case-insensitive, as the service treats them)."""
    path = f"{topic}/{subscription}"
    if not declared and not allow_empty:
        raise PlanError(
            f"{path} declares no rules: that would leave it receiving nothing; set allow_empty: true if intended"
        )
    for rule in declared:
        if is_temp_rule_name(rule.name):
            raise PlanError(f"{path}: rule name {rule.name!r} ends with {TEMP_SUFFIX!r}, which sbrules reserves")
    want = {r.name.casefold(): r for r in declared}
    have = {r.name.casefold(): r for r in live}
    creates, replaces, deletes = [], [], []
    unchanged = identical = 0
    for key, rule in want.items():
        after_sig = signature(rule)
        after_sig.check(f"{path} rule {rule.name!r}")
        current = have.get(key)
        if current is None:
            reason = ("declared, not in the namespace",)
            creates.append(Change(topic, subscription, rule.name, CREATE, reason, after=rule))
            continue
        if current == rule:  # the common case, and cheaper than comparing signatures
            unchanged += 1
            identical += 1
            continue
        reasons, diff = compare(signature(current), after_sig)
        if current.name != rule.name:
            reasons.insert(0, f"name case: {current.name!r} → {rule.name!r}")
        if reasons:
            replaces.append(
                Change(topic, subscription, rule.name, REPLACE, tuple(reasons), current, rule, tuple(diff))
            )
        else:
            unchanged += 1
    for key, rule in have.items():
        if key in want:
            continue
        if is_temp_rule_name(rule.name):
            reason = "leftover temporary rule of an interrupted apply"
        elif rule.name == DEFAULT_RULE_NAME:
            reason = "$Default (the service's catch-all) is not declared"
        else:
            reason = "not declared (the declared rule set is authoritative)"
        deletes.append(Change(topic, subscription, rule.name, DELETE, (reason,), before=rule))
    target = fingerprint(declared)
    return SubscriptionPlan(
        topic=topic,
        subscription=subscription,
        # Every live rule equal to a declared one and nothing else live: the same set, the same hash.
        fingerprint=target if identical == len(declared) == len(live) else fingerprint(live),
        target_fingerprint=target,
        unchanged=unchanged,
        rules_after=len(want),
        allow_empty=allow_empty,
        changes=tuple(creates + replaces + deletes),
    )


# ------------------------------------------------------------------------------------------------
# Renderers
# ------------------------------------------------------------------------------------------------

_SYMBOL = {CREATE: "+", REPLACE: "~", DELETE: "-"}


def _rule_lines(rule: Rule, indent: str) -> list[str]:
    doc = rule_to_doc(rule)
    doc.pop("name")
    return [f"{indent}{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in doc.items()]


def render_text(plan: Plan) -> str:
    """A terraform-like listing: + create, ~ replace (changed fields, canonical SQL diff), - delete."""
    lines: list[str] = []
    for sp in plan.subscriptions:
        if not sp.changes:
            continue
        lines.append(f"subscription {sp.path}  ({sp.unchanged} unchanged)")
        for change in sp.changes:
            lines.append(f"  {_SYMBOL[change.action]} {change.action} rule {change.rule!r}")
            for reason in change.reasons:
                lines.append(f"      # {reason}")
            if change.action == CREATE and change.after:
                lines += _rule_lines(change.after, "      ")
            if change.action == DELETE and change.before:
                lines += _rule_lines(change.before, "      ")
            lines += [f"      {line}" for line in change.diff]
        lines.append("")
    for skipped in plan.skipped:
        lines.append(f"skipped {skipped.topic}/{skipped.subscription}: {skipped.reason}")
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    s = plan.summary()
    if plan.has_changes:
        lines.append(
            f"Plan: {s['create']} to create, {s['replace']} to replace, {s['delete']} to delete, "
            f"{s['unchanged']} unchanged."
        )
    else:
        lines.append(f"No changes. {s['unchanged']} rules in {len(plan.subscriptions)} subscriptions match the files.")
    return "\n".join(lines)


def render_markdown(plan: Plan) -> str:
    """A pull-request comment: summary table, then one collapsible detail block per subscription."""
    s = plan.summary()
    out = [
        "### sbrules plan",
        "",
        "| create | replace | delete | unchanged |",
        "|---:|---:|---:|---:|",
        f"| {s['create']} | {s['replace']} | {s['delete']} | {s['unchanged']} |",
        "",
    ]
    if not plan.has_changes:
        out.append("No changes: the namespace matches the rule files.")
    for sp in plan.subscriptions:
        if not sp.changes:
            continue
        out.append(f"<details open><summary><code>{sp.path}</code> — {len(sp.changes)} change(s)</summary>")
        out.append("")
        out.append("```diff")
        for change in sp.changes:
            symbol = _SYMBOL[change.action].replace("~", "!")  # "!" lines render highlighted in a diff block
            out.append(f"{symbol} {change.action} {change.rule}")
            out += [f"#   {reason}" for reason in change.reasons]
            shown = change.after if change.action == CREATE else change.before if change.action == DELETE else None
            if shown:
                out += _rule_lines(shown, f"{symbol}     ")
            out += list(change.diff)  # unindented, so its -/+ lines are coloured too
        out.append("```")
        out.append("</details>")
        out.append("")
    for skipped in plan.skipped:
        out.append(f"- skipped `{skipped.topic}/{skipped.subscription}`: {skipped.reason}")
    for warning in plan.warnings:
        out.append(f"> **warning:** {warning}")
    return "\n".join(out).rstrip() + "\n"


def render_json(plan: Plan) -> str:
    return json.dumps(plan.to_json(), indent=2, ensure_ascii=False)


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json}

#: How drift names each kind of change: the live state moved away from the files.
DRIFT_KIND = {DELETE: "added out of band", CREATE: "removed", REPLACE: "modified"}


def render_drift_text(plan: Plan) -> str:
    lines = []
    for change in plan.changes:
        detail = "; ".join(change.reasons) if change.action == REPLACE else ""
        lines.append(
            f"drift {change.topic}/{change.subscription} rule {change.rule!r}: {DRIFT_KIND[change.action]}"
            + (f" ({detail})" if detail else "")
        )
        lines += [f"    {line}" for line in change.diff]
    n = len(plan.subscriptions)
    if plan.has_changes:
        lines.append(f"{len(plan.changes)} drifted rule(s) in {n} subscriptions.")
    else:
        lines.append(f"In sync: {n} subscriptions match the files.")
    return "\n".join(lines)


def render_drift_json(plan: Plan) -> str:
    doc = plan.to_json()
    doc = {"format_version": PLAN_FORMAT_VERSION, "in_sync": not plan.has_changes} | {
        k: doc[k] for k in ("summary", "changes", "subscriptions", "skipped")
    }
    doc["drift"] = [
        {"topic": c.topic, "subscription": c.subscription, "rule": c.rule, "kind": DRIFT_KIND[c.action]}
        for c in plan.changes
    ]
    return json.dumps(doc, indent=2, ensure_ascii=False)
