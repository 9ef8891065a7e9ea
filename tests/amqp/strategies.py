"""Hypothesis strategies for model values, shared by the codec and message codec tests."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import strategies as st

from reconciler import model as m
from reconciler.typed_values import DATETIMEOFFSET_MAX_TICKS, INTEGER_RANGES, to_float32

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF, blacklist_categories=("Cs",)), min_size=1, max_size=50)
ms_datetimes = st.datetimes(
    min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(dt.timezone.utc)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))


def _typed(vtype: m.ValueType, values: st.SearchStrategy) -> st.SearchStrategy:
    return values.map(lambda v: m.TypedValue(vtype, v))


#: .NET decimals: a coefficient below 2**96 and a scale of 0..28, the scale kept (3.00 is not 3).
dotnet_decimals = st.builds(
    lambda sign, coefficient, scale: Decimal((sign, tuple(map(int, str(coefficient))), -scale)),
    st.integers(0, 1), st.integers(0, 2**96 - 1), st.integers(0, 28),
)
uris = st.sampled_from(["https://example.com/", "http://Example.COM:80/a%20b?q=%41#frag", "urn:isbn:0451450523", "mailto:a@b.c"])

#: One strategy per property type: every type an application property can carry.
TYPED_BY_TYPE: dict[m.ValueType, st.SearchStrategy] = {
    **{vtype: _typed(vtype, st.integers(low, high)) for vtype, (low, high) in INTEGER_RANGES.items()},
    m.ValueType.STRING: _typed(m.ValueType.STRING, text),
    m.ValueType.SYMBOL: _typed(m.ValueType.SYMBOL, st.text(st.characters(max_codepoint=127), max_size=10)),
    m.ValueType.CHAR: _typed(m.ValueType.CHAR, st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",))),
    m.ValueType.FLOAT: _typed(m.ValueType.FLOAT, st.floats(allow_nan=False, width=32).map(to_float32)),
    m.ValueType.DOUBLE: _typed(m.ValueType.DOUBLE, st.floats(allow_nan=False)),
    m.ValueType.DECIMAL: _typed(m.ValueType.DECIMAL, dotnet_decimals),
    m.ValueType.BOOL: _typed(m.ValueType.BOOL, st.booleans()),
    m.ValueType.UUID: _typed(m.ValueType.UUID, st.uuids()),
    m.ValueType.TIMESTAMP: _typed(m.ValueType.TIMESTAMP, ms_datetimes),
    m.ValueType.DATETIMEOFFSET: _typed(m.ValueType.DATETIMEOFFSET, st.integers(0, DATETIMEOFFSET_MAX_TICKS)),
    m.ValueType.TIMESPAN: _typed(m.ValueType.TIMESPAN, st.integers(m.INT64_MIN, m.INT64_MAX)),
    m.ValueType.URI: _typed(m.ValueType.URI, uris),
    m.ValueType.BINARY: _typed(m.ValueType.BINARY, st.binary(max_size=8)),
    m.ValueType.NULL: st.just(m.TypedValue(m.ValueType.NULL)),
}
assert set(TYPED_BY_TYPE) == set(m.ValueType), "every property type needs a strategy"
typed_values = st.one_of(*TYPED_BY_TYPE.values())
