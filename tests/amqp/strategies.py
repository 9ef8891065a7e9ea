"""Hypothesis strategies for model values, shared by the codec and message codec tests."""

from __future__ import annotations

import datetime as dt

from hypothesis import strategies as st

from reconciler import model as m

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF, blacklist_categories=("Cs",)), min_size=1, max_size=50)
ms_datetimes = st.datetimes(
    min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(dt.timezone.utc)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))

typed_values = st.one_of(
    text.map(lambda v: m.TypedValue(m.ValueType.STRING, v)),
    st.integers(m.INT64_MIN, m.INT64_MAX).map(lambda v: m.TypedValue(m.ValueType.LONG, v)),
    st.integers(m.INT32_MIN, m.INT32_MAX).map(lambda v: m.TypedValue(m.ValueType.INT, v)),
    st.floats(allow_nan=False).map(lambda v: m.TypedValue(m.ValueType.DOUBLE, v)),
    st.booleans().map(lambda v: m.TypedValue(m.ValueType.BOOL, v)),
    st.uuids().map(lambda v: m.TypedValue(m.ValueType.UUID, v)),
    ms_datetimes.map(lambda v: m.TypedValue(m.ValueType.TIMESTAMP, v)),
    st.just(m.TypedValue(m.ValueType.NULL)),
)
