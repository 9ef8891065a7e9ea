"""The fall-through filter against the Python evaluator: TRUE exactly when no other rule is TRUE.

The contract (docs/analyze.md, "A fall-through subscription"): on a message where no other rule
raises an evaluation error, the generated filter is TRUE exactly when no other rule is TRUE (FALSE
and UNKNOWN both count as "not TRUE"), never UNKNOWN; it raises an error only on a message where
some other rule raises one or a property a correlation filter names has a value of another kind.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from reconciler.model import (
    CorrelationFilter,
    FalseFilter,
    Message,
    Rule,
    SqlFilter,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.sql import ast
from reconciler.sql.canonical import canonical
from reconciler.sql.evaluator import MessageView
from reconciler.sql.fallthrough import EVERYTHING, NOTHING, NotExpressible, fallthrough_filter
from reconciler.sql.routing import compiled_filter, matches
from reconciler.sql.values import from_typed, kind_of
from tests.sql import strategies

NAMES = ["a", "b", "C", "x"]
user_properties = st.builds(ast.Property, st.just("user"), st.sampled_from(NAMES))
sys_properties = st.builds(ast.Property, st.just("sys"), st.sampled_from(["Label", "To", "SequenceNumber"]))
properties = st.one_of(user_properties, sys_properties)
literals = st.one_of(
    strategies.literals,
    st.builds(ast.Literal, st.just(ValueType.LONG), st.integers(-3, 3)),
    st.builds(ast.Literal, st.just(ValueType.STRING), st.sampled_from(["", "r", "red", "3"])),
)
expressions = st.recursive(
    st.one_of(literals, properties),
    lambda children: st.builds(ast.Binary, st.sampled_from(["+", "-", "*", "/"]), children, children),
    max_leaves=3,
)
atoms = st.one_of(
    st.builds(ast.Comparison, st.sampled_from(ast.COMPARISON_OPS), expressions, expressions),
    st.builds(ast.Like, expressions, expressions, st.none(), st.booleans()),
    st.builds(ast.In, expressions, st.lists(expressions, min_size=1, max_size=3).map(tuple), st.booleans()),
    st.builds(ast.IsNull, properties, st.booleans()),
    st.builds(ast.Exists, properties),
)
predicates = st.recursive(
    atoms,
    lambda children: st.one_of(
        st.builds(ast.And, children, children), st.builds(ast.Or, children, children), st.builds(ast.Not, children)
    ),
    max_leaves=5,
)
typed_values = st.one_of(
    strategies.typed_values,
    st.sampled_from(["red", "r", "3", "", True, False, None, 3, 3.0, {"int": 3}, {"short": 3}, {"ulong": 3}]),
)
correlation_values = st.one_of(st.sampled_from(["red", "r", "3", ""]), st.booleans(), st.none())
correlations = st.builds(
    lambda to, label, props: CorrelationFilter(
        to=to, subject=label, properties=tuple((k, TypedValue.from_typed_form(v)) for k, v in props.items())
    ),
    st.none() | st.sampled_from(["q", ""]),
    st.none() | st.sampled_from(["red", "r"]),
    st.dictionaries(st.sampled_from(NAMES), correlation_values, max_size=2),
)
filters = st.one_of(
    predicates.map(lambda p: SqlFilter(canonical(p))),
    correlations,
    st.just(TrueFilter()),
    st.just(FalseFilter()),
)
rule_sets = st.lists(filters, max_size=4).map(lambda fs: [Rule(f"r{i}", f) for i, f in enumerate(fs)])
messages = st.builds(
    lambda user, sys: Message.from_json({"user": user, "sys": sys}),
    st.dictionaries(st.sampled_from(NAMES + ["d"]), typed_values, max_size=4),
    st.fixed_dictionaries({}, optional={"Label": st.sampled_from(["red", "r"]), "To": st.sampled_from(["q", ""])}),
)


def _mistyped(rules: list[Rule], message: Message) -> bool:
    """A message carrying a property a correlation filter names with a value of another kind
    (a number where the filter says 'red'): SQL's ``=`` raises an error there."""
    for rule in rules:
        if isinstance(rule.filter, CorrelationFilter):
            for name, expected in rule.filter.properties:
                actual = message.user_property(name)
                if actual is None or actual.type is ValueType.NULL or expected.type is ValueType.NULL:
                    continue
                if kind_of(from_typed(actual)) != kind_of(from_typed(expected)):
                    return True
    return False


