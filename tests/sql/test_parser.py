"""Creation-time rejections: each with a specific message and a position."""

from __future__ import annotations

import pytest

from reconciler.model import TypedValue, ValueType
from reconciler.sql import SqlError, ast, parse_action, parse_filter

pytestmark = pytest.mark.unit

REJECTIONS = [
    # text, words expected in the message, line, column
    ("quantity BETWEEN 1 AND 2", "reserved word", 1, 10),
    ("x = 1 AND flag", "not a condition", 1, 11),
    ("TRUE", "not a condition", 1, 1),
    ("(x) IS NULL", "bare property", 1, 5),
    ("1 IS NULL", "bare property", 1, 3),
    ("user.in = 1", "keyword", 1, 6),
    ("sys.Foo = 1", "unknown system property", 1, 5),
    ("sys.Subject = 'x'", "sys.Label", 1, 5),
    ("foo.x = 1", "unknown scope", 1, 1),
    ("upper(x) = 'A'", "unknown function", 1, 1),
    ("newid(1) = 1", "takes 0 arguments", 1, 1),
    ("property() = 1", "takes 1 argument", 1, 1),
    ("9223372036854775808 > 0", "out of range", 1, 1),
    ("-(9223372036854775808) > 0", "out of range", 1, 2),
    ("x = 1e999", "out of range", 1, 5),
    ("x = @missing", "not supplied", 1, 5),
    ("x = 'abc", "unterminated string", 1, 5),
    ("[x = 1", "unterminated [delimited", 1, 1),
    ('"x = 1', "unterminated", 1, 1),
    ("x\u00a0= 1", "U+00A0", 1, 2),
    ("x = 1\n\fAND y = 2", "U+000C", 2, 1),
    ("x == 1", "unexpected '='", 1, 4),
    ("x = 1 AND\n  y = ", "end of text", 2, 7),
    ("a = b = c", "unexpected '='", 1, 7),
    ("x = 1; y = 2", "unexpected ';'", 1, 6),
    ("_x = 1", "cannot start with '_'", 1, 1),
    ("", "empty", 1, 1),
    ("   \n ", "empty", 1, 1),
]


@pytest.mark.parametrize(("text", "words", "line", "column"), REJECTIONS)
def test_filter_rejections(text: str, words: str, line: int, column: int) -> None:
    with pytest.raises(SqlError) as info:
        parse_filter(text)
    error = info.value
    assert words in error.message
    assert (error.line, error.column) == (line, column)
    assert str(error) == error.message


def test_length_limit() -> None:
    base = "x = '"
    exact = base + "a" * (1024 - len(base) - 1) + "'"
    assert len(exact) == 1024
    parse_filter(exact)
    with pytest.raises(SqlError) as info:
        parse_filter(exact[:-1] + "a'")
    assert "1025 characters" in info.value.message


def test_negative_literal_folding() -> None:
    tree = parse_filter("-9223372036854775808 < 0")
    assert tree.left == ast.Literal(ValueType.LONG, -(2**63))
    assert parse_filter("- -9223372036854775808 = 1").left == ast.Unary("-", ast.Literal(ValueType.LONG, -(2**63)))


def test_deep_nesting_is_rejected_not_a_crash() -> None:
    with pytest.raises(SqlError) as info:
        parse_filter("-" * 300 + "x = 1")
    assert "nested" in info.value.message


@pytest.mark.parametrize(
    "text",
    [
        "a = " + " + ".join(["1"] * 255),  # a flat chain that fills the 1,024 characters is not nesting
        "a = " + "+".join(["1"] * 510),
        "a = " + " * ".join(["b"] * 250),
        " OR ".join(["a = 1"] * 110),
        "a = " + "-(" * 250 + "b" + ")" * 250,  # 250 levels: under the limit
    ],
)
def test_long_flat_chains_are_accepted_and_evaluated(text: str) -> None:
    from reconciler.model import Message, Rule, SqlFilter
    from reconciler.sql import canonical_filter, route_rules

    assert len(text) <= 1024
    assert canonical_filter(text).startswith(text[:3])
    outcome = route_rules((Rule("r", SqlFilter(text)),), Message.from_json({"user": {"a": 1, "b": 1}}))
    assert outcome.rule_results[0][1].label in ("true", "false")


def test_nesting_not_length_is_what_is_limited() -> None:
    with pytest.raises(SqlError) as info:
        parse_filter("a = " + "-(" * 257 + "b" + ")" * 257)
    assert "nested more than 256" in info.value.message


def test_parameters_are_substituted_case_insensitively() -> None:
    tree = parse_filter("x = @Limit", {"@limit": TypedValue(ValueType.INT, 3)})
    assert tree.right == ast.Literal(ValueType.INT, 3, "limit")
    assert parse_filter("x = @a", {"A": TypedValue(ValueType.STRING, "s")}).right.value == "s"


@pytest.mark.parametrize(
    ("text", "words", "column"),
    [
        ("SET sys.SequenceNumber = 5", "read-only", 5),
        ("SET a = 1, SET b = 2", "unexpected ','", 10),
        ("SET a = 1;;", "unexpected ';'", 11),
        ("SET a = b = 1", "unexpected '='", 11),
        ("SET a = 1 AND b = 2", "keyword AND", 11),
        ("SET sys.Nope = 1", "unknown system property", 9),
    ],
)
def test_action_rejections(text: str, words: str, column: int) -> None:
    with pytest.raises(SqlError) as info:
        parse_action(text)
    assert words in info.value.message
    assert info.value.column == column


def test_action_statement_limit_points_at_the_33rd_statement() -> None:
    parse_action(" ".join(f"SET p{i} = {i};" for i in range(32)))
    text = " ".join(f"SET p{i} = {i};" for i in range(33))
    with pytest.raises(SqlError) as info:
        parse_action(text)
    assert "at most 32" in info.value.message
    assert text[info.value.column - 1 :].startswith("SET p32")


def test_remove_sys_parses() -> None:
    assert parse_action("REMOVE sys.Label") == ast.Action((ast.Remove(ast.Property("sys", "Label")),))


def test_error_render_has_caret() -> None:
    text = "color = 'a' AND size BETWEEN 1 AND 2"
    with pytest.raises(SqlError) as info:
        parse_filter(text)
    rendered = info.value.render(text)
    lines = rendered.splitlines()
    assert lines[1].strip() == text
    assert lines[2].index("^") == lines[1].index("BETWEEN")
