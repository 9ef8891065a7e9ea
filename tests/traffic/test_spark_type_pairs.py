"""Differential over generated values of every pair of natively translated property types: the
Spark translation computes the same typed value (type and .NET text) and the same outcome as the
Python evaluator for each operator, on a message per type pair whose two properties hold values
drawn for those types (edge values first).

One example is one Spark job over every pair; the filters are translated once, for properties
that hold every type (no pruning), and evaluated on each example's messages.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reconciler.model import Message, TypedValue
from reconciler.sql import SqlEvalError, ast, parse_filter, values
from reconciler.sql.evaluator import MessageView, compile_expr, compile_predicate
from reconciler.typed_values import to_float32

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted({low, low + 1, -1 if low < 0 else low, 0 if low <= 0 else low, 1, 2, 3, high - 1, high})
    return st.one_of(st.sampled_from([e for e in edges if low <= e <= high]), st.integers(low, high))


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), max_codepoint=0xFFFF), max_size=3)
_INSTANTS = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1)).map(
    lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000, tzinfo=dt.timezone.utc)
)

#: Every type the Spark translation computes natively → values drawn for it.
NATIVE = {
    "byte": _integers(-(2**7), 2**7 - 1),
    "ubyte": _integers(0, 2**8 - 1),
    "short": _integers(-(2**15), 2**15 - 1),
    "ushort": _integers(0, 2**16 - 1),
    "int": _integers(-(2**31), 2**31 - 1),
    "uint": _integers(0, 2**32 - 1),
    "long": _integers(-(2**63), 2**63 - 1),
    "ulong": _integers(0, 2**64 - 1),
    "char": st.characters(exclude_categories=("Cs",), max_codepoint=0xFFFF),
    "float": st.one_of(st.sampled_from([0.0, -0.0, 0.1, 1.5, 1e10, math.inf, math.nan]), st.floats(width=32)),
    "double": st.one_of(st.sampled_from([0.0, -0.0, 0.1, 1e15, 1e17, 2.5e-5, math.inf, math.nan]), st.floats()),
    "string": st.one_of(st.sampled_from(["", "1", "a"]), _TEXT),
    "symbol": st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=3),  # AMQP symbols are ASCII
    "bool": st.booleans(),
    "uuid": st.uuids(),
    "timestamp": _INSTANTS,
    "null": st.none(),
}
PAIRS = list(itertools.product(NATIVE, repeat=2))

EXPRESSIONS = ["a + b", "a - b", "a * b", "a / b", "a % b", "-a", "'' + (a + b)", "'' + (a * b)", "'' + (a / b)"]
PREDICATES = ["a = b", "a <> b", "a < b", "a >= b", "a IN (b, 1)", "'' + (a - b) LIKE '%1%'", "'' + a LIKE '%.%'"]


@st.composite
def pair_messages(draw) -> list[Message]:
    messages = []
    for left, right in PAIRS:
        a, b = draw(NATIVE[left]), draw(NATIVE[right])
        user = {"a": TypedValue(left, a), "b": TypedValue(right, b)}
        messages.append(Message(sys={"MessageId": TypedValue("string", f"{left}-{right}")}, user=user))
    return messages


def _expression(text: str) -> ast.Expr:
    node = parse_filter(f"{text} = 0")
    assert isinstance(node, ast.Comparison)
    return node.left


def _python_value(node: ast.Expr, view: MessageView) -> str:
    try:
        value = compile_expr(node)(view)
    except SqlEvalError:
        return "error"
    if value is values.MISSING:
        return "missing"
    typed = values.to_typed(value)
    return f"{typed.type.value} {values.to_string(value)}"


def _spark_value(cell) -> str:
    from reconciler.traffic.rows import struct_to_prop

    if cell["e"] is not None:
        return "error"
    struct = cell["v"]
    if struct["t"] == "missing":
        return "missing"
    fields = struct.asDict()
    if fields["t"] == "timespan":  # computed time spans are microseconds; the sample layout's are ticks
        fields["l"] *= 10
    typed = struct_to_prop(fields)
    return f"{typed.type.value} {values.to_string(values.from_typed(typed))}"


def _jvm_float_digits(want: str, got: str) -> bool:
    """The known approximation (docs/sql-language.md §10.3): before JDK 19 the JVM's shortest text
    of a float sometimes has one digit more than .NET's (``-2.14748365E+09`` for ``-2.1474836E+09``),
    the same binary32 value."""
    (kind, python), (spark_kind, spark) = want.split(" ", 1), got.split(" ", 1)
    if kind != spark_kind or len(spark) != len(python) + 1:
        return False
    try:
        return to_float32(float(python)) == to_float32(float(spark))
    except ValueError:
        return False


def _python_outcome(node: ast.Predicate, view: MessageView) -> str:
    try:
        result = compile_predicate(node)(view)
    except SqlEvalError:
        return "error"
    return {True: "true", False: "false", None: "unknown"}[result]


_translated: dict[str, object] = {}


def _translate(frame):
    """(frame ready for the columns, the columns), translating the filters once per session."""
    from pyspark.sql import functions as F

    from reconciler.traffic.property_types import property_types
    from reconciler.traffic.spark import PropertyCells, to_spark

    types = property_types(frame)
    assert types["a"] >= set(NATIVE) - {"null"}, "every type is in the sample: nothing is pruned"
    projected, cells = PropertyCells.over(frame, {"a", "b"}, types)
    if not _translated:
        values_ = [to_spark(_expression(text), cells) for text in EXPRESSIONS]
        outcomes = [to_spark(parse_filter(text), cells) for text in PREDICATES]
        _translated["cells"] = cells
        _translated["columns"] = [
            F.array(*(F.struct(v.alias("v"), e.alias("e")) for v, e in values_)).alias("values"),
            F.array(*(F.struct(v.alias("v"), e.alias("e")) for v, e in outcomes)).alias("outcomes"),
        ]
    return _translated["cells"].with_tests(projected), _translated["columns"]


@settings(
    max_examples=3,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure lists each differing pair
    suppress_health_check=list(HealthCheck),
)
@given(messages=pair_messages())
def test_every_type_pair_agrees_with_python_evaluator(interpreted, frame_of, messages):
    frame, columns = _translate(frame_of(messages))
    rows = frame.select("idx", *columns).collect()
    expressions = [_expression(text) for text in EXPRESSIONS]
    predicates = [parse_filter(text) for text in PREDICATES]
    mismatches = []
    for row in rows:
        message = messages[row["idx"]]
        view = MessageView.from_message(message)
        for text, node, cell in zip(EXPRESSIONS, expressions, row["values"]):
            want, got = _python_value(node, view), _spark_value(cell)
            if want != got and not _jvm_float_digits(want, got):
                mismatches.append(f"{text} on {message.to_json()['user']}: python {want!r}, spark {got!r}")
        for text, node, cell in zip(PREDICATES, predicates, row["outcomes"]):
            want = _python_outcome(node, view)
            got = "error" if cell["e"] is not None else {True: "true", False: "false", None: "unknown"}[cell["v"]]
            if want != got:
                mismatches.append(f"{text} on {message.to_json()['user']}: python {want}, spark {got}")
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:25])
