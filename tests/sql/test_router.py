"""The compiled topic router against evaluating every rule: never a different outcome."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.model import (
    NO_ACTION,
    CorrelationFilter,
    FalseFilter,
    Message,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    TypedValue,
)
from reconciler.sql import MessageView, RouteResult, route_rules
from reconciler.sql.router import TopicRouter, requirement

FIRST = [
    "sys.Label = 'a'", "sys.Label = 'b'", "color = 'a'", "COLOR = 'b'", "color IN ('a', 'b')", "sys.Label IN ('c')",
    "amount > 1", "NOT color = 'a'", "color <> 'a'", "color IN ('a', NULL)", "sys.To = 'a'", "color = 1",
]
REST = ["", " AND amount > 1", " AND color = 1", " AND amount > 'x'", " OR amount = 2", " AND sys.Label = 'b'"]
VALUES = [{"string": "a"}, {"string": "b"}, "c", {"int": 1}, {"long": 2}, {"double": 2.0}, None]

sql_filters = st.builds(lambda first, rest: SqlFilter(first + rest), st.sampled_from(FIRST), st.sampled_from(REST))
correlations = st.builds(
    lambda label, props: CorrelationFilter(subject=label, properties=tuple(props.items())),
    st.sampled_from([None, "a", "b"]),
    st.dictionaries(st.sampled_from(["color", "Color", "amount"]), st.sampled_from([TypedValue.from_typed_form(v) for v in VALUES]), max_size=2),
).filter(lambda f: not f.is_empty())
filters = st.one_of(sql_filters, sql_filters, correlations, st.just(TrueFilter()), st.just(FalseFilter()), st.just(SqlFilter("((")))
actions = st.one_of(st.none(), st.sampled_from(["SET tagged = 1", "SET color = 'z'", "SET amount = 'x'", "REMOVE color"]))
rules = st.tuples(filters, actions)
subscriptions = st.lists(st.lists(rules, min_size=0, max_size=5), min_size=1, max_size=4)
messages = st.builds(
    lambda label, user: Message.from_json({"sys": {"Label": label} if label else {}, "user": user}),
    st.sampled_from([None, "a", "b", "c"]),
    st.dictionaries(st.sampled_from(["color", "COLOR", "amount"]), st.sampled_from(VALUES)),
)


def _topic(spec: list[list[tuple[object, str | None]]]) -> list[tuple[str, list[Rule]]]:
    return [
        (f"s{i}", [Rule(f"r{j}", f, SqlRuleAction(a) if a else NO_ACTION) for j, (f, a) in enumerate(rules)])
        for i, rules in enumerate(spec)
    ]


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(subscriptions, st.lists(messages, min_size=1, max_size=4))
def test_the_router_never_changes_an_outcome(spec: list, batch: list[Message]) -> None:
    topic = _topic(spec)
    router = TopicRouter(topic)
    for message in batch:
        expected = [route_rules(rules, message) for _name, rules in topic]
        assert router.route_every_rule(message) == expected
        sparse = router.route(message)
        fast = [sparse.get(i, RouteResult(delivered=False)) for i in range(len(topic))]
        assert [(r.delivered, r.copies) for r in fast] == [(r.delivered, r.copies) for r in expected]
        assert [[n for n, o in r.rule_results if o.error] for r in fast] == [
            [n for n, o in r.rule_results if o.error] for r in expected
        ]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "key", "values"),
    [
        ("sys.Label = 'a' AND amount > 1", ("sys", "Label"), {"a"}),
        ("Color IN ('x', 'y') AND amount > 1", ("user", "color"), {"x", "y"}),
        ("(sys.Label = 'a' AND x = 1) AND y = 2", ("sys", "Label"), {"a"}),
    ],
)
def test_sql_filters_are_indexed_by_their_first_equality_conjunct(text: str, key: tuple, values: set) -> None:
    needed = requirement(Rule("r", SqlFilter(text)))
    assert needed is not None and needed.key == key and needed.values == values and not needed.strict


@pytest.mark.unit
@pytest.mark.parametrize("text", ["amount > 1 AND sys.Label = 'a'", "sys.Label = 'a' OR x = 1", "NOT sys.Label = 'a'", "x = 1"])
def test_filters_that_can_be_other_than_false_without_the_value_are_always_candidates(text: str) -> None:
    assert requirement(Rule("r", SqlFilter(text))) is None


@pytest.mark.unit
def test_only_candidates_are_evaluated() -> None:
    topic = [(f"s{i}", [Rule("r", SqlFilter(f"sys.Label = 'e{i}' AND amount > 'text'"))]) for i in range(100)]
    router = TopicRouter(topic)
    message = Message.from_json({"sys": {"Label": "e7"}, "user": {"amount": 3}})
    assert router.candidates(MessageView.from_message(message)) == {7: [0]}
    results = router.route(message)
    assert list(results) == [7]
    assert results[7].rule_results[0][1].label == "error"
    correlated = TopicRouter([("s", [Rule("r", CorrelationFilter(subject="a"))])])
    assert correlated.candidates(MessageView.from_message(Message())) == {}
