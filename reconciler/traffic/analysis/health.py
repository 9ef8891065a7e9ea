"""Routing health: what is wrong with a topic's routing, not only what a change does.

Per topic of a traffic sample: the messages no subscription receives (with the largest groups by
``sys.Label`` and ``sys.To``, so their producer can be found), what the rules cost in throttling
credits, how close the topic is to its filter quotas, and findings about single rules. The
traffic numbers are questions asked of the impact report's one pass over the sample
(:mod:`reconciler.traffic.analysis.impact`, :mod:`reconciler.traffic.spark.tally`); the static findings come
from :mod:`reconciler.sql.static`. Finding codes (docs/analyze.md):

- ``never-matched``: a rule no sampled message matched;
- ``redundant-rule``: removing the rule changes nothing its subscription receives (proven
  statically, or observed on the sample: the finding's evidence says which);
- ``unsatisfiable``: a filter no message can match (proven statically);
- ``correlation-candidate``: a SQL filter that can be a cheaper correlation filter (the suggested
  rule is verified to match exactly the same sampled messages);
- ``costly-like``: a LIKE pattern that starts with ``%``, or several OR'ed LIKEs on one property.

A subscription marked ``sampling_tap`` receives everything, and a ``fallthrough`` one receives
exactly what no other does, so neither counts as receiving; a
subscription whose rules are unknown (not managed by the files, in an offline analysis) is named
in its topic's ``unknown_subscriptions``: the unrouted count is then an upper bound. A subscription
the files do not name (found in the namespace) is always named, with what it receives when its
live rules are known. Credits are exact only when every filter on the topic is known: every
subscription's rules, and the list of subscriptions itself (``complete``: read from the namespace
with discovery); otherwise they are a lower bound.

Rates are per topic, over the topic's own enqueued span; a span under ``MEASURABLE_SECONDS`` is a
burst, whose rate the sample cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from reconciler.limits import CORRELATION_FILTERS_PER_TOPIC, SQL_FILTERS_PER_TOPIC, counts_as_sql_filter
from reconciler.model import (
    SYSTEM_PROPERTY,
    CorrelationFilter,
    Filter,
    Rule,
    TypedValue,
    ValueType,
    rule_to_doc,
)
from reconciler.names import name_key, same_name
from reconciler.namespace.credits import FILTER_EVALUATION_CREDITS, MESSAGE_CREDITS, STANDARD_CREDITS_PER_SECOND
from reconciler.sql import ast, values
from reconciler.sql.canonical import literal_text
from reconciler.sql.errors import SqlEvalError
from reconciler.sql.static import analyse_rules, is_plain_false
from reconciler.traffic.analysis.near_misses import Equality, Key, NearMiss, equalities, sql_equalities, sql_tree
from reconciler.traffic.report.parts import Naming, TimeRange, as_declared, iso, named
from reconciler.traffic.report.routing import (
    Bystander,
    Credits,
    Finding,
    Group,
    Quota,
    RoutingHealth,
    TopicHealth,
    Unrouted,
)
from reconciler.traffic.spark.tally import Answers, Question

CODES = ("never-matched", "redundant-rule", "unsatisfiable", "correlation-candidate", "costly-like")
#: The system properties unrouted messages are grouped by (their sample columns).
BREAKDOWN = {"label": "subject", "to": "to"}
#: Largest groups of unrouted messages shown per breakdown.
TOP_GROUPS = 5
#: The shortest enqueued span a rate is measured over: a sample published in a burst has no rate.
MEASURABLE_SECONDS = 60.0


@dataclass(frozen=True)
class Subscriber:
    """One subscription of an analysed topic: its rules (None: unknown to this analysis)."""

    topic: str
    subscription: str
    rules: tuple[Rule, ...] | None
    sampling_tap: bool = False
    #: the fall-through subscription receives exactly the unrouted messages: counting it would
    #: leave nothing unrouted
    fallthrough: bool = False
    #: False for a subscription of the topic that the rule files do not name (found in the namespace)
    declared: bool = True
    #: who owns it, where sbrules.yaml's ``owners:`` names one (an undeclared or unmanaged subscription)
    owner: str | None = None

    @property
    def receives(self) -> bool:
        """Whether its deliveries count: a known rule set, neither the sampling tap nor the fall-through."""
        return self.rules is not None and not self.sampling_tap and not self.fallthrough


@dataclass(frozen=True)
class Candidate:
    """A correlation filter that may replace a SQL filter, or why none can."""

    subscriber: Subscriber
    rule: Rule
    suggested: CorrelationFilter | None
    reason: str | None = None


class Health:
    """The routing-health questions of a set of subscriptions, and the section built from the answers."""

    def __init__(
        self, subscribers: Sequence[Subscriber], source: str, types: dict[str, frozenset[str]],
        current: Mapping[tuple[str, str], Sequence[Rule]] | None = None, *, complete: bool = False,
    ):
        """``current``: in a plan's impact report, the rules the planned subscriptions have now, by
        (topic, subscription), so that credits say what a message costs before the change too;
        ``complete``: ``subscribers`` are every subscription of their topics (read from the
        namespace, discovery included), not only those the files name."""
        self.subscribers = list(subscribers)
        self.source = source
        self.current = current
        self.complete = complete
        self.candidates = [c for s in self.subscribers for c in _candidates(s, types)]

    # -- what the pass evaluates and asks ------------------------------------------------------------

    def filters(self) -> list[Filter]:
        """Filters to evaluate besides the report's own: every known rule and every suggestion."""
        out = [rule.filter for s in self.subscribers for rule in s.rules or ()]
        out += [c.suggested for c in self.candidates if c.suggested is not None]
        return out

    def topics(self) -> list[str]:
        return sorted({name_key(s.topic) for s in self.subscribers})

    def receiving(self, filters: dict[Filter, int]) -> dict[str, frozenset[int]]:
        """Per topic (lower case): the filters whose match delivers a message to a receiver."""
        out: dict[str, set[int]] = {key: set() for key in self.topics()}
        for s in self.subscribers:
            if s.receives:
                out[name_key(s.topic)].update(filters[r.filter] for r in s.rules or ())
        return {key: frozenset(bits) for key, bits in out.items()}

    def questions(self, filters: dict[Filter, int]) -> list[Question]:
        asked: list[Question] = []
        for key, bits in self.receiving(filters).items():
            asked += [Question(key), Question(key, unmatched=bits, examples=True)]
        for s in self.subscribers:
            if not s.declared and s.rules is not None:
                asked.append(self._receives(s, filters))
            for rule in s.rules or ():
                asked.append(self._matched(s, rule, filters))
                alone = self._alone(s, rule, filters)
                if alone is not None:
                    asked.append(alone)
        for c in self.candidates:
            if c.suggested is not None:
                asked += self._verification(c, filters)
        return asked

    @staticmethod
    def _receives(s: Subscriber, filters: dict[Filter, int]) -> Question:
        """The messages a subscription with known rules receives."""
        return Question(name_key(s.topic), matched=frozenset(filters[r.filter] for r in s.rules or ()))

    @staticmethod
    def _matched(s: Subscriber, rule: Rule, filters: dict[Filter, int]) -> Question:
        """The messages the rule matches; with example ids where the sample may show it redundant
        (an action-less rule after another), so that the finding can name some."""
        rules = list(s.rules or ())
        may_be_redundant = not rule.has_action and any(not r.has_action for r in rules[: rules.index(rule)])
        return Question(name_key(s.topic), matched=frozenset({filters[rule.filter]}), examples=may_be_redundant)

    @staticmethod
    def _alone(s: Subscriber, rule: Rule, filters: dict[Filter, int]) -> Question | None:
        """Messages this action-less rule delivers and no earlier action-less rule of the subscription
        does (None for a rule with an action, or the first). Comparing with earlier rules only, the
        rules it finds redundant can all be removed together: each one's messages stay with an
        earlier rule, and the first is never among them."""
        if rule.has_action:
            return None
        rules = list(s.rules or ())
        earlier = frozenset(filters[r.filter] for r in rules[: rules.index(rule)] if not r.has_action)
        if not earlier:
            return None
        return Question(name_key(s.topic), matched=frozenset({filters[rule.filter]}), unmatched=earlier)

    @staticmethod
    def _verification(c: Candidate, filters: dict[Filter, int]) -> list[Question]:
        sql, suggested = filters[c.rule.filter], filters[c.suggested]  # type: ignore[index]
        key = name_key(c.subscriber.topic)
        return [
            Question(key, matched=frozenset({sql}), unmatched=frozenset({suggested}), examples=True),
            Question(key, matched=frozenset({suggested}), unmatched=frozenset({sql}), examples=True),
        ]

    def never_matched(self, answers: Answers, filters: dict[Filter, int]) -> dict[Key, list[Equality]]:
        """The rules no sampled message of their topic matched, by (topic key, subscription, rule),
        with the equalities whose near misses to look for (:mod:`reconciler.traffic.analysis.near_misses`)."""
        out: dict[Key, list[Equality]] = {}
        for s in self.subscribers:
            for rule in s.rules or ():
                found = equalities(rule)
                if found and not answers.total(self._matched(s, rule, filters)):
                    out[(name_key(s.topic), s.subscription, rule.name)] = found
        return out

    # -- the section -----------------------------------------------------------------------------

    def shape(
        self,
        answers: Answers,
        filters: dict[Filter, int],
        examples: Callable[..., tuple[str, ...]],
        declared: Naming = as_declared,
        misses: Mapping[Key, Sequence[NearMiss]] | None = None,
        ids: Callable[[Sequence[int]], tuple[str, ...]] = lambda hashes: (),
    ) -> RoutingHealth:
        """The routing-health section, its example ids from ``examples`` (and of near misses from
        ``ids``, given their id hashes), its topics named by ``declared`` (see
        :func:`reconciler.traffic.analysis.impact.shape`); ``misses``: the never-matched rules' near misses."""
        total = answers.total(Question())
        receiving = self.receiving(filters)
        names = {name_key(s.topic): s.topic for s in reversed(self.subscribers)}
        topics = []
        for key in self.topics():
            messages = answers.total(Question(key))
            unrouted_question = Question(key, unmatched=receiving[key], examples=True)
            unrouted = answers.total(unrouted_question)
            here = [s for s in self.subscribers if name_key(s.topic) == key]
            name, namespace_topic = named(names[key], declared)
            time_range = answers.time_range(key)
            topics.append(
                TopicHealth(
                    topic=name,
                    messages=messages,
                    time_range=TimeRange(iso(time_range[0]), iso(time_range[1])),
                    unrouted=Unrouted(
                        unrouted,
                        _share(unrouted, messages),
                        examples(unrouted_question) if unrouted else (),
                        {kind: _top(answers, kind, key) for kind in BREAKDOWN},
                    ),
                    not_receiving=tuple(
                        (s.subscription, "sampling tap" if s.sampling_tap else "fall-through")
                        for s in here
                        if s.sampling_tap or s.fallthrough
                    ),
                    unknown_subscriptions=tuple(s.subscription for s in here if s.rules is None),
                    undeclared=tuple(
                        Bystander(
                            s.subscription, None if s.rules is None else answers.total(self._receives(s, filters)), s.owner
                        )
                        for s in here
                        if not s.declared
                    ),
                    credits=_credits(here, messages, span_of(*time_range), self._filters_before(here), self.complete),
                    quota=_quota(here),
                    namespace_topic=namespace_topic,
                )
            )
        findings = self._findings(answers, filters, examples, declared, misses or {}, ids)
        return RoutingHealth(self.source, total, tuple(topics), tuple(findings))

    def _filters_before(self, here: list[Subscriber]) -> int | None:
        """The filters on the topic before the plan: the planned subscriptions' current rules, the
        others' as they are (None outside a plan's report)."""
        if self.current is None:
            return None
        return sum(len(self.current.get((s.topic, s.subscription), s.rules or ())) for s in here)

    def _findings(
        self, answers: Answers, filters: dict[Filter, int], examples: Callable[..., tuple[str, ...]], declared: Naming,
        misses: Mapping[Key, Sequence[NearMiss]], ids: Callable[[Sequence[int]], tuple[str, ...]],
    ) -> list[Finding]:
        out: list[Finding] = []
        for s in self.subscribers:
            key = name_key(s.topic)
            total, span_seconds = answers.total(Question(key)), span_of(*answers.time_range(key))
            span = "an unknown time span" if span_seconds is None else f"{span_seconds:,.0f} s"
            rules = s.rules or ()
            static = {id(f.rule): f for f in analyse_rules(rules)}
            for rule in rules:
                where = {"topic": declared(s.topic), "subscription": s.subscription, "rule": rule.name}
                matched_question = self._matched(s, rule, filters)
                matched = answers.total(matched_question)
                found = static.get(id(rule))
                if found is not None and found.code == "unsatisfiable":
                    out.append(_finding("unsatisfiable", "warning", where, "no message can match this filter (proven, "
                                        "NULL and missing properties included): the rule delivers nothing",
                                        {"kind": "static"}))
                elif matched == 0 and not is_plain_false(rule.filter):
                    near = misses.get((key, s.subscription, rule.name), ())
                    shown = [(miss, ids(miss.hashes)) for miss in near]
                    causes = "; ".join(f"{m.describe()} (e.g. {', '.join(e)})" if e else m.describe() for m, e in shown)
                    out.append(_finding("never-matched", "warning", where, f"matched none of the {total:,} sampled "
                                        f"messages of {declared(s.topic)} ({span} of traffic)"
                                        + (f"; near misses: {causes}" if causes else ""),
                                        {"kind": "traffic", "sample_messages": total, "sample_seconds": span_seconds,
                                         "near_misses": [m.to_json(e) for m, e in shown]}))
                if found is not None and found.code == "redundant-rule":
                    assert found.covered_by is not None
                    out.append(_finding("redundant-rule", "warning", where, f"rule {found.covered_by.name!r} delivers "
                                        "every message this rule matches (proven): removing it changes nothing",
                                        {"kind": "static", "covered_by": found.covered_by.name}))
                elif found is None and matched:
                    alone = self._alone(s, rule, filters)
                    if alone is not None and answers.total(alone) == 0:
                        out.append(_finding("redundant-rule", "info", where, f"every one of the {matched:,} sampled "
                                            "messages it matched an earlier rule of the subscription matched too (seen "
                                            "on the sample, not proven)",
                                            {"kind": "traffic", "matched": matched,
                                             "examples": list(examples(matched_question))}))
                out += _costly_like(where, rule)
        for c in self.candidates:
            where = {"topic": declared(c.subscriber.topic), "subscription": c.subscriber.subscription, "rule": c.rule.name}
            if c.suggested is None:
                out.append(_finding("correlation-candidate", "info", where, f"could be a correlation filter, but {c.reason}",
                                    {"kind": "traffic", "suggested": None}))
                continue
            only_sql, only_suggested = self._verification(c, filters)
            differ = answers.total(only_sql) + answers.total(only_suggested)
            suggested = rule_to_doc(Rule(c.rule.name, c.suggested), explicit_types=True)
            seen = answers.total(self._matched(c.subscriber, c.rule, filters))
            if not differ and not seen:
                message = ("can be the cheaper correlation filter suggested here; not verified: the rule matched none "
                           "of the sampled messages, so the sample cannot show that both match the same ones")
                evidence = {"kind": "traffic", "suggested": suggested, "verified": False, "examples": []}
            elif differ:
                message = (f"the correlation filter its equalities spell matches {differ:,} sampled messages differently "
                           "(correlation filters compare types strictly): not suggested")
                evidence = {"kind": "traffic", "suggested": suggested, "verified": False,
                            "examples": list(examples(only_sql, only_suggested))}
            else:
                message = ("can be the cheaper correlation filter suggested here, which matches exactly the same "
                           "sampled messages")
                evidence = {"kind": "traffic", "suggested": suggested, "verified": True, "examples": []}
            out.append(_finding("correlation-candidate", "info", where, message, evidence))
        # Every finding seen on the sample cites its own topic's sample: its size and enqueued span.
        keys = {declared(s.topic): name_key(s.topic) for s in self.subscribers}
        sampled = {
            name: {"sample_messages": answers.total(Question(key)), "sample_seconds": span_of(*answers.time_range(key))}
            for name, key in keys.items()
        }
        out = [replace(f, evidence={**f.evidence, **sampled[f.topic]}) if f.evidence.get("kind") == "traffic" else f
               for f in out]
        order = {code: i for i, code in enumerate(CODES)}
        return sorted(out, key=lambda f: (name_key(f.topic), f.subscription or "", f.rule or "", order[f.code]))


