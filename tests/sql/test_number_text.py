""".NET number text read off Python's shortest repr: the fast path and the general layout agree, and
the digits and exponent match what ``decimal`` reads from the same text."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.sql import values
from reconciler.typed_values import float32_digits, to_float32

finite = st.floats(allow_nan=False, allow_infinity=False).filter(bool)


def _decimal_reading(text: str) -> tuple[bool, str, int]:
    """An independent reading: sign, significant digits and the first digit's power, by ``decimal``."""
    sign, digits, exponent = Decimal(text).as_tuple()
    text_digits = "".join(map(str, digits)).lstrip("0")
    power = len(text_digits) - 1 + int(exponent)
    return bool(sign), text_digits.rstrip("0") or "0", power


@pytest.mark.slow
@settings(max_examples=400)
@given(finite)
def test_double_text_fast_path_is_the_general_layout(value: float) -> None:
    assert values.format_double(value) == values._general(*values._shortest(repr(value)), max_digits=17)


@pytest.mark.unit
@settings(max_examples=400)
@given(finite)
def test_shortest_reads_repr_as_decimal_does(value: float) -> None:
    assert values._shortest(repr(value)) == _decimal_reading(repr(value))


@pytest.mark.unit
@settings(max_examples=300)
@given(finite.map(to_float32).filter(lambda v: v and abs(v) != float("inf")))
def test_shortest_reads_single_digits_as_decimal_does(value: float) -> None:
    assert values._shortest(float32_digits(value)) == _decimal_reading(float32_digits(value))


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-4, "0.0001"), (1e-5, "1E-05"), (1e15, "1000000000000000"), (1e16, "10000000000000000"),
     (1e17, "1E+17"), (123456789012345678.0, "1.2345678901234568E+17"), (-2.5, "-2.5"), (-0.0, "-0"),
     (7.0, "7"), (float("inf"), "Infinity"), (float("nan"), "NaN")],
)
@pytest.mark.unit
def test_layout_edges(value: float, text: str) -> None:
    assert values.format_double(value) == text
