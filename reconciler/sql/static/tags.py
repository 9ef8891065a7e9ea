"""Type tags: the run-time class of a property's value (or its absence), as the proofs see it."""

from __future__ import annotations

import datetime as _dt
import functools
import operator
import uuid
from decimal import Decimal
from typing import Any, Callable

from reconciler.model import (
    ValueType,
)
from reconciler.sql import values
from reconciler.sql.evaluator import CompiledFilter
from reconciler.sql.evaluator import literal_value as _literal_value

MISSING_TAG = "missing"
_UTC = _dt.timezone.utc
#: Tag → a representative run-time value (None for null); numeric tags are values.NUMERIC_TAGS'.
REPRESENTATIVE: dict[str, Any] = {
    "null": None,
    "bool": False,
    "string": "",
    "byte": values.SByte(0),
    "ubyte": values.Byte(0),
    "short": values.Int16(0),
    "ushort": values.UInt16(0),
    "int": values.Int32(0),
    "uint": values.UInt32(0),
    "long": 0,
    "ulong": values.UInt64(0),
    "char": values.Char(65),
    "float": values.Single(0.0),
    "double": 0.0,
    "decimal": Decimal(0),
    "guid": uuid.UUID(int=0),
    "datetime": _dt.datetime(2000, 1, 1, tzinfo=_UTC),
    "datetimeoffset": values.DateTimeOffset(0),
    "timespan": values.TimeSpan(0),
    "uri": values.Uri("http://a/"),
    "binary": b"",
}
TAGS: tuple[str, ...] = (MISSING_TAG, *REPRESENTATIVE)
_TAG_NUMBER = {tag: number for number, tag in enumerate(TAGS)}
INTEGER_TAGS = ("byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong", "char")
BINARY_FLOAT_TAGS = ("float", "double")
_INTEGER_RANGE = {
    "byte": (-(2**7), 2**7 - 1), "ubyte": (0, 2**8 - 1), "short": (-(2**15), 2**15 - 1), "ushort": (0, 2**16 - 1),
    "int": (-(2**31), 2**31 - 1), "uint": (0, 2**32 - 1), "long": (-(2**63), 2**63 - 1), "ulong": (0, 2**64 - 1),
    "char": (0, 2**16 - 1),
}
#: Integers of at most this magnitude convert to float / double exactly.
_EXACT_IN = {"float": 2**24, "double": 2**53}
#: A binary float's kind: finite (its value in ``r``), NaN, +∞, −∞.
FINITE, NAN, PLUS_INF, MINUS_INF = range(4)

#: The tag of each model type (a symbol is a string on the broker).
TAG_OF_TYPE: dict[ValueType, str] = {
    ValueType.STRING: "string", ValueType.SYMBOL: "string", ValueType.CHAR: "char", ValueType.BOOL: "bool",
    ValueType.BYTE: "byte", ValueType.UBYTE: "ubyte", ValueType.SHORT: "short", ValueType.USHORT: "ushort",
    ValueType.INT: "int", ValueType.UINT: "uint", ValueType.LONG: "long", ValueType.ULONG: "ulong",
    ValueType.FLOAT: "float", ValueType.DOUBLE: "double", ValueType.DECIMAL: "decimal", ValueType.UUID: "guid",
    ValueType.TIMESTAMP: "datetime", ValueType.DATETIMEOFFSET: "datetimeoffset", ValueType.TIMESPAN: "timespan",
    ValueType.URI: "uri", ValueType.BINARY: "binary", ValueType.NULL: "null",
}

_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


#: Literals and atoms recur across the rules of a subscription: each is converted or compiled once.
literal_value = functools.lru_cache(maxsize=65536)(_literal_value)
_compiled = functools.lru_cache(maxsize=65536)(CompiledFilter)


def runtime_tag(value: Any) -> str:
    """The tag of a run-time value (values.py classes)."""
    if value is None:
        return "null"
    cls = value.__class__
    if cls in values.NUMERIC_TAGS:
        return values.NUMERIC_TAGS[cls]
    return {
        bool: "bool", str: "string", uuid.UUID: "guid", _dt.datetime: "datetime", values.DateTimeOffset: "datetimeoffset",
        values.TimeSpan: "timespan", values.Uri: "uri", bytes: "binary",
    }[cls]


