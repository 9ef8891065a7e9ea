"""The static proofs (reconciler.sql.static) against the Python evaluator.

Three checks, each over generated filters and messages with NULL and missing properties and every
numeric type: the encoding admits the outcome the evaluator computes for a message pinned into
it (so the solver never rules out what really happens); a filter proven unsatisfiable matches no
generated message; a rule proven redundant is never the only rule of its subscription to match a
generated message. A counter-example is a failure.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.model import (
    CorrelationFilter,
    EmptyAction,
    Message,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.sql import ast
from reconciler.sql.canonical import canonical
from reconciler.sql.evaluator import MessageView
from reconciler.sql.routing import matches
from reconciler.sql.static import analyse_rules, covers, unsatisfiable
from reconciler.sql.static.encoding import Encoding
from reconciler.sql.static.tags import BINARY_FLOAT_TAGS, FINITE, INTEGER_TAGS, MINUS_INF, NAN, PLUS_INF, runtime_tag

# -- messages: the property values filters meet, of every type ------------------------------------

_INTEGERS = [0, 1, 2, -1, 3, 2**53 + 1]
_VALUES: list[tuple[ValueType, Any]] = [
    *((t, v) for t in (ValueType.BYTE, ValueType.SHORT, ValueType.INT, ValueType.LONG) for v in (0, 1, 2, -1, 3)),
    *((t, v) for t in (ValueType.UBYTE, ValueType.USHORT, ValueType.UINT, ValueType.ULONG) for v in (0, 1, 2, 3)),
    (ValueType.LONG, 2**53 + 1), (ValueType.ULONG, 2**53 + 1), (ValueType.LONG, 2**63 - 1),
    (ValueType.CHAR, "\x02"), (ValueType.CHAR, "a"),
    *((ValueType.FLOAT, v) for v in (0.0, 2.0, 2.5, math.nan, math.inf, -math.inf)),
    *((ValueType.DOUBLE, v) for v in (0.0, 2.0, 2.5, 0.5, math.nan, math.inf, -math.inf, 9007199254740992.0)),
    (ValueType.DECIMAL, Decimal("2")), (ValueType.DECIMAL, Decimal("2.50")),
    (ValueType.STRING, "a"), (ValueType.STRING, "b"), (ValueType.STRING, ""), (ValueType.SYMBOL, "a"),
    (ValueType.BOOL, True), (ValueType.BOOL, False), (ValueType.NULL, None),
    (ValueType.UUID, "00000000-0000-0000-0000-000000000001"),
]
_ABSENT = None
user_value = st.one_of(st.just(_ABSENT), st.sampled_from(_VALUES).map(lambda pair: TypedValue(*pair)))
label_value = st.sampled_from([None, "a", "b", ""])


@st.composite
def messages(draw: Any) -> Message:
    user = {name: value for name in ("a", "b") if (value := draw(user_value)) is not _ABSENT}
    label = draw(label_value)
    sys = {} if label is None else {"Label": TypedValue(ValueType.STRING, label)}
    return Message(sys=sys, user=user)


# -- filters: the fragment the solver encodes, and some it does not --------------------------------

_PROPS = [ast.Property("user", "a"), ast.Property("user", "b"), ast.Property("user", "A"), ast.Property("sys", "Label")]
_LITERALS = [
    *(ast.Literal(ValueType.LONG, v) for v in _INTEGERS),
    *(ast.Literal(ValueType.DOUBLE, v) for v in (2.0, 2.5, 0.5, 9007199254740992.0)),
    *(ast.Literal(ValueType.STRING, v) for v in ("a", "b", "")),
    ast.Literal(ValueType.BOOL, True), ast.Literal(ValueType.NULL, None),
]
props = st.sampled_from(_PROPS)
literals = st.sampled_from(_LITERALS)
ops = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])

atoms = st.one_of(
    st.builds(lambda op, p, lit: ast.Comparison(op, p, lit), ops, props, literals),
    st.builds(lambda op, p, lit: ast.Comparison(op, lit, p), ops, props, literals),
    st.builds(lambda op, a, b: ast.Comparison(op, a, b), ops, literals, literals),
    st.builds(lambda op, a, b: ast.Comparison(op, a, b), ops, props, props),
    st.builds(lambda op, p, lit: ast.Comparison(op, ast.Binary("+", p, ast.Literal(ValueType.LONG, 1)), lit), ops, props, literals),
    st.builds(lambda p, items, neg: ast.In(p, tuple(items), neg), props, st.lists(literals, min_size=1, max_size=3), st.booleans()),
    st.builds(lambda p, neg: ast.IsNull(p, neg), props, st.booleans()),
    st.builds(lambda p: ast.Exists(p), st.sampled_from(_PROPS[:3])),
    st.builds(
        lambda p, pattern, neg: ast.Like(p, ast.Literal(ValueType.STRING, pattern), None, neg),
        props, st.sampled_from(["a%", "%", "_", "a", ""]), st.booleans(),
    ),
)
predicates = st.recursive(
    atoms,
    lambda children: st.one_of(
        st.builds(ast.And, children, children), st.builds(ast.Or, children, children), st.builds(ast.Not, children)
    ),
    max_leaves=5,
)
sql_filters = predicates.map(lambda node: SqlFilter(canonical(node)))

_CORRELATION_VALUES = [TypedValue(t, v) for t, v in _VALUES if t is not ValueType.UUID]
correlation_filters = st.builds(
    lambda subject, props: CorrelationFilter(subject=subject, properties=tuple(props.items())),
    st.sampled_from([None, "a", "b"]),
    st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(_CORRELATION_VALUES), max_size=2),
).filter(lambda flt: not flt.is_empty())
filters = st.one_of(sql_filters, sql_filters, correlation_filters, st.just(TrueFilter()))


# -- pinning a message into the encoding -----------------------------------------------------------


def _pin(encoding: Encoding, view: MessageView) -> list[Any]:
    """Constraints saying the message is exactly ``view`` (for the properties the encoding read)."""
    out = []
    for (scope, name), var in encoding.variables.items():
        value = view.sys.get(name) if scope == "sys" else view.user.get(name, _MISSING)
        if value is _MISSING:
            out.append(var.has("missing"))
            continue
        tag = runtime_tag(value)
        out.append(var.has(tag))
        if tag in INTEGER_TAGS:
            out.append(var.i == int(value))
        elif tag in BINARY_FLOAT_TAGS:
            if math.isnan(value):
                out.append(var.fk == NAN)
            elif math.isinf(value):
                out.append(var.fk == (PLUS_INF if value > 0 else MINUS_INF))
            else:
                fraction = Fraction(float(value))
                out += [var.fk == FINITE, var.r == z3.RealVal(f"{fraction.numerator}/{fraction.denominator}")]
        elif tag == "decimal":
            fraction = Fraction(value)
            out.append(var.r == z3.RealVal(f"{fraction.numerator}/{fraction.denominator}"))
        elif tag == "string":
            out.append(var.s == z3.StringVal(value))
        elif tag == "bool":
            out.append(var.b == value)
    return out


_MISSING = object()


def _real_outcome(flt: Any, message: Message) -> str:
    return matches(Rule("r", flt), message).label


@pytest.mark.slow
@given(flt=filters, message=messages())
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_the_encoding_admits_what_the_evaluator_computes(flt: Any, message: Message) -> None:
    encoding = Encoding()
    outcome = encoding.filter(flt)
    real = _real_outcome(flt, message)
    term = {"true": outcome.t, "false": outcome.f, "error": outcome.e}.get(
        real, z3.Not(z3.Or(outcome.t, outcome.f, outcome.e))
    )
    solver = z3.Solver()
    solver.add(*encoding.constraints, *_pin(encoding, MessageView.from_message(message)), term)
    assert solver.check() == z3.sat, f"{flt} on {message.to_json()} is {real}, which the encoding rules out"


@pytest.mark.slow
@given(flt=filters, batch=st.lists(messages(), min_size=20, max_size=20))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_an_unsatisfiable_filter_matches_no_message(flt: Any, batch: list[Message]) -> None:
    if unsatisfiable(flt):
        for message in batch:
            assert not matches(Rule("r", flt), message).matched, f"{flt} matches {message.to_json()}"


@pytest.mark.slow
@given(
    rules=st.lists(filters, min_size=2, max_size=4),
    actions=st.lists(st.booleans(), min_size=4, max_size=4),
    batch=st.lists(messages(), min_size=20, max_size=20),
)
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_removing_every_redundant_rule_changes_no_delivery(rules: list[Any], actions: list[bool], batch: list[Message]) -> None:
    declared = [
        Rule(f"r{i}", flt, SqlRuleAction("SET x = 1") if actions[i] else EmptyAction()) for i, flt in enumerate(rules)
    ]
    findings = analyse_rules(declared)
    gone = {f.rule.name for f in findings}
    kept = [r for r in declared if r.name not in gone]
    for message in batch:
        before = {r.name for r in declared if matches(r, message).matched}
        after = {r.name for r in kept if matches(r, message).matched}
        for finding in findings:
            assert finding.rule.name not in before or finding.code == "redundant-rule", f"{finding.rule} matched {message.to_json()}"
        # Action-less matches deliver one copy: whether any remains must not change.
        plain_before = any(not r.has_action for r in declared if r.name in before)
        plain_after = any(not r.has_action for r in kept if r.name in after)
        assert plain_before == plain_after, f"{[(f.code, f.rule.name) for f in findings]} on {message.to_json()}"


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        "amount > 5 AND amount < 3",
        "x = 'a' AND x = 'b'",
        "1 + 1 = 3",
        "a IS NULL AND a = 1",
        "NOT EXISTS(a) AND a > 3",
        "sys.Label = 5",
        "sys.Label < 'a'",
        "x IN ('a', 'b') AND x = 'c'",
        "(a = 1 OR a = 2) AND a > 5",
        "x LIKE 'a%' AND NOT x LIKE 'a%'",
        "quantity * price > 3 AND NOT EXISTS(price)",
    ],
)
def test_unsatisfiable_filters_are_proven(text: str) -> None:
    assert unsatisfiable(SqlFilter(text))


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        "a = 9007199254740992.0 AND a = 9007199254740993",  # a long that rounds to the double
        "a <> a",  # NaN differs from itself
        "a = NULL",
        "a = 16777217 AND a = 16777216",  # a float: the long literal becomes 16777216f
        "a IS NULL AND NOT EXISTS(a)",
    ],
)
def test_satisfiable_filters_are_not_reported(text: str) -> None:
    assert not unsatisfiable(SqlFilter(text))


@pytest.mark.unit
def test_redundancy_is_proven_for_the_documented_shapes() -> None:
    corr = CorrelationFilter(subject="x", properties=(("a", TypedValue(ValueType.INT, 3)),))
    assert covers(SqlFilter("a = 1"), SqlFilter("a = 1 AND b > 2"))
    assert not covers(SqlFilter("a = 1 AND b > 2"), SqlFilter("a = 1"))
    assert covers(CorrelationFilter(subject="x"), corr)
    assert covers(SqlFilter("a = 3"), corr)
    assert not covers(corr, SqlFilter("a = 3"))  # a long 3 is not an int 3 to a correlation filter


@pytest.mark.unit
def test_analyse_rules_keeps_one_of_two_equal_rules_and_never_a_rule_with_an_action() -> None:
    rules = [
        Rule("first", SqlFilter("a = 1")),
        Rule("narrow", SqlFilter("a = 1 AND b > 2")),
        Rule("copy", SqlFilter("a = 1"), SqlRuleAction("SET x = 1")),
        Rule("never", SqlFilter("c > 1 AND c < 0")),
        Rule("again", SqlFilter("a = 1")),
    ]
    found = [(f.code, f.rule.name, f.covered_by.name if f.covered_by else None) for f in analyse_rules(rules)]
    assert found == [("redundant-rule", "first", "again"), ("redundant-rule", "narrow", "again"), ("unsatisfiable", "never", None)]


@pytest.mark.unit
def test_a_true_filter_makes_the_other_plain_rules_redundant_and_false_is_deliberate() -> None:
    rules = [Rule("$Default", TrueFilter()), Rule("r", SqlFilter("a = 1")), Rule("off", SqlFilter("1=0"))]
    assert [(f.code, f.rule.name) for f in analyse_rules(rules)] == [("redundant-rule", "r")]


@pytest.mark.slow
@pytest.mark.parametrize("op", ["=", "<>", "<", "<=", ">", ">="])
def test_every_value_type_against_every_literal_type(op: str) -> None:
    """Each (property type, literal type) pair and both operand orders, exhaustively: the encoding
    admits exactly what the evaluator computes, NULL and missing included."""
    for literal in _LITERALS:
        for node in (ast.Comparison(op, _PROPS[0], literal), ast.Comparison(op, literal, _PROPS[0])):
            flt = SqlFilter(canonical(node))
            encoding = Encoding()
            outcome = encoding.filter(flt)
            solver = z3.Solver()
            solver.add(*encoding.constraints)
            for pair in [*_VALUES, None]:
                message = Message(user={} if pair is None else {"a": TypedValue(*pair)})
                real = _real_outcome(flt, message)
                term = {"true": outcome.t, "false": outcome.f, "error": outcome.e}.get(
                    real, z3.Not(z3.Or(outcome.t, outcome.f, outcome.e))
                )
                solver.push()
                solver.add(*_pin(encoding, MessageView.from_message(message)), term)
                assert solver.check() == z3.sat, f"{flt.expression} on {message.to_json()} is {real}"
                solver.pop()


_ALL_MESSAGES = [Message(user={} if pair is None else {"a": TypedValue(*pair)}) for pair in [*_VALUES, None]]
conjunctions = st.lists(
    st.one_of(
        st.builds(lambda op, lit: ast.Comparison(op, _PROPS[0], lit), ops, literals),
        st.builds(lambda op, lit: ast.Comparison(op, lit, _PROPS[2]), ops, literals),
        st.builds(lambda items: ast.In(_PROPS[0], tuple(items)), st.lists(literals, min_size=1, max_size=3)),
    ),
    min_size=1,
    max_size=2,
).map(lambda atoms: SqlFilter(" AND ".join(canonical(a) for a in atoms)))
one_property = st.one_of(
    conjunctions,
    st.builds(lambda tv: CorrelationFilter(properties=(("a", tv),)), st.sampled_from(_CORRELATION_VALUES)),
)


@pytest.mark.slow
@given(cover=one_property, covered=one_property)
@settings(max_examples=1500)
def test_a_proven_cover_holds_for_every_value_of_every_type(cover: Any, covered: Any) -> None:
    """Numeric comparisons of every literal type against property values of every type: where a
    cover is proven (mostly without the solver), no value makes the covered filter alone match."""
    if covers(cover, covered):
        for message in _ALL_MESSAGES:
            if matches(Rule("b", covered), message).matched:
                assert matches(Rule("a", cover), message).matched, f"{cover} does not cover {covered}: {message.to_json()}"


@pytest.mark.unit
def test_correlation_covers_are_found_among_many_filters_on_the_same_fields() -> None:
    """The index that settles correlation pairs by their field values finds the same covers."""
    def corr(subject: str, **props: int) -> CorrelationFilter:
        return CorrelationFilter(subject=subject, properties=tuple((k, TypedValue(ValueType.INT, v)) for k, v in props.items()))

    rules = [
        Rule("narrow", corr("x", a=3)),
        *(Rule(f"other-{i}", corr(f"y{i}", a=i)) for i in range(20)),
        Rule("long-3", CorrelationFilter(subject="x", properties=(("a", TypedValue(ValueType.LONG, 3)),))),
        Rule("sql-narrow", SqlFilter("sys.Label = 'x' AND b > 1")),
        Rule("wide", CorrelationFilter(subject="x")),
    ]
    found = {f.rule.name: f.covered_by.name if f.covered_by else None for f in analyse_rules(rules)}
    assert found == {"narrow": "wide", "long-3": "wide", "sql-narrow": "wide"}
