"""Fights made visible: a rule sbrules applied, found re-created by another writer since.

``--since`` names what the previous apply left behind: its journal (``apply --journal``: when each
rule was written and when each subscription was done) or its saved plan (``plan --out``: when the
namespace was read). A declared rule whose live ``created-at`` is newer than sbrules' last write of
it was removed and added again by someone else: the rule is *contested*, and the likely other
writer is named (sbrules.yaml's ``owners:``, else the framework it looks like). The times compare
the service's clock with this machine's; the docs state that assumption.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from reconciler.errors import ErrorCode, SbrulesError
from reconciler.limits import is_temp_rule_name
from reconciler.model import DesiredState
from reconciler.names import name_key
from reconciler.plan.ops import Contest, Plan, PlanError, read_time
from reconciler.recognizers import recognize

Key = tuple[str, str]


class SinceError(SbrulesError):
    """``--since`` names no journal or plan of an apply."""

    code = ErrorCode.INPUT


@dataclass(frozen=True)
class LastApply:
    """When the previous apply last wrote each rule (by name keys) and finished each subscription."""

    source: str
    wrote: Mapping[tuple[str, str, str], _dt.datetime] = field(default_factory=dict)
    finished: Mapping[Key, _dt.datetime] = field(default_factory=dict)
    #: Rules the saved plan created or replaced: when their write landed is not in a plan.
    unknown: frozenset[tuple[str, str, str]] = frozenset()

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
    wrote: dict[tuple[str, str, str], _dt.datetime] = {}
    finished: dict[Key, _dt.datetime] = {}
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
        target = entry.get("target")
        if entry.get("op") == "add-rule" and isinstance(target, str) and not is_temp_rule_name(target) and "error" not in entry:
            key = (*sub, name_key(target))
            wrote[key] = max(wrote.get(key, when), when)
        finished[sub] = max(finished.get(sub, when), when)
    if not finished:
        raise SinceError(f"--since {source}: neither a saved plan nor an apply journal with entries")
    return LastApply(source, wrote, finished)


def with_contests(plan: Plan, desired: DesiredState, live: Mapping[Key, Any], since: LastApply) -> Plan:
    """``plan`` with every declared rule found re-created after ``since`` wrote it."""
    contests = []
    for topic, sub in desired.subscriptions():
        rules = live.get((topic.name, sub.name))
        if not sub.managed or rules is None:
            continue
        by_key = {name_key(r.name): r for r in rules}
        for declared in sub.rules or ():
            current = by_key.get(name_key(declared.name))
            applied = since.applied_at(topic.name, sub.name, declared.name)
            if current is None or current.created_at is None or applied is None or current.created_at <= applied:
                continue
            owner = desired.owners.of_rule(topic.name, sub.name, current.name)
            if owner is None:
                found = recognize(topic.name, current, rules)
                owner = found.framework if found else None
            contests.append(Contest(topic.name, sub.name, current.name, current.created_at, applied, owner))
    return replace(plan, contested=tuple(contests))
