"""Offline checks of a DesiredState: what the broker would reject, and what is legal but risky.

No network: these run on every pull request. SQL is checked by ``reconciler.sql`` (the same parser
the emulator and planner use) and names and sizes by ``reconciler.limits`` (the emulator's table
too), so validate rejects exactly what rule creation would reject.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Iterator

from reconciler import limits
from reconciler.diagnostics import Diagnostic, SqlContext
from reconciler.limits import EntityKind
from reconciler.model import (
    DEFAULT_RULE_NAME,
    CorrelationFilter,
    DesiredState,
    Origin,
    Rule,
    SqlFilter,
    SqlRuleAction,
    Subscription,
    Topic,
)
from reconciler.names import owned
from reconciler.sql import SqlError, parse_action, parse_filter
from reconciler.sql.parser import dash_comment

#: Seconds the static proofs may take in one validate (``--static-budget``): they only warn, and a
#: machine busier than the one the targets were measured on should not make validate slow.
STATIC_BUDGET_SECONDS = 5.0


def lint(state: DesiredState, *, static_budget: float | None = 0.0) -> list[Diagnostic]:
    """Every finding about ``state``; errors make the files invalid, warnings and info do not.

    The static proofs (``unsatisfiable``, ``redundant-rule``; warnings only) run for at most
    ``static_budget`` seconds of their own (None: no limit; 0: not at all, as plan and apply need
    only the errors); the subscriptions they did not reach are named in one note.
    """
    out: list[Diagnostic] = []
    spent = 0.0  # seconds in the static proofs alone: the budget is theirs
    proved = skipped = 0
    for topic in state.topics:
        out.extend(_entity_names(topic))
        out.extend(_topic_limits(topic))
        for sub in topic.subscriptions:
            out.extend(_subscription(topic, sub))
            for rule in sub.rules or ():
                out.extend(_rule(rule))
            if not sub.rules or static_budget == 0:
                continue
            if static_budget is not None and spent > static_budget:
                skipped += 1
                continue
            started = time.monotonic()
            out.extend(_static(topic, sub))
            spent += time.monotonic() - started
            proved += 1
    if skipped:
        out.append(Diagnostic(
            "info", "static-budget",
            f"the static proofs (unsatisfiable, redundant-rule) stopped after {static_budget:g}s: {proved:,} "
            f"subscriptions checked, {skipped:,} not; `validate --static-budget 0` skips them, a larger budget or "
            "`sbrules analyze` checks them all",
        ))
    return out


def _static(topic: Topic, sub: Subscription) -> Iterator[Diagnostic]:
    """What the solver proves about the subscription's filters (reconciler.sql.static)."""
    from reconciler.sql.static import analyse_rules  # the solver (z3) loads only when the proofs run

    where = f"{topic.name}/{sub.name}"
    for finding in analyse_rules(sub.rules or ()):
        rule, cover = finding.rule, finding.covered_by
        if cover is None:
            message = (
                f"rule {rule.name!r} of {where}: no message can match this filter (proven, NULL and missing "
                "properties included): the rule delivers nothing"
            )
            yield Diagnostic("warning", "unsatisfiable", message, rule.filter_origin or rule.origin)
        else:
            message = (
                f"rule {rule.name!r} of {where} is redundant: rule {cover.name!r} delivers every message it matches "
                "(proven); removing it would not change what the subscription receives"
            )
            related = (cover.origin,) if cover.origin else ()
            yield Diagnostic("warning", "redundant-rule", message, rule.origin, related=related)


def _entity_names(topic: Topic) -> Iterator[Diagnostic]:
    """The topic's and its subscriptions' names, by the service's rules for each kind."""
    problem = limits.name_problem(EntityKind.TOPIC, topic.name)
    if problem:
        yield Diagnostic("error", "topic-name", problem, topic.origin)
    for sub in topic.subscriptions:
        problem = limits.name_problem(EntityKind.SUBSCRIPTION, sub.name)
        if problem:
            yield Diagnostic("error", "subscription-name", problem, sub.origin)