def _finding(code: str, severity: str, where: dict[str, Any], message: str, evidence: dict[str, Any]) -> Finding:
    return Finding(code, severity, where["topic"], where["subscription"], where["rule"], message, evidence)


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _top(answers: Answers, name: str, topic: str) -> tuple[Group, ...]:
    counts = [(value, count) for (kind, t, value), count in answers.breakdown.items() if kind == name and t == topic]
    counts.sort(key=lambda vc: (-vc[1], vc[0]))
    return tuple(Group(value, count) for value, count in counts[:TOP_GROUPS])


def _credits(
    here: list[Subscriber], messages: int, span_seconds: float | None, before: int | None = None, complete: bool = False
) -> Credits:
    """Credits a sent message costs on a Standard namespace: the send plus one per filter evaluated
    (``before``: the filters before a plan's change); exact when every filter on the topic is known
    (``complete``: ``here`` is every subscription of the topic). The rate is over the topic's own
    enqueued span (``span_seconds``), none for a burst (a span under ``MEASURABLE_SECONDS``)."""
    filters = sum(len(s.rules or ()) for s in here)
    per_message = MESSAGE_CREDITS + FILTER_EVALUATION_CREDITS * filters
    burst = span_seconds is not None and span_seconds < MEASURABLE_SECONDS
    rate = None if not span_seconds or burst else messages / span_seconds * per_message
    return Credits(
        per_message=per_message,
        filters=filters,
        exact=complete and all(s.rules is not None for s in here),
        estimated_per_second=None if rate is None else round(rate, 2),
        share_of_namespace=None if rate is None else round(rate / STANDARD_CREDITS_PER_SECOND, 4),
        filters_before=before,
        span_seconds=span_seconds,
        burst=burst,
    )


