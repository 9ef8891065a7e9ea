"""A plan shown to people and machines: text, a Markdown pull-request comment, JSON, and drift.

Every renderer reads only the plan's data (:mod:`reconciler.plan.ops`); rules appear in the rule
files' form (:func:`reconciler.model.rule_to_doc`).
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Callable

from reconciler.json_text import json_text
from reconciler.model import Rule, rule_to_doc
from reconciler.plan.ops import PLAN_FORMAT_VERSION, ChangeKind, DriftKind, Foreign, Plan, SubscriptionPlan
from reconciler.plan.ops import live_facts as json_facts

_SYMBOL = {ChangeKind.CREATE: "+", ChangeKind.REPLACE: "~", ChangeKind.DELETE: "-"}
UNDECLARED = "exists in the namespace, no rule file mentions it (sbrules leaves it alone; --strict counts it as drift)"


CLAIMED = "exists in the namespace, no rule file mentions it; {owner} owns it (sbrules.yaml owners:), so it is not drift"


def _undeclared(plan: Plan, topic: str, sub: str) -> str:
    owner = plan.claimed.get((topic, sub))
    return CLAIMED.format(owner=owner) if owner else UNDECLARED


def _undeclared_lines(plan: Plan) -> list[str]:
    return [f"undeclared {topic}/{sub}: {_undeclared(plan, topic, sub)}" for topic, sub in plan.undeclared]


def _target_lines(plan: Plan) -> list[str]:
    """Which environment and namespace a plan is for, when it was made for an environment."""
    if plan.environment is None:
        return []
    return [f"environment {plan.environment}: namespace {plan.namespace or '(not recorded)'}", ""]


def _rule_lines(rule: Rule, indent: str) -> list[str]:
    """The rule's document without its name, one key per line (values as JSON)."""
    doc = rule_to_doc(rule)
    doc.pop("name")
    return [f"{indent}{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in doc.items()]


def ago(then: _dt.datetime, now: _dt.datetime | None) -> str:
    """``created 4 min ago`` relative to when the namespace was read (the time itself without it)."""
    if now is None:
        return f"created {then.astimezone(_dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count = seconds // size
            return f"created {count} {unit}{'s' if unit == 'day' and count > 1 else ''} ago"
    return f"created {seconds} s ago"


def live_facts(rule: Rule | None, looks_like: str | None, read_at: _dt.datetime | None) -> list[str]:
    """What is known of a live rule sbrules did not write as declared: when, and by what it looks like."""
    facts = [ago(rule.created_at, read_at)] if rule is not None and rule.created_at is not None else []
    return facts + ([looks_like] if looks_like else [])


def foreign_lines(sp: SubscriptionPlan, read_at: _dt.datetime | None, indent: str = "  ") -> list[str]:
    """Each foreign rule of a subscription (outside its ``owns:``) with its filter: left alone."""
    patterns = ", ".join(repr(p) for p in sp.owns or ())
    lines: list[str] = []
    for foreign in sp.foreign:
        lines.append(f"{indent}= foreign rule {foreign.rule.name!r}  ({describe_foreign(foreign, patterns)})")
        lines += _rule_lines(foreign.rule, indent + "    ")
        lines += [f"{indent}    # {fact}" for fact in live_facts(foreign.rule, foreign.looks_like, read_at)]
    return lines


def describe_foreign(foreign: Foreign, patterns: str) -> str:
    """Why a rule is foreign and what is known of it: its owner, outside which patterns."""
    owner = f"owned by {foreign.owner}; " if foreign.owner else ""
    return f"{owner}outside owns: {patterns}; never changed, not drift"


def _shown_rule(kind: ChangeKind, before: Rule | None, after: Rule | None) -> Rule | None:
    """The rule a create or delete lists in full (a replace shows its reasons and diff instead)."""
    return after if kind is ChangeKind.CREATE else before if kind is ChangeKind.DELETE else None


def render_text(plan: Plan) -> str:
    """A terraform-like listing: + create, ~ replace (changed fields, canonical SQL diff), - delete."""
    lines: list[str] = _target_lines(plan)
    for sp in plan.subscriptions:
        if not sp.changes and not sp.foreign:
            continue
        lines.append(f"subscription {sp.shown_path}  ({sp.unchanged} unchanged)")
        for change in sp.changes:
            lines.append(f"  {_SYMBOL[change.kind]} {change.kind} rule {change.rule!r}")
            for reason in change.reasons:
                lines.append(f"      # {reason}")
            shown = _shown_rule(change.kind, change.before, change.after)
            if shown:
                lines += _rule_lines(shown, "      ")
            lines += [f"      {line}" for line in change.diff]
            lines += [f"      # {fact}" for fact in live_facts(change.before, change.looks_like, plan.read_at)]
        lines += foreign_lines(sp, plan.read_at)
        lines.append("")
    for skipped in plan.skipped:
        lines.append(f"skipped {skipped.topic}/{skipped.subscription}: {skipped.reason}")
    lines += [contest.describe() for contest in plan.contested]
    lines += _undeclared_lines(plan)
    lines += [f"note: {note}" for note in plan.notes]
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
        "### sbrules plan" + (f" — environment `{plan.environment}`" if plan.environment else ""),
        "",
        "| create | replace | delete | unchanged |",
        "|---:|---:|---:|---:|",
        f"| {s['create']} | {s['replace']} | {s['delete']} | {s['unchanged']} |",
        "",
    ]
    if not plan.has_changes:
        out.append("No changes: the namespace matches the rule files.")
    for sp in plan.subscriptions:
        if not sp.changes and not sp.foreign:
            continue
        out.append(f"<details open><summary><code>{sp.shown_path}</code> — {len(sp.changes)} change(s)</summary>")
        out.append("")
        out.append("```diff")
        for change in sp.changes:
            symbol = _SYMBOL[change.kind].replace("~", "!")  # "!" lines render highlighted in a diff block
            out.append(f"{symbol} {change.kind} {change.rule}")
            out += [f"#   {reason}" for reason in change.reasons]
            shown = _shown_rule(change.kind, change.before, change.after)
            if shown:
                out += _rule_lines(shown, f"{symbol}     ")
            out += list(change.diff)  # unindented, so its -/+ lines are coloured too
            out += [f"#   {fact}" for fact in live_facts(change.before, change.looks_like, plan.read_at)]
        out += foreign_lines(sp, plan.read_at, "")
        out.append("```")
        out.append("</details>")
        out.append("")
    for skipped in plan.skipped:
        out.append(f"- skipped `{skipped.topic}/{skipped.subscription}`: {skipped.reason}")
    out += [f"- **{contest.describe()}**" for contest in plan.contested]
    for topic, sub in plan.undeclared:
        out.append(f"- undeclared `{topic}/{sub}`: {_undeclared(plan, topic, sub)}")
    for note in plan.notes:
        out.append(f"- note: {note}")
    for warning in plan.warnings:
        out.append(f"> **warning:** {warning}")
    return "\n".join(out).rstrip() + "\n"


