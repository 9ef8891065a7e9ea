"""Normal forms: what of a rule is compared, so that only differences the service sees show.

SQL is compared by its canonical print (whitespace, keyword case and redundant parentheses never
show); ``1=1`` / ``1=0`` SQL equals the true / false filter the service stores; compatibility level
and created-at are not part of a rule at all; correlation properties keep their AMQP type (int 3
is not long 3). Filters compare user property names case-folded (the broker looks them up
case-insensitively); actions compare exactly, since SET creates properties as written.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable

from reconciler import sql
from reconciler.limits import is_lock_rule
from reconciler.model import CorrelationFilter, FalseFilter, Rule, SqlFilter, SqlRuleAction, TrueFilter
from reconciler.names import same_name


class FilterKind(StrEnum):
    """The kind of filter a rule has once normalised (``1=1`` SQL is the true filter)."""

    SQL = "sql"
    CORRELATION = "correlation"
    TRUE = "true"
    FALSE = "false"

    @property
    def label(self) -> str:
        """How reasons name the kind: ``filter kind: SQL → correlation``."""
        return "SQL" if self is FilterKind.SQL else self.value


@functools.cache
def _canonical_true_false() -> dict[str, FilterKind]:
    return {sql.canonical_filter("1=1"): FilterKind.TRUE, sql.canonical_filter("1=0"): FilterKind.FALSE}


@dataclass(frozen=True)
class CanonicalSql:
    """A SQL text, its canonical form (what a diff shows) and its comparison key, or the parse error."""

    text: str
    canonical: str
    key: str
    error: str | None = None


def _canonical_sql(text: str, part: str) -> CanonicalSql:
    try:
        if part == "filter":
            return CanonicalSql(text, sql.canonical_filter(text), sql.filter_key(text))
        canon = sql.canonical_action(text)
        return CanonicalSql(text, canon, canon)
    except sql.SqlError as exc:
        collapsed = " ".join(text.split())
        return CanonicalSql(text, collapsed, collapsed, str(exc))


@dataclass(frozen=True)
class Signature:
    """The comparable content of a rule: filter kind and normal form, action normal form."""

    kind: FilterKind
    sql: CanonicalSql | None = None
    correlation: CorrelationFilter | None = None
    action: CanonicalSql | None = None

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
            self.kind.value,
            self.sql.key if self.sql else None,
            corr,
            self.action.key if self.action else None,
        ]
        return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def parse_error(self) -> str | None:
        """Why the filter or action SQL does not parse, or None (declared rules must parse)."""
        for part, name in ((self.sql, "filter"), (self.action, "action")):
            if part is not None and part.error is not None:
                return f"SQL {name} does not parse: {part.error}"
        return None


@functools.lru_cache(maxsize=65536)
def signature(rule: Rule) -> Signature:
    """The normalised form of ``rule`` (cached: plans compare the same rules again and again)."""
    action = _canonical_sql(rule.action.expression, "action") if isinstance(rule.action, SqlRuleAction) else None
    flt = rule.filter
    if isinstance(flt, TrueFilter):
        return Signature(FilterKind.TRUE, action=action)
    if isinstance(flt, FalseFilter):
        return Signature(FilterKind.FALSE, action=action)
    if isinstance(flt, CorrelationFilter):
        return Signature(FilterKind.CORRELATION, correlation=flt, action=action)
    assert isinstance(flt, SqlFilter)
    canon = _canonical_sql(flt.expression, "filter")
    special = _canonical_true_false().get(canon.canonical) if canon.error is None else None
    if special:
        return Signature(special, action=action)
    return Signature(FilterKind.SQL, sql=canon, action=action)


def same_rule(a: Rule, b: Rule) -> bool:
    """Whether two rules are equal once normalised (what the planner would call unchanged)."""
    return same_name(a.name, b.name) and signature(a).token == signature(b).token


def fingerprint(rules: Iterable[Rule]) -> str:
    """sha256 of the canonical rule set: what apply re-reads and compares with the plan's. Lock
    rules are no part of it: a subscription locked by an apply is the same rule set."""
    entries = sorted(json.dumps(rule.name) + ":" + signature(rule).token for rule in rules if not is_lock_rule(rule))
    return "sha256:" + hashlib.sha256("\n".join(entries).encode()).hexdigest()
