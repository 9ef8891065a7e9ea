"""Fights made visible: a rule sbrules applied, found re-created by another writer since.

``--since`` names what the previous apply left behind: its journal (``apply --journal``: when each
rule was written, the created-at apply saw on each right after writing it, the rules it already
found contested then, and when each subscription was done) or its saved plan (``plan --out``: when
the namespace was read). A declared rule whose live ``created-at`` is not the one apply saw after
writing it (or, where apply saw none, is newer than its write) was removed and added again by
someone else: the rule is *contested*, and the likely other writer is named (sbrules.yaml's
``owners:``, else the framework it looks like). A contest apply journalled stands while the live
rule is still the one it found. Comparing a created-at with a write's time compares the service's
clock with this machine's; the docs state that assumption.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from reconciler.errors import ErrorCode, SbrulesError
from reconciler.limits import is_temp_rule_name
from reconciler.model import DesiredState, Rule
from reconciler.names import name_key
from reconciler.owners import Owners
from reconciler.plan.ops import Contest, Plan, PlanError, read_time
from reconciler.recognizers import recognize

Key = tuple[str, str]
RuleKey = tuple[str, str, str]


class SinceError(SbrulesError):
    """``--since`` names no journal or plan of an apply."""

    code = ErrorCode.INPUT


@dataclass(frozen=True)
class LastApply:
    """When the previous apply last wrote each rule (by name keys) and finished each subscription."""

    source: str
    wrote: Mapping[RuleKey, _dt.datetime] = field(default_factory=dict)
    finished: Mapping[Key, _dt.datetime] = field(default_factory=dict)
    #: Rules the saved plan created or replaced: when their write landed is not in a plan.
    unknown: frozenset[RuleKey] = frozenset()
    #: The created-at apply saw on each rule it wrote, right after writing it (the journal's ``verified``).
    seen: Mapping[RuleKey, _dt.datetime] = field(default_factory=dict)
    #: The contests apply found right after its writes (the journal's ``contested``), by rule.
    contests: Mapping[RuleKey, Contest] = field(default_factory=dict)

    def applied_at(self, topic: str, subscription: str, rule: str) -> _dt.datetime | None:
        """When sbrules last wrote ``rule`` (or finished its subscription), None when unknown."""
        key = (name_key(topic), name_key(subscription), name_key(rule))
        if key in self.unknown:
            return None
        return self.wrote.get(key) or self.finished.get(key[:2])


def read_since(path: Path) -> LastApply:
    """The previous apply as its journal (JSON lines) or its saved plan (one JSON document) tells it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SinceError(f"--since {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "format_version" in doc:
        try:
            return _from_plan(str(path), Plan.from_json(doc))
        except PlanError as exc:
            raise SinceError(f"--since {path}: {exc}") from None
    return _from_journal(str(path), text)


def _from_plan(source: str, plan: Plan) -> LastApply:
    if plan.read_at is None:
        raise SinceError(f"--since {source}: the plan does not record when it read the namespace (an older sbrules wrote it)")
    finished = {(name_key(sp.topic), name_key(sp.subscription)): plan.read_at for sp in plan.subscriptions}
    written = frozenset((name_key(c.topic), name_key(c.subscription), name_key(c.rule)) for c in plan.changes)
    return LastApply(source, finished=finished, unknown=written)


def _from_journal(source: str, text: str) -> LastApply:
    wrote: dict[RuleKey, _dt.datetime] = {}
    finished: dict[Key, _dt.datetime] = {}
    seen: dict[RuleKey, _dt.datetime] = {}
    contests: dict[RuleKey, Contest] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            when = read_time(entry["time"]) if isinstance(entry, dict) else None
        except (ValueError, KeyError, TypeError):
            raise SinceError(f"--since {source}: line {number} is not an apply journal entry") from None
        if when is None or "topic" not in entry or "subscription" not in entry:
            continue
        sub = (name_key(entry["topic"]), name_key(entry["subscription"]))
        target, outcome = entry.get("target"), entry.get("outcome")
        if entry.get("op") in ("add-rule", "remove-rule") and isinstance(target, str) and not is_temp_rule_name(target) \
                and "error" not in entry:
            key = (*sub, name_key(target))
            if entry["op"] == "add-rule":
                wrote[key] = max(wrote.get(key, when), when)
            seen.pop(key, None)  # written again: what was seen or contested before no longer says anything
            contests.pop(key, None)
        elif outcome in ("verified", "contested") and isinstance(entry.get("rule"), str):
            key = (*sub, name_key(entry["rule"]))
            try:
                if outcome == "verified":
                    seen[key] = read_time(entry["created_at"])
                else:
                    contests[key] = Contest.from_json(entry)
            except (ValueError, KeyError, TypeError):
                raise SinceError(f"--since {source}: line {number} is not an apply journal entry") from None
        finished[sub] = max(finished.get(sub, when), when)
    if not finished:
        raise SinceError(f"--since {source}: neither a saved plan nor an apply journal with entries")
    return LastApply(source, wrote, finished, seen=seen, contests=contests)


def likely_owner(owners: Owners, topic: str, subscription: str, rule: Rule, live: Sequence[Rule]) -> str | None:
    """Who else likely writes ``rule``: the owner sbrules.yaml names for it, else the framework it looks like."""
    owner = owners.of_rule(topic, subscription, rule.name)
    if owner is None:
        found = recognize(topic, rule, live)
        owner = found.framework if found else None
    return owner


def with_contests(plan: Plan, desired: DesiredState, live: Mapping[Key, Any], since: LastApply) -> Plan:
    """``plan`` with every rule another writer wrote after ``since``: a declared rule whose live
    created-at is not the one apply saw (or is newer than apply's write), and every contest apply
    journalled whose rule is still as apply found it."""
    contests: dict[RuleKey, Contest] = {}
    for topic, sub in desired.subscriptions():
        rules = live.get((topic.name, sub.name))
        if not sub.managed or rules is None:
            continue
        by_key = {name_key(r.name): r for r in rules}
        sub_key = (name_key(topic.name), name_key(sub.name))
        for key, found in since.contests.items():
            current = by_key.get(key[2])
            if key[:2] == sub_key and _same_instant(current.created_at if current else None, found.created_at):
                contests[key] = found
        for declared in sub.rules or ():
            key = (*sub_key, name_key(declared.name))
            current = by_key.get(key[2])
            applied = since.applied_at(topic.name, sub.name, declared.name)
            if key in contests or current is None or current.created_at is None or applied is None:
                continue
            seen = since.seen.get(key)
            if _same_instant(current.created_at, seen) or (seen is None and current.created_at <= applied):
                continue
            owner = likely_owner(desired.owners, topic.name, sub.name, current, rules)
            contests[key] = Contest(topic.name, sub.name, current.name, current.created_at, applied, owner)
    return replace(plan, contested=tuple(contests.values()))


def _same_instant(a: _dt.datetime | None, b: _dt.datetime | None) -> bool:
    """Whether two created-at are one: equal to the millisecond (AMQP's precision; REST's is finer)."""
    if a is None or b is None:
        return a is b
    return abs(a - b) < _dt.timedelta(milliseconds=1)
