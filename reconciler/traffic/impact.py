"""What a rule change does to real traffic: one Spark job over a Parquet sample.

For every declared (managed) subscription the desired rules and the *current* rules (read live
from the namespace, or the ``before`` side of a plan file) are compiled to native Spark columns
(:mod:`reconciler.sql.spark`). One aggregation then counts, per subscription, the messages
delivered, gained and lost versus today and the messages whose filter evaluation fails
(dead-letter candidates); per rule, its matches and errors; and across each topic, the messages no
subscription takes. A few example message ids come with every gained / lost / error bucket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from reconciler.errors import SbrulesError
from reconciler.model import DesiredState, Filter, Rule
from reconciler.traffic.report import render_report

__all__ = ["ImpactError", "impact_report", "render_report"]

EXAMPLES = 3


class ImpactError(SbrulesError):
    """The impact report cannot be computed (no sample, bad plan file, no connection string)."""


@dataclass(frozen=True)
class Scope:
    """One subscription to report on: the rules it will have and the rules it has now."""

    topic: str
    subscription: str
    desired: tuple[Rule, ...]
    current: tuple[Rule, ...]
    #: Where ``current`` came from: live | plan | new (not in the namespace yet) | unchanged.
    current_source: str


def impact_report(
    desired: DesiredState,
    dataset: str,
    against: str = "live",
    spark_master: str | None = None,
    connection_string: str | None = None,
) -> dict[str, Any]:
    """Evaluate desired and current rules on the sample ``dataset``; the report as a JSON-able dict."""
    scopes, skipped = _scopes(desired, against, connection_string)
    if not scopes:
        raise ImpactError("no managed subscription (with a rules: list) in the rule files to report on")
    from reconciler.traffic.session import spark_session

    spark = spark_session(spark_master)
    frame = _read_sample(spark, dataset)
    scopes, unsampled = _sampled_topics_only(frame, scopes)
    skipped += unsampled
    report = _evaluate(frame, scopes)
    report.update(dataset=str(dataset), against=against, skipped=skipped)
    return report


# ------------------------------------------------------------------------------------------------
# What to compare
# ------------------------------------------------------------------------------------------------


def _scopes(desired: DesiredState, against: str, connection_string: str | None) -> tuple[list[Scope], list[dict]]:
    managed = [(t, s) for t, s in desired.subscriptions() if s.managed]
    skipped = [
        {"topic": t.name, "subscription": s.name, "reason": "unmanaged (no rules: list)"}
        for t, s in desired.subscriptions()
        if not s.managed
    ]
    if against == "live":
        current = _live_rules([(t.name, s.name) for t, s in managed], connection_string)
    else:
        current = _plan_rules(desired, against)
    scopes = []
    for topic, sub in managed:
        rules, source = current.get((topic.name, sub.name), (tuple(sub.rules or ()), "unchanged"))
        scopes.append(Scope(topic.name, sub.name, tuple(sub.rules or ()), tuple(rules), source))
    return scopes, skipped


def _live_rules(
    subscriptions: Sequence[tuple[str, str]], connection_string: str | None
) -> dict[tuple[str, str], tuple[tuple[Rule, ...], str]]:
    if not connection_string:
        raise ImpactError(
            "--against live needs a connection string (--connection-string or $SERVICEBUS_CONNECTION_STRING); "
            "or compare with a plan file: --against PLAN.json"
        )
    from reconciler.amqp.client import ManagementClient
    from reconciler.amqp.errors import NotFoundError

    out: dict[tuple[str, str], tuple[tuple[Rule, ...], str]] = {}
    with ManagementClient(connection_string) as client:
        for topic, sub in subscriptions:
            try:
                out[(topic, sub)] = (tuple(client.list_rules(topic, sub)), "live")
            except NotFoundError:
                out[(topic, sub)] = ((), "new")
    return out


def _plan_rules(desired: DesiredState, path: str) -> dict[tuple[str, str], tuple[tuple[Rule, ...], str]]:
    """Current rules from a plan: the declared rules the plan leaves alone plus every ``before``."""
    from reconciler.plan import Plan, PlanError

    try:
        plan = Plan.from_json(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise ImpactError(f"--against: no such plan file {path!r} (use 'live' or a PLAN.json)") from None
    except (json.JSONDecodeError, PlanError) as exc:
        raise ImpactError(f"--against {path}: {exc}") from None
    out: dict[tuple[str, str], tuple[tuple[Rule, ...], str]] = {}
    for sp in plan.subscriptions:
        topic = desired.topic(sp.topic)
        sub = topic.subscription(sp.subscription) if topic else None
        declared = tuple(sub.rules or ()) if sub else ()
        touched = {c.rule for c in sp.changes}
        rules = [r for r in declared if r.name not in touched]
        rules += [c.before for c in sp.changes if c.before is not None]
        key = (topic.name if topic else sp.topic, sub.name if sub else sp.subscription)
        out[key] = (tuple(rules), "plan")
    return out


def _sampled_topics_only(frame: Any, scopes: list[Scope]) -> tuple[list[Scope], list[dict]]:
    """Keep subscriptions whose topic has sampled messages: with no traffic, "never matches" would mislead."""
    sampled = {row[0].lower() for row in frame.select("topic").distinct().collect() if row[0] is not None}
    kept = [s for s in scopes if s.topic.lower() in sampled]
    if not kept:
        topics = ", ".join(sorted({s.topic for s in scopes}))
        raise ImpactError(f"the sample holds no messages of the declared topics ({topics}); sample them first")
    skipped = [
        {"topic": s.topic, "subscription": s.subscription, "reason": "no sampled messages of this topic"}
        for s in scopes
        if s.topic.lower() not in sampled
    ]
    return kept, skipped


def _read_sample(spark: Any, dataset: str) -> Any:
    path = Path(dataset)
    if "://" not in dataset and not any(path.glob("*.parquet")):
        raise ImpactError(f"{dataset} holds no Parquet sample (create one with `sbrules sample --out {dataset}`)")
    return spark.read.parquet(str(dataset))


# ------------------------------------------------------------------------------------------------
# The Spark job
# ------------------------------------------------------------------------------------------------


def _evaluate(frame: Any, scopes: list[Scope]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from reconciler.sql.spark import property_names, rule_columns

    # Each property the filters name is looked up in the props map once per message.
    names = sorted({n for s in scopes for r in s.desired + s.current for n in property_names(r.filter)})
    cells = {name: F.col(f"_p{i}") for i, name in enumerate(names)}
    frame = frame.select("*", *(F.try_element_at(F.col("props"), F.lit(n)).alias(f"_p{i}") for i, n in enumerate(names)))

    # One pair of columns per distinct filter: unchanged rules cost nothing extra.
    filters: dict[Filter, int] = {}
    fallback: dict[int, str] = {}
    compiled = []
    for scope in scopes:
        for rule in scope.desired + scope.current:
            if rule.filter in filters:
                continue
            index = len(compiled)
            filters[rule.filter] = index
            columns = rule_columns(rule, cells)
            compiled.append(columns.matched.alias(f"m{index}"))
            compiled.append(columns.error.alias(f"e{index}"))
            if columns.fallback:
                fallback[index] = columns.fallback

    topic_names = sorted({s.topic.lower() for s in scopes})
    message_id = F.coalesce(F.col("message_id"), F.concat(F.lit("seq:"), F.col("sequence_number").cast("string")))
    topic_of = F.lower(F.col("topic"))
    base = frame.where(topic_of.isin(*topic_names)).select(topic_of.alias("_topic"), message_id.alias("_id"), *compiled)

    def matched(rules: Sequence[Rule]) -> Any:
        out = F.lit(False)
        for rule in rules:
            out = out | F.col(f"m{filters[rule.filter]}")
        return out

    def failed(rules: Sequence[Rule]) -> Any:
        out = F.lit(False)
        for rule in rules:
            out = out | F.col(f"e{filters[rule.filter]}").isNotNull()
        return out

    flags = [F.col("_topic"), F.col("_id")]
    for n, scope in enumerate(scopes):
        in_topic = F.col("_topic") == scope.topic.lower()
        flags += [
            (in_topic & matched(scope.desired)).alias(f"new{n}"),
            (in_topic & matched(scope.current)).alias(f"old{n}"),
            (in_topic & failed(scope.desired)).alias(f"err{n}"),
        ]
        flags += [(in_topic & F.col(f"m{filters[r.filter]}")).alias(f"rm{n}_{i}") for i, r in enumerate(scope.desired)]
        flags += [
            (in_topic & F.col(f"e{filters[r.filter]}").isNotNull()).alias(f"re{n}_{i}")
            for i, r in enumerate(scope.desired)
        ]
    taken = F.lit(False)
    for n in range(len(scopes)):
        taken = taken | F.col(f"new{n}")
    flagged = base.select(*flags, (~taken).alias("unrouted"))

    aggs = [F.count(F.lit(1)).alias("messages"), *_bucket(F, "unrouted", F.col("unrouted"))]
    for n, scope in enumerate(scopes):
        new, old = F.col(f"new{n}"), F.col(f"old{n}")
        aggs += [_count(F, new, f"delivered{n}"), _count(F, old, f"before{n}")]
        aggs += _bucket(F, f"gained{n}", new & ~old)
        aggs += _bucket(F, f"lost{n}", old & ~new)
        aggs += _bucket(F, f"errors{n}", F.col(f"err{n}"))
        for i in range(len(scope.desired)):
            aggs += [_count(F, F.col(f"rm{n}_{i}"), f"rm{n}_{i}"), _count(F, F.col(f"re{n}_{i}"), f"re{n}_{i}")]
    row = flagged.agg(*aggs).collect()[0].asDict()
    return _shape(row, scopes, filters, fallback)


def _count(F: Any, cond: Any, name: str) -> Any:
    return F.sum(F.when(cond, F.lit(1)).otherwise(F.lit(0))).alias(name)


def _bucket(F: Any, name: str, cond: Any) -> list[Any]:
    """The count of ``cond`` plus up to three example ids (smallest, largest, a hashed pick)."""
    picked = F.when(cond, F.col("_id"))
    return [
        _count(F, cond, name),
        F.min(picked).alias(f"{name}_x0"),
        F.max(picked).alias(f"{name}_x1"),
        F.min_by(picked, F.when(cond, F.xxhash64(F.col("_id")))).alias(f"{name}_x2"),
    ]


def _examples(row: dict[str, Any], name: str) -> list[str]:
    out: list[str] = []
    for i in range(EXAMPLES):
        value = row.get(f"{name}_x{i}")
        if value is not None and value not in out:
            out.append(value)
    return sorted(out)


def _shape(row: dict[str, Any], scopes: list[Scope], filters: dict[Filter, int], fallback: dict[int, str]) -> dict[str, Any]:
    subs = []
    never, python_rules = [], []
    for n, scope in enumerate(scopes):
        rules = []
        for i, rule in enumerate(scope.desired):
            index = filters[rule.filter]
            entry = {
                "name": rule.name,
                "matched": int(row[f"rm{n}_{i}"] or 0),
                "errors": int(row[f"re{n}_{i}"] or 0),
                "evaluation": "python" if index in fallback else "native",
            }
            rules.append(entry)
            where = {"topic": scope.topic, "subscription": scope.subscription, "rule": rule.name}
            if entry["matched"] == 0:
                never.append(where)
            if index in fallback:
                python_rules.append({**where, "reason": fallback[index]})
        subs.append(
            {
                "topic": scope.topic,
                "subscription": scope.subscription,
                "current_rules": scope.current_source,
                "delivered": int(row[f"delivered{n}"] or 0),
                "delivered_before": int(row[f"before{n}"] or 0),
                "gained": int(row[f"gained{n}"] or 0),
                "lost": int(row[f"lost{n}"] or 0),
                "errors": int(row[f"errors{n}"] or 0),
                "examples": {k: _examples(row, f"{k}{n}") for k in ("gained", "lost", "errors")},
                "rules": rules,
            }
        )
    return {
        "messages": int(row["messages"] or 0),
        "unrouted": int(row["unrouted"] or 0),
        "unrouted_examples": _examples(row, "unrouted"),
        "subscriptions": subs,
        "never_matching_rules": never,
        "python_fallback_rules": python_rules,
    }
