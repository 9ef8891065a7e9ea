"""Hypothesis properties: the parser only ever raises SqlError, and canonical print round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lark import Lark
from lark.exceptions import UnexpectedInput

import reconciler.sql as sql_package
from reconciler.limits import SQL_TEXT
from reconciler.sql import SqlError, SqlEvalError, canonical, parse_action, parse_filter
from reconciler.sql.actions import CompiledAction
from reconciler.sql.evaluator import CompiledFilter, MessageView
from reconciler.sql.parser import parse_filter_uncached

from .strategies import actions, messages, predicates

pytestmark = pytest.mark.slow

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOKENS = [
    "AND", "or", "Not", "EXISTS", "like", "ESCAPE", "in", "IS", "NULL", "TRUE", "false", "SET", "remove",
    "between", "BEGIN", "x", "Color", "sys", "user", "Label", "sys.Label", "sys.Foo", "foo", "newid", "p",
    "property", "upper", "[a b]", "[x]]y]", '"q"', "'s'", "'it''s'", "'", "[", '"', "@p", "@", "1", "0",
    "1.5", "1e3", "9223372036854775808", "9223372036854775807", "-", "+", "*", "/", "%", "=", "<>", "!=",
    "<", "<=", ">", ">=", "(", ")", ",", ".", ";", "!", "~", "\u00a0", "\n", "\t", "_", "1e", ".5", "ÄÖü",
]


def _raises_only_sql_error(text: str, parse) -> None:
    try:
        parse(text)
    except SqlError as exc:
        assert exc.line >= 1 and exc.column >= 1
        assert isinstance(exc.message, str) and exc.message


@SETTINGS
@given(st.binary(max_size=80))
def test_random_bytes_raise_only_sql_error(data: bytes) -> None:
    text = data.decode("latin-1")
    _raises_only_sql_error(text, parse_filter_uncached)
    _raises_only_sql_error(text, parse_action)


@SETTINGS
@given(st.text(max_size=60))
def test_random_text_raises_only_sql_error(text: str) -> None:
    _raises_only_sql_error(text, parse_filter_uncached)
    _raises_only_sql_error(text, parse_action)


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), max_size=14), st.sampled_from([" ", ""]))
def test_token_soup_raises_only_sql_error(tokens: list[str], separator: str) -> None:
    text = separator.join(tokens)
    _raises_only_sql_error(text, parse_filter_uncached)
    _raises_only_sql_error(text, parse_action)


@SETTINGS
@given(predicates)
def test_generated_filters_round_trip(tree) -> None:
    text = canonical(tree)
    assume(len(text) <= SQL_TEXT.value)
    parsed = parse_filter(text)
    assert parsed == tree
    assert canonical(parsed) == text


@SETTINGS
@given(actions)
def test_generated_actions_round_trip(tree) -> None:
    text = canonical(tree)
    assume(len(text) <= SQL_TEXT.value)
    parsed = parse_action(text)
    assert parsed == tree
    assert canonical(parsed) == text


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14))
def test_canonical_of_any_accepted_text_is_a_fixed_point(tokens: list[str]) -> None:
    text = " ".join(tokens)
    try:
        tree = parse_filter(text)
    except SqlError:
        return
    printed = canonical(tree)
    assert parse_filter(printed) == tree
    assert canonical(parse_filter(printed)) == printed


@SETTINGS
@given(predicates, messages)
def test_evaluation_returns_an_outcome_for_any_filter_and_message(tree, message) -> None:
    outcome = CompiledFilter(tree).outcome(MessageView.from_message(message))
    assert outcome.result in (True, False, None)
    assert outcome.error is None or outcome.result is None


@SETTINGS
@given(actions, messages)
def test_actions_raise_only_sql_eval_error(tree, message) -> None:
    try:
        result = CompiledAction(tree).apply(message)
    except SqlEvalError:
        return
    assert result.body == message.body


_REFERENCE = Lark(
    (Path(sql_package.__file__).with_name("grammar.lark")).read_text(encoding="utf-8"),
    parser="lalr",
    lexer="basic",
    start=["filter", "action"],
)


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=12), st.sampled_from(["filter", "action"]))
def test_fast_driver_accepts_only_what_lark_accepts(tokens: list[str], start: str) -> None:
    """The scanner/driver runs lark's table by hand; lark's own parser is the reference."""
    text = " ".join(tokens)
    try:
        _REFERENCE.parse(text, start=start)
        reference_ok = True
    except UnexpectedInput:
        reference_ok = False
    try:
        (parse_filter_uncached if start == "filter" else parse_action)(text)
        ours_ok = True
    except SqlError:
        ours_ok = False
    assert reference_ok or not ours_ok
