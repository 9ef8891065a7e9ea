"""Right after its own writes, apply reads the subscription once more: a fight shows at once.

Still under its lock, once a subscription's changes are applied, apply reads its rules again. A
rule it wrote that is gone, that differs from what it wrote, or whose created-at is later than the
answer to apply's add-rule, was written by someone else within moments (a framework's start-up,
another tool); a rule it removed that is there again was added back. Each is *contested*: reported
with both times and the likely other writer, and journalled (``outcome: contested``), so that
``--since JOURNAL`` shows it for as long as the rule stays as found. The created-at apply saw on
each rule it wrote is journalled too (``outcome: verified``): the next ``--since`` compares the
service's own times, never this machine's clock with the service's.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from reconciler.limits import is_temp_rule_name
from reconciler.model import Rule
from reconciler.names import name_key
from reconciler.owners import Owners
from reconciler.plan import same_rule
from reconciler.plan.contest import likely_owner
from reconciler.plan.ops import Contest, iso_time


@dataclass(frozen=True)
class Written:
    """What apply last did to a rule: wrote ``rule`` (None: removed it), answered at ``at`` (this machine's clock)."""

    rule: Rule | None
    name: str
    at: _dt.datetime


def contests_after(
    topic: str, subscription: str, written: Mapping[str, Written], live: Sequence[Rule], owners: Owners
) -> list[Contest]:
    """The rules of ``written`` (by name key) that ``live``, read right after, shows another writer wrote."""
    by_key = {name_key(r.name): r for r in live}
    contests = []
    for key, mine in written.items():
        current = by_key.get(key)
        if mine.rule is None:
            found = "re-added" if current is not None else None
        elif current is None:
            found = "removed"
        elif not same_rule(current, mine.rule):
            found = "changed"
        elif current.created_at is not None and current.created_at > mine.at:
            found = "re-created"
        else:
            found = None
        if found is None:
            continue
        shown = current if current is not None else mine.rule
        assert shown is not None  # re-added: the live rule; otherwise the one apply wrote
        owner = likely_owner(owners, topic, subscription, shown, live)
        created = current.created_at if current is not None else None
        contests.append(Contest(topic, subscription, mine.name, created, mine.at, owner, found))
    return contests


def answered_now() -> _dt.datetime:
    """When a write's answer arrived, on this machine's clock (UTC)."""
    return _dt.datetime.now(_dt.timezone.utc)


class Writes:
    """The rules one subscription's apply added or removed, by name key (temporary rules aside)."""

    def __init__(self, clock: Callable[[], _dt.datetime] = answered_now) -> None:
        self.by_key: dict[str, Written] = {}
        self._clock = clock

    def __bool__(self) -> bool:
        return bool(self.by_key)

    def note(self, name: str, rule: Rule | None) -> None:
        """``rule`` added under ``name`` (None: ``name`` removed), its answer just in."""
        if not is_temp_rule_name(name):
            self.by_key[name_key(name)] = Written(rule, name, self._clock())

    def check(
        self, topic: str, subscription: str, live: Sequence[Rule], owners: Owners, log: Callable[..., None]
    ) -> list[Contest]:
        """The contests ``live`` shows (:func:`contests_after`), journalled through ``log`` with the
        created-at of every rule found as written (``verified``)."""
        contests = contests_after(topic, subscription, self.by_key, live, owners)
        contested = {name_key(c.rule) for c in contests}
        for rule in live:
            key = name_key(rule.name)
            if key in self.by_key and key not in contested and rule.created_at is not None:
                log(rule=rule.name, outcome="verified", created_at=iso_time(rule.created_at))
        for contest in contests:
            log(**{k: v for k, v in contest.to_json().items() if k not in ("topic", "subscription")}, outcome="contested")
        return contests