def span_of(first: int | None, last: int | None) -> float | None:
    """Seconds from ``first`` to ``last`` (µs since the epoch); None when unknown."""
    return None if first is None or last is None else (last - first) / 1e6


def _quota(here: list[Subscriber]) -> Quota:
    rules = [r for s in here for r in s.rules or ()]
    sql = sum(1 for r in rules if counts_as_sql_filter(r.filter))
    return Quota(sql, SQL_FILTERS_PER_TOPIC.value, len(rules) - sql, CORRELATION_FILTERS_PER_TOPIC.value)


# ------------------------------------------------------------------------------------------------
# Static shapes: costly LIKEs and correlation candidates
# ------------------------------------------------------------------------------------------------


def _costly_like(where: dict[str, Any], rule: Rule) -> list[Finding]:
    tree = sql_tree(rule)
    if tree is None:
        return []
    out = []
    leading = sorted({_pattern(n) for n in _nodes(tree) if isinstance(n, ast.Like) and _pattern(n).startswith("%")})
    if leading:
        out.append(_finding("costly-like", "info", where, f"LIKE {', '.join(repr(p) for p in leading)} starts with %: "
                            "every message's whole value is scanned", {"kind": "static", "patterns": leading}))
    for prop, count in _ored_likes(tree).items():
        if count > 1:
            out.append(_finding("costly-like", "info", where, f"{count} OR'ed LIKEs on {prop}: each is evaluated for "
                                "every message; an IN list or a correlation filter is cheaper where exact values do",
                                {"kind": "static", "property": prop, "likes": count}))
    return out