def _subscription(topic: Topic, sub: Subscription) -> Iterator[Diagnostic]:
    where = f"{topic.name}/{sub.name}"
    if sub.rules is None:
        if sub.fallthrough:
            return  # its rule could not be generated: the loader's fallthrough error says why
        yield Diagnostic("info", "unmanaged", f"{where} has no 'rules' key: sbrules leaves its rules alone", sub.origin)
        return
    if not sub.rules:
        if not sub.allow_empty:
            yield Diagnostic(
                "error",
                "empty-subscription",
                f"{where} declares no rules, so it would receive nothing; add rules or set allow_empty: true",
                sub.origin,
            )
        return
    if sub.rule(DEFAULT_RULE_NAME) is None and owned(DEFAULT_RULE_NAME, sub.owns):
        yield Diagnostic(
            "info",
            "default-removed",
            f"{where} does not declare $Default: the plan removes it after the declared rules exist",
            sub.origin,
        )


def _topic_limits(topic: Topic) -> Iterator[Diagnostic]:
    sql = corr = 0
    for sub in topic.subscriptions:
        for rule in sub.rules or ():
            if limits.counts_as_sql_filter(rule.filter):
                sql += 1
            else:
                corr += 1
    for count, kind, limit in (
        (sql, "SQL", limits.SQL_FILTERS_PER_TOPIC),
        (corr, "correlation", limits.CORRELATION_FILTERS_PER_TOPIC),
    ):
        if count > limit.value:
            message = f"topic {topic.name} has {count} {kind} filters; Service Bus allows {limit.value}"
            yield Diagnostic("error", "topic-limit", message, topic.origin)


def _rule(rule: Rule) -> Iterator[Diagnostic]:
    yield from _rule_name(rule)
    if isinstance(rule.filter, CorrelationFilter):
        yield from _correlation(rule, rule.filter)
    if isinstance(rule.filter, SqlFilter):
        yield from _sql_text(rule.filter.expression, rule, rule.filter_origin, "filter")
    if isinstance(rule.action, SqlRuleAction):
        yield from _sql_text(rule.action.expression, rule, rule.action_origin, "action")


def _rule_name(rule: Rule) -> Iterator[Diagnostic]:
    problem = limits.name_problem(EntityKind.RULE, rule.name)
    if problem:
        yield Diagnostic("error", "rule-name", problem, rule.origin)
    else:
        reserved = limits.reserved_rule_name_problem(rule.name)
        if reserved:
            yield Diagnostic("error", "rule-name", reserved, rule.origin)


def _correlation(rule: Rule, flt: CorrelationFilter) -> Iterator[Diagnostic]:
    if flt.is_empty():
        message = f"rule {rule.name!r}: a correlation filter needs at least one field"
        yield Diagnostic("error", "empty-correlation", message, rule.origin)


def _sql_text(text: str, rule: Rule, origin: Origin | None, kind: str) -> Iterator[Diagnostic]:
    if not text.strip():
        yield Diagnostic("error", "sql-syntax", f"rule {rule.name!r}: the {kind} is empty", origin or rule.origin)
        return
    too_long = limits.sql_text_problem(text, kind)
    if too_long:
        yield Diagnostic("error", "sql-length", f"rule {rule.name!r}: {too_long}", origin or rule.origin)
        return
    try:
        (parse_filter if kind == "filter" else parse_action)(text)
    except SqlError as exc:
        yield Diagnostic(
            "error",
            "sql-syntax",
            f"rule {rule.name!r}: invalid SQL {kind}: {exc.message}",
            _point_into(origin or rule.origin, exc.line, exc.column),
            sql=SqlContext(text, exc.line, exc.column),
        )
        return
    dashes = dash_comment(text)
    if dashes is not None:
        line = text.count("\n", 0, dashes) + 1
        column = dashes - (text.rfind("\n", 0, dashes) + 1) + 1
        yield Diagnostic(
            "warning",
            "sql-dash-comment",
            f"rule {rule.name!r}: '--' is not a comment in Service Bus SQL: it is minus twice, so what follows is "
            f"part of the {kind} (`a = 1 -- eu` means `a = 1 - (-eu)`); put notes in the rule's description",
            _point_into(origin or rule.origin, line, column),
            sql=SqlContext(text, line, column),
        )


def _point_into(origin: Origin | None, line: int, column: int) -> Origin | None:
    """Map a line/column inside the SQL text onto the file (exact for one-line and block scalars)."""
    if origin is None:
        return None
    if line == 1:
        return replace(origin, column=origin.column + column - 1)
    return Origin(origin.file, origin.line + line - 1, origin.column + column - 1)
