"""What a rule change does to real traffic: one Spark job over a Parquet sample.

For every declared (managed) subscription the desired rules and the *current* rules (those a
:class:`~reconciler.plan.Plan` starts from: the declared rules it leaves alone and every change's
``before``, whether the plan was just read from the namespace or saved to a file) are compiled to
native Spark columns (:mod:`reconciler.traffic.spark`). One pass groups the messages by their filter outcomes
(:mod:`reconciler.traffic.spark.tally`); from those groups come, per subscription, the messages
delivered, gained and lost versus today and the messages whose filter evaluation fails
(dead-letter candidates); per rule, its matches and errors; and across each topic, the messages no
subscription takes. A few example messages, with their properties, come with every gained / lost /
error bucket, and every subscription lists the rule changes behind its numbers, each with the
traffic its old and new filter match. The report is an
:class:`~reconciler.traffic.report.model.ImpactReport`, which every format renders
(:mod:`reconciler.traffic.report.render`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Callable, Iterable, Mapping

from reconciler import progress
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.model import DesiredState, Filter, Rule, Subscription
from reconciler.names import key_translation, name_key
from reconciler.plan import Change, Plan
from reconciler.traffic.analysis import near_misses
from reconciler.traffic.analysis.health import BREAKDOWN, Health, Subscriber
from reconciler.traffic.report.model import (
    ChangeTraffic,
    Examples,
    ImpactReport,
    Outcome,
    RuleRef,
    RuleTraffic,
    Skipped,
    SubscriptionImpact,
    TopicTraffic,
)
from reconciler.traffic.report.parts import ExampleMessage, Naming, TimeRange, as_declared, iso, named
from reconciler.traffic.sample.footers import OutdatedSample, PropertyTypes, property_types, sample_facts
from reconciler.traffic.sample.location import for_spark
from reconciler.traffic.sample.rows import SCHEMA, row_to_message
from reconciler.traffic.spark import failures
from reconciler.traffic.spark.tally import Answers, Question, resolve, tally

__all__ = ["ImpactError", "impact_report"]


class ImpactError(SbrulesError):
    """The impact report cannot be computed (no subscription to report on, an outdated sample)."""

    code = ErrorCode.INPUT


class CurrentSource(StrEnum):
    """Where a subscription's current rules came from (the report's ``current_rules``)."""

    LIVE = "live"
    PLAN = "plan"
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
    #: The plan's changes for this subscription (what apply writes).
    changes: tuple[Change, ...] = ()

    @property
    def evaluated(self) -> tuple[Rule, ...]:
        """Every rule whose filter the report counts: the desired and current rules, and both sides
        of each planned change (a saved plan may predate the rule files' latest edit)."""
        sides = tuple(rule for c in self.changes for rule in (c.before, c.after) if rule is not None)
        return self.desired + self.current + sides


def impact_report(
    desired: DesiredState,
    plan: Plan,
    dataset: str,
    *,
    against: str,
    spark_master: str | None = None,
    declared: Naming = as_declared,
) -> ImpactReport:
    """Evaluate the declared rules and the rules before ``plan`` on the sample ``dataset``.

    ``against`` says where the plan came from ("live": just read from the namespace; else the plan
    file's path); ``declared`` gives the declared name of a topic the environment renames (the report shows those).
    """
    # Before the JVM starts: a missing or broken sample is known in milliseconds.
    messages = failures.check_sample(dataset)
    source = CurrentSource.LIVE if against == "live" else CurrentSource.PLAN
    scopes, skipped = _scopes(desired, plan, source)
    if not scopes:
        raise ImpactError("no managed subscription (with a rules: list) in the rule files to report on")
    filters = {rule.filter for scope in scopes for rule in scope.evaluated}

    def evaluate(frame: Any, types: PropertyTypes, topics: frozenset[str]) -> ImpactReport:
        nonlocal scopes
        scopes, unsampled = _sampled_topics_only(topics, scopes)
        skipped.extend(unsampled)
        sampled = {name_key(topic) for topic in topics}
        subscribers = [s for s in desired_subscribers(desired, plan) if name_key(s.topic) in sampled]
        current = {(scope.topic, scope.subscription): scope.current for scope in scopes}
        return _evaluate(
            frame, scopes, types,
            lambda found: Health(subscribers, "desired", dict(found), current, complete=plan.listed), declared,
        )

    evaluations = None if messages is None else messages * len(filters)
    report = on_sample(dataset, spark_master, evaluations, evaluate, messages=messages)
    named = tuple(replace(s, topic=declared(s.topic)) for s in skipped)
    return replace(report, dataset=str(dataset), against=against, skipped=named)


def on_sample(
    dataset: str,
    spark_master: str | None,
    evaluations: int | None,
    evaluate: Callable[[Any, PropertyTypes, frozenset[str]], ImpactReport],
    *,
    messages: int | None = None,
) -> ImpactReport:
    """``evaluate(frame, property types, topics)`` on the sample ``dataset`` (of ``messages``, when
    known) read by a Spark session sized for ``evaluations`` filter evaluations (None: unknown);
    Spark's failures become one line. Its phases are told on ``reconciler.progress``."""
    from reconciler.traffic.spark.executors import start_local_workers
    from reconciler.traffic.spark.session import spark_session

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
    """Every declared subscription as routing health sees it: its declared rules (an unmanaged one:
    the live rules a plan read, else unknown); and, from a plan, the subscriptions no file mentions:
    with the live rules the plan read, or unknown. A subscription that owns only some of its rules
    (``owns:``) receives through the foreign ones too: with the plan's foreign rules, or unknown.
    Those sbrules does not manage carry the owner sbrules.yaml's ``owners:`` names for them."""
    read = plan.bystanders if plan is not None else {}
    foreign = foreign_rules(plan)
    out = [
        Subscriber(t.name, s.name, _receiving_rules(t.name, s, read, foreign), s.sampling_tap, s.fallthrough,
                   owner=None if s.managed else desired.owners.of_subscription(t.name, s.name))
        for t, s in desired.subscriptions()
    ]
    if plan is not None:
        out += [Subscriber(t, s, plan.bystanders.get((t, s)), declared=False, owner=desired.owners.of_subscription(t, s))
                for t, s in plan.undeclared]
    return out


def _receiving_rules(
    topic: str, sub: Subscription, read: Mapping[tuple[str, str], tuple[Rule, ...]],
    foreign: Mapping[tuple[str, str], tuple[Rule, ...]],
) -> tuple[Rule, ...] | None:
    """The rules a declared subscription receives through: declared (with its foreign ones under
    ``owns:``, unknown when not read), or for an unmanaged one the live rules read (else unknown)."""
    if not sub.managed:
        return read.get((topic, sub.name))
    if sub.owns is None:
        return sub.rules
    key = (topic, sub.name)
    return (*(sub.rules or ()), *foreign[key]) if key in foreign else None


# ------------------------------------------------------------------------------------------------
# What to compare
# ------------------------------------------------------------------------------------------------


def foreign_rules(plan: Plan | None) -> dict[tuple[str, str], tuple[Rule, ...]]:
    """The live rules outside ``owns:`` of each planned subscription: they stay, before and after."""
    return {(sp.topic, sp.subscription): tuple(f.rule for f in sp.foreign) for sp in plan.subscriptions} if plan else {}


def _scopes(desired: DesiredState, plan: Plan, source: CurrentSource) -> tuple[list[Scope], list[Skipped]]:
    managed = [(t, s) for t, s in desired.subscriptions() if s.managed]
    skipped = [Skipped(t.name, s.name, "unmanaged (no rules: list)") for t, s in desired.subscriptions() if not s.managed]
    current = _rules_before(desired, plan)
    changes = {(name_key(sp.topic), name_key(sp.subscription)): sp.changes for sp in plan.subscriptions}
    foreign = foreign_rules(plan)
    scopes = []
    for topic, sub in managed:
        key = (topic.name, sub.name)
        declared = (*(sub.rules or ()), *foreign.get(key, ()))
        if key in current:
            planned = changes.get((name_key(topic.name), name_key(sub.name)), ())
            scopes.append(Scope(topic.name, sub.name, declared, current[key], source, tuple(planned)))
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
        rules += [f.rule for f in sp.foreign]
        key = (topic.name if topic else sp.topic, sub.name if sub else sp.subscription)
        out[key] = tuple(rules)
    return out


def _sample_facts(frame: Any) -> tuple[PropertyTypes, frozenset[str]]:
    """The sample's property types and topics (:func:`reconciler.traffic.sample.footers.sample_facts`)."""
    try:
        return sample_facts(frame)
    except OutdatedSample as exc:
        raise ImpactError(
            f"{exc.path} was sampled by an older sbrules, which widened property types (short to int, float to double, "
            "char to string); sample the traffic again with `sbrules sample`"
        ) from None


def _sampled_topics_only(topics: frozenset[str], scopes: list[Scope]) -> tuple[list[Scope], list[Skipped]]:
    """Keep subscriptions whose topic has sampled messages: with no traffic, "never matches" would mislead."""
    sampled = {name_key(topic) for topic in topics}
    kept = [s for s in scopes if name_key(s.topic) in sampled]
    if not kept:
        declared = ", ".join(sorted({s.topic for s in scopes}))
        raise ImpactError(f"the sample holds no messages of the declared topics ({declared}); sample them first")
    skipped = [
        Skipped(s.topic, s.subscription, "no sampled messages of this topic") for s in scopes if name_key(s.topic) not in sampled
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
    declared: Naming = as_declared,
) -> ImpactReport:
    """The report's Spark job over ``frame``; ``types`` as :func:`_sample_facts` found them (None: read
    them here). ``health_for`` makes the routing-health questions, answered by the same pass
    (the report's ``routing_health``); ``declared`` names topics as the rule files do."""
    from pyspark.sql import functions as F

    from reconciler.traffic.spark import PropertyCells, property_names, rule_columns
    from reconciler.traffic.spark.depth import CONNECT_MAX_NESTING
    from reconciler.traffic.spark.executors import executor_imports, is_connect
    from reconciler.traffic.spark.tally import OUTCOME_NESTING

    # Each property the filters name is looked up in the props map once per message, and the
    # filters are translated for the types the sample's properties actually have.
    if types is None:
        types = property_types(frame)
    health = health_for(types) if health_for is not None else None
    extra = health.filters() if health is not None else []
    names = {n for s in scopes for r in s.evaluated for n in property_names(r.filter)}
    names |= {n for flt in extra for n in property_names(flt)}
    frame, cells = PropertyCells.over(frame, names, types)

    # Over Spark Connect a filter's columns must leave room for the grouping query above them.
    max_nesting = CONNECT_MAX_NESTING - OUTCOME_NESTING if is_connect(frame.sparkSession) else None
    # One bit per distinct filter: unchanged rules cost nothing extra.
    filters: dict[Filter, int] = {}
    fallback: dict[int, str] = {}
    outcomes: list[tuple[Any, Any]] = []
    evaluated = [rule for scope in scopes for rule in scope.evaluated]
    evaluated += [Rule("routing-health", flt) for flt in extra]
    topic_names = sorted({name_key(s.topic) for s in scopes} | set(health.topics() if health is not None else ()))
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
    topic_of = F.translate(F.col("topic"), *key_translation())  # as names.name_key folds it
    frame = frame.where(topic_of.isin(*topic_names))
    asked = questions(scopes, filters) + (health.questions(filters) if health is not None else [])
    unrouted = health.receiving(filters) if health is not None else None
    breakdown = {name: F.col(column) for name, column in BREAKDOWN.items()} if health is not None else None
    with executor_imports():
        answers = tally(
            frame, topic_of, message_id, outcomes, list(dict.fromkeys(asked)), F.col("enqueued_time"), unrouted, breakdown
        )
    shown = [name for name in SCHEMA.names if name in frame.columns]
    misses = {}
    if health is not None and (never := health.never_matched(answers, filters)):
        progress.phase(f"looking for near misses of {_count(len(never), 'rule')} that matched nothing")
        misses = near_misses.find(frame, topic_of, message_id, never)
    progress.phase("finding the example messages")
    hashes = set().union(*(answers.examples(question) for question in asked if question.examples))
    hashes |= {h for found in misses.values() for miss in found for h in miss.hashes}
    examples = ExampleIds(answers, resolve(frame, message_id, hashes, shown), declared)
    report = shape(answers, scopes, filters, fallback, examples, declared, unrouted)
    section = None if health is None else health.shape(answers, filters, examples, declared, misses, examples.ids)
    return replace(report, routing_health=section, example_messages=examples.messages())


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


class ExampleIds:
    """The example ids of some questions (sorted), from the example messages found by their id
    hash (:func:`reconciler.traffic.spark.tally.resolve`); the messages of the ids it gave are the
    report's ``example_messages``."""

    def __init__(self, answers: Answers, found: dict[int, tuple[str, dict[str, Any]]], declared: Naming = as_declared):
        self._answers, self._found, self._declared = answers, found, declared
        self._shown: dict[str, dict[str, Any]] = {}

    def __call__(self, *asked: Question) -> tuple[str, ...]:
        return self.ids(self._answers.examples(*asked))

    def ids(self, hashes: Iterable[int]) -> tuple[str, ...]:
        """The ids of the example messages with these id hashes (sorted)."""
        rows = dict(self._found[h] for h in hashes if h in self._found)
        self._shown.update(rows)
        return tuple(sorted(rows))

    def messages(self) -> dict[str, ExampleMessage]:
        return {ident: self._example(row) for ident, row in sorted(self._shown.items())}

    def _example(self, row: dict[str, Any]) -> ExampleMessage:
        topic = row.get("topic")
        return ExampleMessage(None if topic is None else self._declared(topic), row.get("body_size"), row_to_message(row))


def questions(scopes: list[Scope], filters: dict[Filter, int]) -> list[Question]:
    """Every question :func:`shape` asks of the outcome groups, once each."""
    asked = [EVERY_MESSAGE]
    for scope in scopes:
        asked += _subscription_questions(scope, filters).values()
        for rule in scope.evaluated:
            asked += _rule_questions(scope.topic, filters[rule.filter])
    for pair in _topic_questions(scopes, filters).values():
        asked += pair
    return list(dict.fromkeys(asked))


EVERY_MESSAGE = Question()


def _rule_questions(topic: str, index: int) -> tuple[Question, Question]:
    """A filter's messages of ``topic``: (matched, failed)."""
    key, bit = name_key(topic), frozenset({index})
    return Question(key, matched=bit), Question(key, failed=bit)


def _subscription_questions(scope: Scope, filters: dict[Filter, int]) -> dict[str, Question]:
    """A subscription's messages: delivered with the declared rules, delivered today, gained,
    lost, and failing a declared filter (the last three with examples)."""
    key = name_key(scope.topic)
    desired = frozenset(filters[r.filter] for r in scope.desired)
    current = frozenset(filters[r.filter] for r in scope.current)
    return {
        "delivered": Question(key, matched=desired),
        "delivered_before": Question(key, matched=current),
        "gained": Question(key, matched=desired, unmatched=current, examples=True),
        "lost": Question(key, matched=current, unmatched=desired, examples=True),
        "errors": Question(key, failed=desired, examples=True),
    }


def _topic_questions(
    scopes: list[Scope], filters: dict[Filter, int], receiving: Mapping[str, frozenset[int]] | None = None
) -> dict[str, tuple[Question, Question]]:
    """Per topic (lower case) of ``scopes``: its messages, and those no subscription receives (with
    examples): the routing health's receivers (``receiving``, :meth:`Health.receiving`), so that the
    report's headline and its routing-health section count alike; without them, the scopes' declared rules."""
    taken: dict[str, frozenset[int]] = {}
    for scope in scopes:
        key = name_key(scope.topic)
        taken[key] = taken.get(key, frozenset()) | frozenset(filters[r.filter] for r in scope.desired)
    if receiving is not None:
        taken = {key: receiving.get(key, frozenset()) for key in taken}
    return {key: (Question(key), Question(key, unmatched=bits, examples=True)) for key, bits in taken.items()}


def shape(
    answers: Answers,
    scopes: list[Scope],
    filters: dict[Filter, int],
    fallback: dict[int, str],
    examples: Callable[..., tuple[str, ...]],
    declared: Naming = as_declared,
    receiving: Mapping[str, frozenset[int]] | None = None,
) -> ImpactReport:
    """The report from the answers to :func:`questions` (no Spark needed past :func:`tally`), its
    example ids from ``examples`` (an :class:`ExampleIds`), its unrouted messages those no receiver
    of ``receiving`` takes (see :func:`_topic_questions`); ``example_messages`` are left to the caller."""

    def outcome(scope: Scope, rule: Rule) -> Outcome:
        matched, failed = _rule_questions(scope.topic, filters[rule.filter])
        return Outcome(answers.total(matched), answers.total(failed))

    def traffic(scope: Scope, rule: Rule | None) -> Outcome | None:
        return None if rule is None else outcome(scope, rule)

    subs = []
    never: list[RuleRef] = []
    python_rules: list[RuleRef] = []
    for scope in scopes:
        topic, namespace_topic = named(scope.topic, declared)
        asked = _subscription_questions(scope, filters)
        rules = []
        for rule in scope.desired:
            index = filters[rule.filter]
            counted = outcome(scope, rule)
            rules.append(RuleTraffic(rule.name, counted.matched, counted.errors, python=index in fallback))
            if counted.matched == 0:
                never.append(RuleRef(topic, scope.subscription, rule.name))
            if index in fallback:
                python_rules.append(RuleRef(topic, scope.subscription, rule.name, fallback[index]))
        total = {name: answers.total(question) for name, question in asked.items()}
        subs.append(
            SubscriptionImpact(
                topic=topic,
                subscription=scope.subscription,
                current_rules=str(scope.current_source),
                delivered=total["delivered"],
                delivered_before=total["delivered_before"],
                gained=total["gained"],
                lost=total["lost"],
                errors=total["errors"],
                examples=Examples(examples(asked["gained"]), examples(asked["lost"]), examples(asked["errors"])),
                rules=tuple(rules),
                changes=tuple(
                    ChangeTraffic(change, traffic(scope, change.before), traffic(scope, change.after))
                    for change in (replace(c, topic=topic) for c in scope.changes)
                ),
                namespace_topic=namespace_topic,
            )
        )
    names = {name_key(s.topic): s.topic for s in reversed(scopes)}
    per_topic = _topic_questions(scopes, filters, receiving)
    unrouted = [unrouted for _, unrouted in per_topic.values()]
    first, last = answers.time_range()
    return ImpactReport(
        messages=answers.total(EVERY_MESSAGE),
        time_range=TimeRange(iso(first), iso(last)),
        topics=tuple(
            _topic_traffic(names[key], declared, answers.total(messages), answers.total(unrouted_here))
            for key, (messages, unrouted_here) in sorted(per_topic.items())
        ),
        unrouted=sum(answers.total(question) for question in unrouted),
        unrouted_examples=examples(*unrouted),
        subscriptions=tuple(subs),
        never_matching_rules=tuple(never),
        python_fallback_rules=tuple(python_rules),
        example_messages={},
    )


def _topic_traffic(topic: str, declared: Naming, messages: int, unrouted: int) -> TopicTraffic:
    name, namespace_topic = named(topic, declared)
    return TopicTraffic(name, messages, unrouted, namespace_topic)
