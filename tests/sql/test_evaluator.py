"""Evaluator semantics beyond the SQL vectors (docs/sql-language.md §5.2-§5.9)."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest

from reconciler.model import Message, TypedValue, ValueType
from reconciler.sql import MessageView, Outcome, SqlEvalError, compiled_filter, parse_filter
from reconciler.sql.evaluator import CompiledFilter
from reconciler.sql.values import Char, DateTimeOffset, Int32, TimeSpan, UInt64, format_double, format_single, to_string
from reconciler.typed_values import to_float32

pytestmark = pytest.mark.unit


def outcome(text: str, user: dict[str, Any] | None = None, sys: dict[str, Any] | None = None, params=None) -> Outcome:
    view = MessageView.from_plain(sys=sys, user=user)
    return CompiledFilter(parse_filter(text, params)).outcome(view)


def label(text: str, user: dict[str, Any] | None = None, sys: dict[str, Any] | None = None, params=None) -> str:
    return outcome(text, user, sys, params).label


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "1"),
        (1.5, "1.5"),
        (1e20, "1E+20"),
        # .NET Core: scientific beyond max(digits, 17) integer places (dotnet/runtime Number.Formatting.cs)
        (1e15, "1000000000000000"),
        (1e16, "10000000000000000"),
        (1e17, "1E+17"),
        (12345678901234567e3, "1.2345678901234567E+19"),
        (123456789012345.6, "123456789012345.6"),
        (0.1, "0.1"),
        (0.0001, "0.0001"),
        (0.00001, "1E-05"),
        (-2.5e-7, "-2.5E-07"),
        (0.1 + 0.2, "0.30000000000000004"),
        (-0.0, "-0"),
        (math.inf, "Infinity"),
        (math.nan, "NaN"),
        (100.0, "100"),
    ],
)
def test_double_formatting_matches_dotnet(value: float, expected: str) -> None:
    assert format_double(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.3, "0.3"), (16777217.0, "16777216"), (1e9, "1E+09"), (123456789.0, "123456790"), (1e-5, "1E-05"),
     (3.4028234663852886e38, "3.4028235E+38"), (-0.0, "-0"), (1 / 3, "0.33333334")],
)
def test_float_formatting_matches_dotnet(value: float, expected: str) -> None:
    """.NET Core float.ToString(): the shortest digits that round-trip as binary32; scientific beyond
    max(digits, 9) integer places."""
    assert format_single(to_float32(value)) == expected


def test_to_string_of_other_types() -> None:
    assert to_string(None) == ""
    assert to_string(True) == "True"
    assert to_string(Int32(-3)) == "-3"
    assert to_string(uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert to_string(TimeSpan(6_000_000_000)) == "00:10:00"
    assert to_string(TimeSpan(-(86_400 + 3600) * 10_000_000 - 5)) == "-1.01:00:00.0000005"
    assert to_string(Char(65)) == "A"
    assert to_string(Decimal("-0.00")) == "0.00" and to_string(Decimal("3.10")) == "3.10"
    assert to_string(DateTimeOffset(638397614456780000)) == "01/02/2024 03:04:05 +00:00"
    assert to_string(b"\x00") == "System.Byte[]"
    assert to_string(UInt64(2**64 - 1)) == "18446744073709551615"


@pytest.mark.parametrize(
    ("text", "user", "expected"),
    [
        ("'v' + 1.0 = 'v1'", {}, "true"),
        ("'v' + 1.5 = 'v1.5'", {}, "true"),
        ("'a' + NULL = 'a'", {}, "true"),
        ("s + 1 = 'x1'", {"s": "x"}, "true"),
        ("1 + s + TRUE = '1xTrue'", {"s": "x"}, "true"),
    ],
)
def test_string_concatenation(text: str, user: dict[str, Any], expected: str) -> None:
    assert label(text, user) == expected


@pytest.mark.parametrize(
    ("text", "user", "expected"),
    [
        ("n + 1 = 2", {"n": None}, "false"),  # null + 1 is null; null = 2 is FALSE
        ("n + n = 1", {"n": None}, "error"),  # null + null has no operator
        ("n + TRUE = 1", {"n": None}, "error"),
        ("n * 2 > 1", {"n": None}, "false"),
        ("i + i = 4", {"i": {"int": 2}}, "true"),
        ("i + i > 0", {"i": {"int": 2_000_000_000}}, "error"),  # Int32 + Int32 overflows
        ("i + 2000000000 > 0", {"i": {"int": 2_000_000_000}}, "true"),  # Int32 + Int64 is Int64
        ("-i > 0", {"i": {"int": -(2**31)}}, "error"),
        ("9223372036854775807 * 2 > 0", {}, "error"),
        ("-9223372036854775808 / -1 > 0", {}, "error"),
        ("-9223372036854775808 % -1 = 0", {}, "error"),
        ("7 % -1 = 0", {}, "true"),
        ("-7.5 % 2 = -1.5", {}, "true"),
        ("1.0 % 0 = 1", {}, "false"),  # NaN
        ("-1.0 / 0 < -1000000", {}, "true"),
        ("0.0 / 0 = 0.0 / 0", {}, "false"),
        ("9007199254740993 = 9007199254740992.0", {}, "true"),
        ("d = 1", {"d": 1.0}, "true"),
        ("x = 1", {"x": True}, "error"),
        ("x <> 'a'", {"x": None}, "true"),
        ("x < 'a'", {"x": None}, "error"),
        ("x < 1", {"x": None}, "false"),
        ("NULL < NULL", {}, "false"),
        ("+'a' = 'a'", {}, "true"),
        ("-NULL = 1", {}, "error"),
        ("'a' = 'A'", {}, "false"),
    ],
)
def test_arithmetic_and_comparison(text: str, user: dict[str, Any], expected: str) -> None:
    assert label(text, user) == expected


@pytest.mark.parametrize(
    ("text", "user", "expected"),
    [
        ("1 = 0 AND 1 / 0 = 1", {}, "false"),  # FALSE AND error: right side never evaluated
        ("1 = 1 OR 1 / 0 = 1", {}, "true"),
        ("m = 1 AND 1 / 0 = 1", {}, "error"),  # UNKNOWN AND x evaluates x
        ("m = 1 OR 1 / 0 = 1", {}, "error"),
        ("1 / 0 = 1 AND 1 = 0", {}, "error"),
        ("a = 1 AND b = 1 AND c = 1", {"a": 1, "b": 2}, "false"),
        ("a = 1 AND b = 1 AND c = 1", {"a": 1, "b": 1}, "unknown"),
        ("a = 1 AND m = 1 AND c = 0 AND 1 / 0 = 1", {"a": 1, "c": 1}, "false"),
        ("a = 0 OR m = 1 OR c = 1", {"a": 1, "c": 1}, "true"),
        ("a = 0 OR m = 1 OR c = 0", {"a": 1, "c": 1}, "unknown"),
        ("a = 0 OR b = 0 OR c = 0", {"a": 1, "b": 1, "c": 1}, "false"),
    ],
)
def test_short_circuit_and_three_valued_logic(text: str, user: dict[str, Any], expected: str) -> None:
    assert label(text, user) == expected


@pytest.mark.parametrize(
    ("text", "user", "expected"),
    [
        ("s LIKE 'a\\%' ESCAPE '\\'", {"s": "a%"}, "true"),
        ("s LIKE 'a\\%' ESCAPE '\\'", {"s": "ab"}, "false"),
        ("s LIKE 'ab!' ESCAPE '!'", {"s": "ab"}, "true"),  # trailing escape ignored
        ("s LIKE 'a%' ESCAPE 'xyz'", {"s": "abc"}, "true"),  # only the first char counts
        ("s LIKE '__'", {"s": "😀"}, "true"),  # an astral char is two UTF-16 units
        ("s LIKE 'a%'", {"s": "a\nb"}, "false"),
        ("s LIKE '%'", {"s": "a\nb"}, "false"),
        ("s LIKE '(.*)+'", {"s": "(.*)+"}, "true"),
        ("s LIKE p", {"s": "abc", "p": None}, "false"),
        ("'' LIKE NULL", {}, "true"),
        ("1.5 LIKE '1.5'", {}, "true"),
        ("s NOT LIKE 'a%'", {"s": 5}, "true"),
        ("s LIKE p ESCAPE e", {"s": "a_", "p": "a!_", "e": "!"}, "true"),
        ("s LIKE p ESCAPE e", {"s": "a_", "p": "a!_"}, "unknown"),
    ],
)
def test_like(text: str, user: dict[str, Any], expected: str) -> None:
    assert label(text, user) == expected


@pytest.mark.parametrize(
    ("text", "user", "expected"),
    [
        ("n IN (2, '1')", {"n": 2}, "true"),
        ("n IN (1.0, 3)", {"n": 1}, "true"),
        ("s IN ('a', 'b')", {"s": "A"}, "false"),
        ("s IN ('a', NULL)", {"s": None}, "true"),
        ("s NOT IN ('a', NULL)", {"s": None}, "false"),
        ("s IN ('a', 'b')", {"s": 1}, "error"),
        ("s IN ('a', x)", {"s": "b", "x": "b"}, "true"),
        ("s IN ('a', m)", {"s": "a"}, "true"),  # matched before reaching the missing item
        ("s IN ('b', m)", {"s": "a"}, "error"),
    ],
)
def test_in(text: str, user: dict[str, Any], expected: str) -> None:
    assert label(text, user) == expected


def test_system_properties_always_exist() -> None:
    assert label("sys.ReplyTo IS NULL") == "true"
    assert label("EXISTS(sys.ReplyTo)") == "true"
    assert label("sys.ReplyTo = 'x'") == "false"
    assert label("sys.ReplyTo <> 'x'") == "true"
    assert label("sys.Label = 'x'", sys={"Subject": "x"}) == "true"
    assert label("sys.SequenceNumber > 10", sys={"SequenceNumber": 11}) == "true"
    assert label("sys.Label = 1", sys={"Label": "x"}) == "error"


def test_property_function_reads_user_scope_only() -> None:
    assert label("property('sys.Label') = 'x'", {"sys.Label": "x"}, {"Label": "y"}) == "true"
    assert label("p('COLOR') = 'red'", {"color": "red"}) == "true"
    assert label("p(name) = 'red'", {"name": "color", "color": "red"}) == "true"
    assert label("p(NULL) = 1") == "error"
    assert label("p(m) = 1") == "error"


def test_newid_is_a_guid() -> None:
    assert label("newid() = newid()") == "false"
    assert label("newid() IN ('x')") == "error"
    assert label("newid() + '' LIKE '________-____-____-____-____________'") == "true"


def test_parameters_of_other_types() -> None:
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    params = {"@when": TypedValue(ValueType.TIMESTAMP, when), "@n": TypedValue(ValueType.INT, 5)}
    sys = {"EnqueuedTimeUtc": "2026-06-01T00:00:00Z"}
    assert label("sys.EnqueuedTimeUtc > @when", sys=sys, params=params) == "true"
    assert label("sys.EnqueuedTimeUtc - @when > sys.EnqueuedTimeUtc - sys.EnqueuedTimeUtc", sys=sys, params=params) == "true"
    assert label("@n + @n = 10", params=params) == "true"
    assert label("sys.EnqueuedTimeUtc = 1", sys=sys, params=params) == "error"


def test_long_string_result_is_an_error() -> None:
    text = "s + s + s + s + s = 'x'"
    assert label(text, {"s": "a" * 7000}) == "error"


def test_string_result_length_counts_utf16_code_units() -> None:
    """An emoji is two UTF-16 code units to the broker: 16,384 of them are over the limit."""
    assert label("s + '' = 'x'", {"s": "\U0001F600" * 16_383 + "a"}) == "false"
    assert label("s + '' = 'x'", {"s": "\U0001F600" * 16_384}) == "error"


def test_outcome_matched_and_labels() -> None:
    assert Outcome(True).matched and Outcome(True).label == "true"
    assert not Outcome(True, "boom").matched and Outcome(True, "boom").label == "error"
    assert Outcome(None).label == "unknown" and Outcome(False).label == "false"


def test_compiled_filter_raises_eval_error_when_called_directly() -> None:
    view = MessageView.from_message(Message())
    with pytest.raises(SqlEvalError):
        compiled_filter("1 / 0 = 1")(view)


def test_user_property_lookup_is_case_insensitive() -> None:
    message = Message(user={"Color": TypedValue(ValueType.STRING, "red")})
    assert compiled_filter("COLOR = 'red' AND EXISTS(color) AND color IS NOT NULL")(MessageView.from_message(message))
