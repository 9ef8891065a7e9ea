"""What the service checks before it adds a rule, whichever API asks (AMQP add-rule, the management
REST API's PUT): the rule's name, the SQL of its filter and action, and the topic's quota of
filters of its kind."""

from __future__ import annotations

from typing import Any, Callable

from reconciler import limits, model, sql
from reconciler.emulator.namespace import Namespace, OperationError, bad_request


def check_rule(rule: model.Rule) -> None:
    """Refuse (400) a rule whose name or SQL the service would refuse."""
    problem = limits.name_problem(limits.EntityKind.RULE, rule.name)
    if problem:
        raise bad_request(problem)
    if isinstance(rule.filter, model.SqlFilter):
        _check_sql(rule.name, "filter", rule.filter.expression, sql.parse_filter)
    if isinstance(rule.action, model.SqlRuleAction):
        _check_sql(rule.name, "action", rule.action.expression, sql.parse_action)


def check_topic_quota(namespace: Namespace, topic_name: str, flt: model.Filter) -> None:
    """Refuse (403) one more rule of ``flt``'s kind on a topic at its limit, as the service does.
    Call it holding the namespace's lock, with the add that follows."""
    as_sql = limits.counts_as_sql_filter(flt)
    limit, kind = (
        (limits.SQL_FILTERS_PER_TOPIC, "SQL") if as_sql else (limits.CORRELATION_FILTERS_PER_TOPIC, "correlation")
    )
    subscriptions = namespace.topic(topic_name).subscriptions.values()
    if sum(len(s.rules) for s in subscriptions) < limit.value:
        return  # fewer rules of any kind than the limit: no need to visit each one
    count = sum(limits.counts_as_sql_filter(e.rule.filter) is as_sql for s in subscriptions for e in s.rules.values())
    if count >= limit.value:
        raise OperationError(
            403,
            "amqp:resource-limit-exceeded",
            f"The maximum number of {kind} filters per topic ({limit.value}) has been reached.",
        )


def _check_sql(rule: str, kind: str, text: str, parse: Callable[[str], Any]) -> None:
    try:
        parse(text)
    except sql.SqlError as exc:
        where = f" at line {exc.line}, column {exc.column}" if getattr(exc, "line", None) else ""
        raise OperationError(
            400, "com.microsoft:argument-error", f"rule {rule!r}: invalid SQL {kind}{where}: {exc.message}"
        ) from None