def _parses(rules: list[Rule]) -> bool:
    for rule in rules:
        if isinstance(rule.filter, SqlFilter):
            try:
                compiled_filter(rule.filter.expression)
            except Exception:
                return False
    return True


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(rule_sets, st.lists(messages, min_size=1, max_size=6))
def test_true_exactly_when_no_other_rule_is_true(rules: list[Rule], batch: list[Message]) -> None:
    assume(_parses(rules))
    text = fallthrough_filter(rules)
    generated = compiled_filter(text)
    for message in batch:
        outcomes = [matches(rule, message) for rule in rules]
        mine = generated.outcome(MessageView.from_message(message))
        if mine.error is not None:
            assert any(o.error is not None for o in outcomes) or _mistyped(rules, message), (text, message, mine.error)
            continue
        assert mine.result is not None, (text, message)  # never UNKNOWN
        if all(o.error is None for o in outcomes):
            assert mine.result is (not any(o.matched for o in outcomes)), (text, message, outcomes)


@pytest.mark.unit
def test_unknown_counts_as_not_received() -> None:
    """A plain NOT (f1 OR f2) is UNKNOWN, and drops the message, when a property is missing."""
    rules = [Rule("a", SqlFilter("color = 'red'")), Rule("b", SqlFilter("size > 3"))]
    text = fallthrough_filter(rules)
    assert compiled_filter("NOT (color = 'red' OR size > 3)")(MessageView.from_plain(user={"size": 1})) is None
    assert compiled_filter(text)(MessageView.from_plain(user={"size": 1})) is True
    assert compiled_filter(text)(MessageView.from_plain(user={})) is True
    assert compiled_filter(text)(MessageView.from_plain(user={"size": 4})) is False


@pytest.mark.unit
def test_correlation_translates_types_exactly() -> None:
    flt = CorrelationFilter(
        to="orders",
        properties=(("region", TypedValue.from_typed_form("eu")), ("vip", TypedValue.from_typed_form(True))),
    )
    text = fallthrough_filter([Rule("c", flt)])
    assert text == "NOT (sys.To = 'orders' AND (EXISTS(region) AND region = 'eu') AND (EXISTS(vip) AND vip = TRUE))"
    null = fallthrough_filter([Rule("n", CorrelationFilter(properties=(("p", TypedValue.from_typed_form(None)),)))])
    assert compiled_filter(null)(MessageView.from_plain(user={})) is True
    assert compiled_filter(null)(MessageView.from_plain(user={"p": None})) is False


@pytest.mark.unit
@pytest.mark.parametrize("value", [3, {"int": 3}, 3.5, {"uuid": "00000000-0000-0000-0000-000000000001"}])
def test_typed_correlation_values_cannot_be_expressed(value: object) -> None:
    rule = Rule("typed", CorrelationFilter(properties=(("n", TypedValue.from_typed_form(value)),)))
    with pytest.raises(NotExpressible, match="no type test") as caught:
        fallthrough_filter([rule])
    assert caught.value.rule is rule


@pytest.mark.unit
def test_property_function_cannot_be_expressed() -> None:
    with pytest.raises(NotExpressible, match="property"):
        fallthrough_filter([Rule("dyn", SqlFilter("property(name) = 1"))])


@pytest.mark.unit
def test_true_and_false_filters() -> None:
    assert fallthrough_filter([]) == EVERYTHING
    assert fallthrough_filter([Rule("f", FalseFilter())]) == EVERYTHING
    assert fallthrough_filter([Rule("f", FalseFilter()), Rule("t", TrueFilter())]) == NOTHING
    assert fallthrough_filter([Rule("e", CorrelationFilter())]) == EVERYTHING


@pytest.mark.unit
def test_a_filter_over_the_length_limit_is_refused_not_truncated() -> None:
    rules = [Rule(f"r{i}", SqlFilter(f"region = 'r{i}'")) for i in range(40)]
    with pytest.raises(NotExpressible, match="the limit is 1024") as caught:
        fallthrough_filter(rules)
    assert caught.value.rule is None
