"""What a rule change does to real traffic: one Spark job over a Parquet sample.

For every declared (managed) subscription the desired rules and the *current* rules (those a
:class:`~reconciler.plan.Plan` starts from: the declared rules it leaves alone and every change's
``before``, whether the plan was just read from the namespace or saved to a file) are compiled to
native Spark columns (:mod:`reconciler.traffic.spark`). One pass groups the messages by their filter outcomes
(:mod:`reconciler.traffic.tally`); from those groups come, per subscription, the messages
delivered, gained and lost versus today and the messages whose filter evaluation fails
(dead-letter candidates); per rule, its matches and errors; and across each topic, the messages no
subscription takes. A few example messages, with their properties, come with every gained / lost /
error bucket, and every subscription lists the rule changes behind its numbers, each with the
traffic its old and new filter match. The report is one JSON-able dict that every format renders.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable

from reconciler import progress
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.model import DesiredState, Filter, Rule
from reconciler.plan import Plan, PlanError, plan_subscription
from reconciler.traffic import failures
from reconciler.traffic.analysis import BREAKDOWN, Health, Subscriber
from reconciler.traffic.footers import OutdatedSample, PropertyTypes, property_types, sample_facts
from reconciler.traffic.location import for_spark
from reconciler.traffic.report import render_report
from reconciler.traffic.rows import SCHEMA, row_to_message
from reconciler.traffic.tally import Answers, Question, resolve, tally

__all__ = ["ImpactError", "impact_report", "render_report"]


class ImpactError(SbrulesError):
    """The impact report cannot be computed (no subscription to report on, an outdated sample)."""

    code = ErrorCode.INPUT


class CurrentSource(StrEnum):
    """Where a subscription's current rules came from (the report's ``current_rules``)."""

    LIVE = "live"
    PLAN = "plan"
    #: declared but not in the namespace yet: every message it gets is new
    NEW = "new"
    #: not in the plan: the declared rules, which the plan leaves as they are
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Scope:
    """One subscription to report on: the rules it will have and the rules it has now."""

    topic: str
    subscription: str
    desired: tuple[Rule, ...]
    current: tuple[Rule, ...]
    current_source: CurrentSource


def impact_report(
    desired: DesiredState,
    plan: Plan,
    dataset: str,
    *,
    against: str,
    spark_master: str | None = None,
    new: frozenset[tuple[str, str]] = frozenset(),
) -> dict[str, Any]:
    """Evaluate the declared rules and the rules before ``plan`` on the sample ``dataset``; the
    report as a JSON-able dict.

    ``against`` says where the plan came from ("live": just read from the namespace; else the plan
    file's path); ``new`` names the planned subscriptions that do not exist yet.
    """
    # Before the JVM starts: a missing or broken sample is known in milliseconds.
    messages = failures.check_sample(dataset)
    source = CurrentSource.LIVE if against == "live" else CurrentSource.PLAN
    scopes, skipped = _scopes(desired, plan, source, new)
    if not scopes:
        raise ImpactError("no managed subscription (with a rules: list) in the rule files to report on")
    filters = {rule.filter for scope in scopes for rule in scope.desired + scope.current}

    def evaluate(frame: Any, types: PropertyTypes, topics: frozenset[str]) -> dict[str, Any]:
        nonlocal scopes
        scopes, unsampled = _sampled_topics_only(topics, scopes)
        skipped.extend(unsampled)
        sampled = {topic.lower() for topic in topics}
        subscribers = [s for s in desired_subscribers(desired, plan) if s.topic.lower() in sampled]
        return _evaluate(frame, scopes, types, lambda found: Health(subscribers, "desired", dict(found)))

    report = on_sample(dataset, spark_master, None if messages is None else messages * len(filters), evaluate, messages=messages)
    report.update(dataset=str(dataset), against=against, skipped=skipped)
    return report


def on_sample(
    dataset: str,
    spark_master: str | None,
    evaluations: int | None,
    evaluate: Callable[[Any, PropertyTypes, frozenset[str]], dict[str, Any]],
    *,
    messages: int | None = None,
) -> dict[str, Any]:
    """``evaluate(frame, property types, topics)`` on the sample ``dataset`` (of ``messages``, when
    known) read by a Spark session sized for ``evaluations`` filter evaluations (None: unknown);
    Spark's failures become one line. Its phases are told on ``reconciler.progress``."""
    from reconciler.traffic.executors import start_local_workers
    from reconciler.traffic.session import spark_session

    with progress.task(), failures.translated(dataset):
        spark = spark_session(spark_master, evaluations=evaluations)
        start_local_workers(spark)
        progress.phase("reading the sample" if messages is None else f"reading {messages:,} messages")
        frame = spark.read.parquet(for_spark(dataset))
        missing = [name for name in SCHEMA.names if name not in frame.columns]
        if missing:  # a sample given by URL, which check_sample could not open
            raise failures.not_a_sample(str(dataset), missing)
        types, topics = _sample_facts(frame)
        return evaluate(frame, types, topics)


def desired_subscribers(desired: DesiredState, plan: Plan | None = None) -> list[Subscriber]:
    """Every declared subscription as routing health sees it: its declared rules (None: unmanaged);
    and, from a plan, the subscriptions no file mentions: with the live rules the plan read, or
    unknown (a saved plan keeps their names only)."""
    out = [Subscriber(t.name, s.name, s.rules, s.sampling_tap, s.fallthrough) for t, s in desired.subscriptions()]
    if plan is not None:
        out += [Subscriber(t, s, plan.bystanders.get((t, s)), False, False) for t, s in plan.undeclared]
    return out


# ------------------------------------------------------------------------------------------------
# What to compare
# ------------------------------------------------------------------------------------------------


def _scopes(
    desired: DesiredState, plan: Plan, source: CurrentSource, new: frozenset[tuple[str, str]]
) -> tuple[list[Scope], list[dict]]:
    managed = [(t, s) for t, s in desired.subscriptions() if s.managed]
    skipped = [
        {"topic": t.name, "subscription": s.name, "reason": "unmanaged (no rules: list)"}
        for t, s in desired.subscriptions()
        if not s.managed
    ]
    current = _rules_before(desired, plan)
    scopes = []
    for topic, sub in managed:
        key = (topic.name, sub.name)
        declared = tuple(sub.rules or ())
        if key in new:
            scopes.append(Scope(topic.name, sub.name, declared, (), CurrentSource.NEW))
        elif key in current:
            scopes.append(Scope(topic.name, sub.name, declared, current[key], source))
        else:
            scopes.append(Scope(topic.name, sub.name, declared, declared, CurrentSource.UNCHANGED))
    return scopes, skipped


def _rules_before(desired: DesiredState, plan: Plan) -> dict[tuple[str, str], tuple[Rule, ...]]:
    """Each planned subscription's rules before the plan: the declared rules it leaves alone plus
    every change's ``before``."""
    out: dict[tuple[str, str], tuple[Rule, ...]] = {}
    for sp in plan.subscriptions:
        topic = desired.topic(sp.topic)
        sub = topic.subscription(sp.subscription) if topic else None
        declared = tuple(sub.rules or ()) if sub else ()
        touched = {c.rule for c in sp.changes}
        rules = [r for r in declared if r.name not in touched]
        rules += [c.before for c in sp.changes if c.before is not None]
        key = (topic.name if topic else sp.topic, sub.name if sub else sp.subscription)
        out[key] = tuple(rules)
    return out


def _sample_facts(frame: Any) -> tuple[PropertyTypes, frozenset[str]]:
    """The sample's property types and topics (:func:`reconciler.traffic.footers.sample_facts`)."""
    try:
        return sample_facts(frame)
    except OutdatedSample as exc:
        raise ImpactError(
            f"{exc.path} was sampled by an older sbrules, which widened property types (short to int, float to double, "
            "char to string); sample the traffic again with `sbrules sample`"
        ) from None


def _sampled_topics_only(topics: frozenset[str], scopes: list[Scope]) -> tuple[list[Scope], list[dict]]:
    """Keep subscriptions whose topic has sampled messages: with no traffic, "never matches" would mislead."""
    sampled = {topic.lower() for topic in topics}
    kept = [s for s in scopes if s.topic.lower() in sampled]
    if not kept:
        declared = ", ".join(sorted({s.topic for s in scopes}))
        raise ImpactError(f"the sample holds no messages of the declared topics ({declared}); sample them first")
    skipped = [
        {"topic": s.topic, "subscription": s.subscription, "reason": "no sampled messages of this topic"}
        for s in scopes
        if s.topic.lower() not in sampled
    ]
    return kept, skipped


# ------------------------------------------------------------------------------------------------
# The Spark job
# ------------------------------------------------------------------------------------------------


def _evaluate(
    frame: Any,
    scopes: list[Scope],
    types: PropertyTypes | None = None,
    health_for: Callable[[PropertyTypes], Health] | None = None,
) -> dict[str, Any]:
    """The report's Spark job over ``frame``; ``types`` as :func:`_sample_facts` found them (None: read
    them here). ``health_for`` makes the routing-health questions, answered by the same pass
    (the report's ``routing_health``)."""
    from pyspark.sql import functions as F

    from reconciler.traffic.executors import executor_imports
    from reconciler.traffic.session import is_connect
    from reconciler.traffic.spark import PropertyCells, property_names, rule_columns
    from reconciler.traffic.spark.depth import CONNECT_MAX_NESTING
    from reconciler.traffic.tally import OUTCOME_NESTING

    # Each property the filters name is looked up in the props map once per message, and the
    # filters are translated for the types the sample's properties actually have.
    if types is None:
        types = property_types(frame)
    health = health_for(types) if health_for is not None else None
    extra = health.filters() if health is not None else []
    names = {n for s in scopes for r in s.desired + s.current for n in property_names(r.filter)}
    names |= {n for flt in extra for n in property_names(flt)}
    frame, cells = PropertyCells.over(frame, names, types)

    # Over Spark Connect a filter's columns must leave room for the grouping query above them.
    max_nesting = CONNECT_MAX_NESTING - OUTCOME_NESTING if is_connect(frame.sparkSession) else None
    # One bit per distinct filter: unchanged rules cost nothing extra.
    filters: dict[Filter, int] = {}
    fallback: dict[int, str] = {}
    outcomes: list[tuple[Any, Any]] = []
    evaluated = [rule for scope in scopes for rule in scope.desired + scope.current]
    evaluated += [Rule("routing-health", flt) for flt in extra]
    topic_names = sorted({s.topic.lower() for s in scopes} | set(health.topics() if health is not None else ()))
    progress.phase(f"evaluating {_count(len({r.filter for r in evaluated}), 'filter')} over {_count(len(topic_names), 'topic')}")
    for rule in evaluated:
        if rule.filter in filters:
            continue
        filters[rule.filter] = len(outcomes)
        columns = rule_columns(rule, cells, max_nesting)
        outcomes.append((columns.matched, columns.error))
        if columns.fallback:
            fallback[len(outcomes) - 1] = columns.fallback

    frame = cells.with_tests(frame)
    message_id = F.coalesce(F.col("message_id"), F.concat(F.lit("seq:"), F.col("sequence_number").cast("string")))
    topic_of = F.lower(F.col("topic"))
    frame = frame.where(topic_of.isin(*topic_names))
    asked = questions(scopes, filters) + (health.questions(filters) if health is not None else [])
    unrouted = health.receiving(filters) if health is not None else None
    breakdown = {name: F.col(column) for name, column in BREAKDOWN.items()} if health is not None else None
    with executor_imports():
        answers = tally(
            frame, topic_of, message_id, outcomes, list(dict.fromkeys(asked)), F.col("enqueued_time"), unrouted, breakdown
        )
    report, pending = shape(answers, scopes, filters, fallback)
    if health is not None:
        report["routing_health"] = health.shape(answers, filters, _bucket(answers, pending), _span_seconds(answers))
    shown = [name for name in SCHEMA.names if name in frame.columns]
    progress.phase("finding the example messages")
    found = resolve(frame, message_id, set().union(*(hashes for _, hashes in pending)), shown)
    fill_examples(report, pending, found)
    return report


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _bucket(answers: Answers, pending: list[tuple[list[str], set[int]]]) -> Callable[..., list[str]]:
    """A function giving an example list to fill for some questions (see :func:`fill_examples`)."""

    def bucket(*asked: Question) -> list[str]:
        out: list[str] = []
        pending.append((out, answers.examples(*asked)))
        return out

    return bucket


def _span_seconds(answers: Answers) -> float | None:
    first, last = answers.time_range()
    return None if first is None or last is None or last <= first else (last - first) / 1e6


def fill_examples(
    report: dict[str, Any], pending: list[tuple[list[str], set[int]]], found: dict[int, tuple[str, dict[str, Any]]]
) -> None:
    """Put the example ids in their lists and the example messages (sample rows) in the report."""
    for target, hashes in pending:
        target[:] = sorted({found[h][0] for h in hashes if h in found})
    report["example_messages"] = {ident: _example(row) for ident, row in sorted(found.values(), key=lambda f: f[0])}


def _example(row: dict[str, Any]) -> dict[str, Any]:
    """An example message as the report shows it: its topic, body size and properties, the latter
    in the message JSON shape (``{"sys", "user"}``) that ``sbrules route --message`` reads."""
    return {"topic": row.get("topic"), "body_size": row.get("body_size"), "message": row_to_message(row).to_json()}


def questions(scopes: list[Scope], filters: dict[Filter, int]) -> list[Question]:
    """Every question :func:`shape` asks of the outcome groups, once each."""
    asked = [EVERY_MESSAGE]
    for scope in scopes:
        asked += _subscription_questions(scope, filters).values()
        for rule in scope.desired + scope.current:
            asked += _rule_questions(scope.topic, filters[rule.filter])
    for pair in _topic_questions(scopes, filters).values():
        asked += pair
    return list(dict.fromkeys(asked))


EVERY_MESSAGE = Question()


def _rule_questions(topic: str, index: int) -> tuple[Question, Question]:
    """A filter's messages of ``topic``: (matched, failed)."""
    key, bit = topic.lower(), frozenset({index})
    return Question(key, matched=bit), Question(key, failed=bit)


def _subscription_questions(scope: Scope, filters: dict[Filter, int]) -> dict[str, Question]:
    """A subscription's messages: delivered with the declared rules, delivered today, gained,
    lost, and failing a declared filter (the last three with examples)."""
    key = scope.topic.lower()
    desired = frozenset(filters[r.filter] for r in scope.desired)
    current = frozenset(filters[r.filter] for r in scope.current)
    return {
        "delivered": Question(key, matched=desired),
        "delivered_before": Question(key, matched=current),
        "gained": Question(key, matched=desired, unmatched=current, examples=True),
        "lost": Question(key, matched=current, unmatched=desired, examples=True),
        "errors": Question(key, failed=desired, examples=True),
    }


def _topic_questions(scopes: list[Scope], filters: dict[Filter, int]) -> dict[str, tuple[Question, Question]]:
    """Per topic (lower case): its messages, and those no subscription's declared rules take (with examples)."""
    taken: dict[str, set[int]] = {}
    for scope in scopes:
        taken.setdefault(scope.topic.lower(), set()).update(filters[r.filter] for r in scope.desired)
    return {key: (Question(key), Question(key, unmatched=frozenset(bits), examples=True)) for key, bits in taken.items()}


def shape(
    answers: Answers, scopes: list[Scope], filters: dict[Filter, int], fallback: dict[int, str]
) -> tuple[dict[str, Any], list[tuple[list[str], set[int]]]]:
    """The report from the answers to :func:`questions` (no Spark needed past :func:`tally`);
    example lists come back empty, paired with the id hashes that fill them (:func:`fill_examples`)."""
    pending: list[tuple[list[str], set[int]]] = []

    def bucket(*asked: Question) -> list[str]:
        out: list[str] = []
        pending.append((out, answers.examples(*asked)))
        return out

    def outcome(scope: Scope, rule: Rule) -> dict[str, int]:
        matched, failed = _rule_questions(scope.topic, filters[rule.filter])
        return {"matched": answers.total(matched), "errors": answers.total(failed)}

    subs = []
    never, python_rules = [], []
    for scope in scopes:
        asked = _subscription_questions(scope, filters)
        rules = []
        for rule in scope.desired:
            index = filters[rule.filter]
            entry = {"name": rule.name, **outcome(scope, rule), "evaluation": "python" if index in fallback else "native"}
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
                **{name: answers.total(question) for name, question in asked.items()},
                "examples": {name: bucket(asked[name]) for name in ("gained", "lost", "errors")},
                "rules": rules,
                "changes": [
                    {
                        **change.to_json(),
                        "traffic": {
                            "before": None if change.before is None else outcome(scope, change.before),
                            "after": None if change.after is None else outcome(scope, change.after),
                        },
                    }
                    for change in _changes(scope)
                ],
            }
        )
    names = {s.topic.lower(): s.topic for s in reversed(scopes)}
    per_topic = _topic_questions(scopes, filters)
    unrouted = [unrouted for _, unrouted in per_topic.values()]
    first, last = answers.time_range()
    report = {
        "messages": answers.total(EVERY_MESSAGE),
        "time_range": {"first": _iso(first), "last": _iso(last)},
        "topics": [
            {"topic": names[key], "messages": answers.total(messages), "unrouted": answers.total(unrouted_here)}
            for key, (messages, unrouted_here) in sorted(per_topic.items())
        ],
        "unrouted": sum(answers.total(question) for question in unrouted),
        "unrouted_examples": bucket(*unrouted),
        "subscriptions": subs,
        "never_matching_rules": never,
        "python_fallback_rules": python_rules,
    }
    return report, pending


def _changes(scope: Scope) -> tuple[Any, ...]:
    """The rule changes that turn the current rules into the declared ones, as the plan states them
    (computed from the same two rule sets the traffic numbers compare)."""
    try:
        plan = plan_subscription(scope.topic, scope.subscription, scope.desired, scope.current, allow_empty=True)
    except PlanError as exc:
        raise ImpactError(str(exc)) from None
    return plan.changes


def _iso(micros: int | None) -> str | None:
    """A time in µs since the epoch as ISO 8601 UTC (milliseconds), None when none is known."""
    if micros is None:
        return None
    when = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