def _pattern(node: ast.Like) -> str:
    return values.to_string(values.from_typed(TypedValue(node.pattern.type, node.pattern.value))) if isinstance(
        node.pattern, ast.Literal) else ""


def _nodes(tree: ast.Node) -> Iterable[ast.Node]:
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(ast.children(node))


def _ored_likes(tree: ast.Predicate) -> dict[str, int]:
    """Per property: the LIKEs in the largest OR chain over it."""
    counts: dict[str, int] = {}
    for node in _nodes(tree):
        if not isinstance(node, ast.Or):
            continue
        chain: list[ast.Predicate] = []
        stack: list[ast.Predicate] = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, ast.Or):
                stack += [current.left, current.right]
            else:
                chain.append(current)
        per: dict[str, int] = {}
        for item in chain:
            if isinstance(item, ast.Like) and not item.negated and isinstance(item.value, ast.Property):
                name = f"{item.value.scope}.{item.value.name}" if item.value.scope == "sys" else item.value.name
                per[name] = per.get(name, 0) + 1
        for name, count in per.items():
            counts[name] = max(counts.get(name, 0), count)
    return counts


def _candidates(s: Subscriber, types: dict[str, frozenset[str]]) -> Iterable[Candidate]:
    for rule in s.rules or ():
        if rule.has_action:
            continue
        tree = sql_tree(rule)
        equalities = sql_equalities(tree) if tree is not None else None
        if not equalities:
            continue
        fields: dict[str, str] = {}
        properties: list[tuple[str, TypedValue]] = []
        reason = None
        for prop, literal in equalities:
            if prop.scope == "sys":
                field = SYSTEM_PROPERTY[prop.name].correlation if prop.name in SYSTEM_PROPERTY else None
                if field is None or literal.type is not ValueType.STRING or field in fields:
                    reason = f"sys.{prop.name} = {literal_text(literal)} has no correlation field"
                    break
                fields[field] = literal.value
                continue
            if any(same_name(name, prop.name) for name, _ in properties):
                reason = (f"it compares {prop.name} twice; a correlation filter holds one value per property "
                          "(and two different values match nothing)")
                break
            found = sorted(types.get(name_key(prop.name), frozenset()))
            typed = _typed(literal, found)
            if typed is None:
                shown = ", ".join(found) or "no"
                reason = (f"{prop.name} has {shown} values in the sample; correlation filters compare one type "
                          f"strictly, so no typed value of {literal_text(literal)} matches the same messages")
                break
            properties.append((prop.name, typed))
        if reason is not None:
            yield Candidate(s, rule, None, reason)
        else:
            yield Candidate(s, rule, CorrelationFilter(**fields, properties=tuple(properties)))


