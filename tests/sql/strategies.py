"""Hypothesis strategies producing the ASTs the parser can produce (its normal form)."""

from __future__ import annotations

import datetime as dt

from hypothesis import strategies as st

from reconciler.model import INT64_MAX, INT64_MIN, SYSTEM_PROPERTIES, Message, ValueType
from reconciler.sql import ast
from reconciler.sql.parser import SETTABLE_SYSTEM_PROPERTIES

user_names = st.one_of(st.sampled_from(["a", "B", "c"]), st.text(max_size=6))
user_properties = st.builds(ast.Property, st.just("user"), user_names)
sys_properties = st.builds(ast.Property, st.just("sys"), st.sampled_from(sorted(SYSTEM_PROPERTIES)))
properties = st.one_of(user_properties, sys_properties)

literals = st.one_of(
    st.builds(ast.Literal, st.just(ValueType.LONG), st.integers(INT64_MIN, INT64_MAX)),
    st.builds(ast.Literal, st.just(ValueType.DOUBLE), st.floats(allow_nan=False, allow_infinity=False)),
    st.builds(ast.Literal, st.just(ValueType.STRING), st.text(max_size=6)),
    st.builds(ast.Literal, st.just(ValueType.BOOL), st.booleans()),
    st.just(ast.Literal(ValueType.NULL, None)),
)


def _unary(operand: ast.Expr) -> ast.Expr:
    """The parser folds a minus over a number literal (unless that would overflow)."""
    if isinstance(operand, ast.Literal) and operand.type in (ValueType.LONG, ValueType.DOUBLE):
        operand = ast.Literal(ValueType.LONG, INT64_MIN)
    return ast.Unary("-", operand)


def _extend_expr(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.builds(ast.Binary, st.sampled_from(ast.ADDITIVE_OPS + ast.MULTIPLICATIVE_OPS), children, children),
        st.builds(_unary, children),
        st.builds(lambda a: ast.Function("property", (a,)), children),
    )


expressions = st.recursive(
    st.one_of(literals, properties, st.just(ast.Function("newid"))), _extend_expr, max_leaves=6
)

primary_predicates = st.one_of(
    st.builds(ast.Comparison, st.sampled_from(ast.COMPARISON_OPS), expressions, expressions),
    st.builds(ast.Like, expressions, expressions, st.none() | expressions, st.booleans()),
    st.builds(ast.In, expressions, st.lists(expressions, min_size=1, max_size=3).map(tuple), st.booleans()),
    st.builds(ast.IsNull, properties, st.booleans()),
    st.builds(ast.Exists, properties),
)


def _extend_predicate(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.builds(ast.And, children, children),
        st.builds(ast.Or, children, children),
        st.builds(ast.Not, children),
    )


predicates = st.recursive(primary_predicates, _extend_predicate, max_leaves=5)

settable = st.one_of(
    user_properties, st.builds(ast.Property, st.just("sys"), st.sampled_from(sorted(SETTABLE_SYSTEM_PROPERTIES)))
)
statements = st.one_of(st.builds(ast.Set, settable, expressions), st.builds(ast.Remove, properties))
actions = st.builds(ast.Action, st.lists(statements, min_size=1, max_size=5).map(tuple))

typed_values = st.one_of(
    st.text(max_size=4),
    st.integers(INT64_MIN, INT64_MAX),
    st.builds(lambda n: {"int": n}, st.integers(-(2**31), 2**31 - 1)),
    st.floats(),
    st.booleans(),
    st.none(),
    st.uuids().map(lambda u: {"uuid": str(u)}),
    st.datetimes(timezones=st.just(dt.timezone.utc)).map(lambda d: {"timestamp": d.isoformat()}),
)
messages = st.builds(
    lambda user, sys: Message.from_json({"user": user, "sys": sys}),
    st.dictionaries(st.sampled_from(["a", "b", "C", "x"]), typed_values, max_size=4),
    st.fixed_dictionaries({}, optional={"Label": st.text(max_size=3), "SequenceNumber": st.integers(0, 2**40)}),
)
