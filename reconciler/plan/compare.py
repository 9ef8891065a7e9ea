"""Diff the declared rules against the live ones, per subscription, as alembic's autogenerate does.

Set algebra over rule names: declared − live → create, live − declared → delete, and for the rules
in both, their normalised signatures (:mod:`reconciler.plan.signature`) are compared field by
field → replace, with one reason per differing field.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Sequence

from reconciler.limits import LOCK_RULE_PREFIX, is_temp_rule_name, looks_like_lock, reserved_rule_name_problem
from reconciler.lock import find_locks, without_locks
from reconciler.model import CORRELATION_FIELDS, DEFAULT_RULE_NAME, CorrelationFilter, DesiredState, Rule
from reconciler.names import name_key, owned
from reconciler.observe import ActualState
from reconciler.owners import Owners
from reconciler.plan.ops import (
    Change,
    ChangeKind,
    Foreign,
    Plan,
    PlanError,
    Skipped,
    SubscriptionPlan,
)
from reconciler.plan.signature import FilterKind, Signature, fingerprint, signature
from reconciler.recognizers import recognize


def compute_plan(desired: DesiredState, actual: ActualState) -> Plan:
    """The plan that turns ``actual`` into ``desired`` for every managed subscription; a lock an
    apply holds is a note, never a change."""
    subs: list[SubscriptionPlan] = []
    skipped: list[Skipped] = []
    replaced_with_action: list[str] = []
    notes: list[str] = []
    for topic, sub in desired.subscriptions():
        if not sub.managed:
            skipped.append(Skipped(topic.name, sub.name, "no rules declared (unmanaged): left as it is"))
            continue
        live = actual.get((topic.name, sub.name))
        if live is None:
            raise PlanError(f"no live state was read for {topic.name}/{sub.name}")
        notes += lock_notes(f"{topic.name}/{sub.name}", live)
        notes += lookalike_warnings(f"{topic.name}/{sub.name}", live)
        plan = plan_subscription(topic.name, sub.name, sub.rules or (), live, allow_empty=sub.allow_empty, owns=sub.owns)
        if desired.owners:
            plan = _with_owners(plan, desired.owners)
        if topic.declared is not None:
            plan = dataclasses.replace(plan, declared_topic=topic.declared)
        subs.append(plan)
        for change in plan.changes:
            if change.kind is ChangeKind.REPLACE and (
                (change.after and change.after.has_action) or (change.before and change.before.has_action)
            ):
                replaced_with_action.append(f"{plan.shown_path}: rule {change.rule!r}")
    warnings = []
    if replaced_with_action:
        warnings.append(
            f"{_some(replaced_with_action)} {'has an action' if len(replaced_with_action) == 1 else 'have actions'}; "
            "while a rule with an action is replaced without a gap, a message matching both versions may be "
            "delivered twice (--replace-strategy direct avoids that at the cost of a moment without the rule)"
        )
    return Plan(tuple(subs), tuple(skipped), tuple(warnings), notes=tuple(notes))


def _with_owners(plan: SubscriptionPlan, owners: Owners) -> SubscriptionPlan:
    """The plan with its foreign rules labelled with their named owner, and a reason on each delete
    of a rule an owner claims (under the complete set, sbrules still removes it: ``owns:`` says not to)."""
    def owner(rule: str) -> str | None:
        return owners.of_rule(plan.topic, plan.subscription, rule)

    changes = tuple(
        dataclasses.replace(c, reasons=(*c.reasons, f"{who} owns it (sbrules.yaml owners:); owns: would leave it alone"))
        if c.kind is ChangeKind.DELETE and (who := owner(c.rule)) else c
        for c in plan.changes
    )
    foreign = tuple(dataclasses.replace(f, owner=owner(f.rule.name)) for f in plan.foreign)
    return dataclasses.replace(plan, changes=changes, foreign=foreign)


def lock_notes(path: str, live: Sequence[Rule]) -> list[str]:
    """One note per lock rule in a subscription: who is writing it."""
    return [f"{path}: {lock.describe()} ({lock.name}); an apply is writing it, or left it when killed: the "
             f"next apply takes it over once unchanged for {lock.patience:g}s, `sbrules unlock {path}` removes it "
             "now (a lock rule is not drift)" for lock in find_locks(live)]


def lookalike_warnings(path: str, live: Sequence[Rule]) -> list[str]:
    """A warning (a plan note) for each live rule that carries the lock prefix but is no lock of sbrules."""
    return [f"{path}: warning: rule {rule.name!r} looks like an sbrules lock but is not one (a lock is the false filter "
            f"with sbrules' action, named {LOCK_RULE_PREFIX!r} and digits): it is an ordinary rule" for rule in live
            if looks_like_lock(rule)]


def _some(subjects: Sequence[str], shown: int = 3) -> str:
    """One warning for many subjects: the first few named, the rest counted."""
    if len(subjects) <= shown:
        return ", ".join(subjects)
    return f"{len(subjects):,} rules ({', '.join(subjects[:shown])} and {len(subjects) - shown:,} more)"


def partition(live: Sequence[Rule], owns: Sequence[str] | None) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """The live rules sbrules owns under ``owns`` (with its own leftover temporary rules), and the
    foreign rest; lock rules are in neither."""
    mine: list[Rule] = []
    foreign: list[Rule] = []
    for rule in without_locks(live):
        (mine if is_temp_rule_name(rule.name) or owned(rule.name, owns) else foreign).append(rule)
    return tuple(mine), tuple(foreign)


def plan_subscription(
    topic: str, subscription: str, declared: Sequence[Rule], live: Sequence[Rule], *, allow_empty: bool = False,
    owns: Sequence[str] | None = None,
) -> SubscriptionPlan:
    """Set algebra over rule names (case-insensitive, as the service treats them), over the rules
    sbrules owns: a foreign rule is never changed and never counted as one the subscription keeps."""
    path = f"{topic}/{subscription}"
    if not declared and not allow_empty:
        raise PlanError(
            f"{path} declares no rules: that would leave it receiving nothing; set allow_empty: true if intended"
        )
    for rule in declared:
        reserved = reserved_rule_name_problem(rule.name)
        if reserved:
            raise PlanError(f"{path}: {reserved}")
    live_all = without_locks(live)
    live, foreign = partition(live, owns)
    want = {name_key(r.name): r for r in declared}
    have = {name_key(r.name): r for r in live}
    creates, replaces, deletes = [], [], []
    unchanged = identical = 0
    for key, rule in want.items():
        after_sig = signature(rule)
        error = after_sig.parse_error()
        if error:  # a PlanError now beats a failure halfway through apply
            raise PlanError(f"{path} rule {rule.name!r}: {error}")
        current = have.get(key)
        if current is None:
            reason = ("declared, not in the namespace",)
            creates.append(Change(topic, subscription, rule.name, ChangeKind.CREATE, reason, after=rule))
            continue
        if current == rule:  # the common case, and cheaper than comparing signatures
            unchanged += 1
            identical += 1
            continue
        reasons, diff = differences(signature(current), after_sig)
        if current.name != rule.name:
            reasons.insert(0, f"name case: {current.name!r} → {rule.name!r}")
        if reasons:
            replaces.append(Change(
                topic, subscription, rule.name, ChangeKind.REPLACE, tuple(reasons), current, rule, tuple(diff),
                looks_like=_label(topic, current, live_all),
            ))
        else:
            unchanged += 1
    for key, rule in have.items():
        if key in want:
            continue
        if is_temp_rule_name(rule.name):
            why = "leftover temporary rule of an interrupted apply"
        elif rule.name == DEFAULT_RULE_NAME:
            why = "$Default (the service's catch-all) is not declared"
        else:
            why = "not declared (the declared rule set is authoritative)" if owns is None else (
                "matches owns: but is not declared (the owned rule set is authoritative)")
        deletes.append(Change(
            topic, subscription, rule.name, ChangeKind.DELETE, (why,), before=rule,
            looks_like=_label(topic, rule, live_all),
        ))
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
        owns=tuple(owns) if owns is not None else None,
        foreign=tuple(Foreign(rule, looks_like=_label(topic, rule, live_all)) for rule in foreign),
    )


def _label(topic: str, rule: Rule, live: Sequence[Rule]) -> str | None:
    """What a live rule sbrules did not write looks like (:mod:`reconciler.recognizers`)."""
    found = recognize(topic, rule, live)
    return str(found) if found else None


def differences(before: Signature, after: Signature) -> tuple[list[str], list[str]]:
    """Field-level reasons why ``before`` (live) differs from ``after`` (declared), and SQL diffs."""
    reasons: list[str] = []
    diff: list[str] = []
    if before.kind != after.kind:
        reasons.append(f"filter kind: {before.kind.label} → {after.kind.label}")
    elif before.kind is FilterKind.SQL:
        assert before.sql and after.sql
        if before.sql.key != after.sql.key:
            reasons.append("SQL filter changed (canonical form)")
            diff += _sql_diff("filter", before.sql.canonical, after.sql.canonical)
    elif before.kind is FilterKind.CORRELATION:
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
        old_value, new_value = old_props.get(key), new_props.get(key)
        if old_value == new_value:
            continue
        if old_value is None:
            reasons.append(f"correlation property {key!r} added: {new_value.describe()}")  # type: ignore[union-attr]
        elif new_value is None:
            reasons.append(f"correlation property {key!r} removed (was {old_value.describe()})")
        else:
            reasons.append(f"correlation property {key!r}: {old_value.describe()} → {new_value.describe()}")
    return reasons


def _show(value: str | None) -> str:
    return "unset" if value is None else repr(value)


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