_NUMERIC = {"byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong", "float", "double", "decimal"}


def _typed(literal: ast.Literal, types: list[str]) -> TypedValue | None:
    """The literal as a value of the property's one sampled type, when the SQL equality and the
    correlation field then match the same values of that type (None otherwise)."""
    if len(types) == 1:
        (tag,) = types
    elif set(types) == {"string", "symbol"}:
        tag = "string"
    else:
        return None
    if literal.type is ValueType.STRING and tag in ("string", "symbol"):
        return TypedValue(ValueType.STRING, literal.value)
    if literal.type is ValueType.BOOL and tag == "bool":
        return TypedValue(ValueType.BOOL, literal.value)
    if literal.type in (ValueType.LONG, ValueType.DOUBLE) and tag in _NUMERIC:
        number = literal.value
        if tag in ("float", "double", "decimal") or float(number).is_integer():
            try:
                value = number if tag != "decimal" else str(number)
                typed = TypedValue.from_typed_form({tag: value if tag in ("float", "double", "decimal") else int(number)})
            except (ValueError, TypeError):
                return None
            try:
                same = values.equals(values.from_typed(typed), values.from_typed(TypedValue(literal.type, literal.value)))
            except SqlEvalError:  # SQL cannot compare the two (ulong and long): the filter errs on every such message
                return None
            return typed if same else None
    return None