def render_json(plan: Plan) -> str:
    return json_text(plan.to_json())


RENDERERS: dict[str, Callable[[Plan], str]] = {"text": render_text, "markdown": render_markdown, "json": render_json}


def render_drift_text(plan: Plan, strict: bool = False) -> str:
    """One line per drifted rule (with the reasons of a modification) and undeclared subscription,
    then a verdict (undeclared subscriptions count as drift only when ``strict``)."""
    lines = _target_lines(plan)
    for sp in plan.subscriptions:
        for change in sp.changes:
            facts = live_facts(change.before, change.looks_like, plan.read_at)
            detail = "; ".join([*(change.reasons if change.kind is ChangeKind.REPLACE else ()), *facts])
            lines.append(
                f"drift {sp.shown_path} rule {change.rule!r}: {DriftKind.of(change.kind)}" + (f" ({detail})" if detail else "")
            )
            lines += [f"    {line}" for line in change.diff]
        patterns = ", ".join(repr(p) for p in sp.owns or ())
        lines += [
            f"foreign {sp.shown_path} rule {f.rule.name!r}: "
            + "; ".join([describe_foreign(f, patterns), *live_facts(f.rule, f.looks_like, plan.read_at)])
            for f in sp.foreign
        ]
    lines += [contest.describe() for contest in plan.contested]
    lines += _undeclared_lines(plan)
    lines += [f"note: {note}" for note in plan.notes]
    n = len(plan.subscriptions)
    if plan.drifted(strict):
        found = [f"{len(plan.changes)} drifted rule(s) in {n} subscriptions"]
        if strict and plan.unclaimed:
            found.append(f"{len(plan.unclaimed)} undeclared subscription(s)")
        lines.append(", ".join(found) + ".")
    else:
        lines.append(f"In sync: {n} subscriptions match the files.")
    return "\n".join(lines)


def render_drift_json(plan: Plan, strict: bool = False) -> str:
    """The plan's document (without warnings) plus ``in_sync`` and a ``drift`` list."""
    doc = plan.to_json()
    doc = {"format_version": PLAN_FORMAT_VERSION, "in_sync": not plan.drifted(strict)} | {
        k: doc[k] for k in ("environment", "namespace", "summary", "changes", "subscriptions", "skipped", "undeclared", "notes")
    }
    doc["contested"] = [c.to_json() for c in plan.contested]
    doc["foreign"] = [
        {"topic": sp.topic, "subscription": sp.subscription} | foreign.to_json()
        for sp in plan.subscriptions
        for foreign in sp.foreign
    ]
    doc["drift"] = [
        {"topic": c.topic, "subscription": c.subscription, "rule": c.rule, "kind": DriftKind.of(c.kind).value}
        | json_facts(c.before, c.looks_like)
        for c in plan.changes
    ]
    if strict:
        doc["drift"] += [{"topic": t, "subscription": s, "rule": None, "kind": "undeclared"} for t, s in plan.unclaimed]
    return json_text(doc)
