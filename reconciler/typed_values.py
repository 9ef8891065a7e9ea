"""Typed property values: every type a Service Bus application property can carry, and its one spelling.

Service Bus keeps the type of each application property: the .NET SDK sends a ``short`` as AMQP
short and a ``decimal`` as AMQP decimal128, correlation filters compare with ``object.Equals``
(``int 3`` is not ``short 3``), and SQL promotes operands the way C# does. So a value in sbrules is a
:class:`TypedValue`: an AMQP type name (docs/protocol.md §10) and a Python value.

The *typed form* is the one spelling of a typed value in rule files, sample messages, plans and
exports: a plain scalar means string, long, double, bool or null; a one-key map names any type
(``{short: 3}``, ``{decimal: '0.10'}``, ``{timespan: PT5M}``). Integer type names are AMQP's, so
``byte`` is the signed 8-bit type (.NET ``sbyte``) and ``ubyte`` the unsigned one (.NET ``byte``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import functools
import math
import re
import uuid as _uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any

from reconciler.scalars import (
    DATETIMEOFFSET_MAX_TICKS,
    INT64_MAX,
    INT64_MIN,
    TICKS_PER_MICROSECOND,
    TICKS_PER_SECOND,
    NonFiniteValueError,
    TypedValueError,
    _check_uri,
    _parse_timestamp,
    decimal_text,
    dotnet_decimal,
    float32_digits,
    format_datetimeoffset,
    format_duration,
    format_timestamp,
    int_to_float32,
    parse_datetimeoffset,
    parse_duration,
    to_float32,
)


class ValueType(str, Enum):
    """The types a property value may have (AMQP type names; docs/protocol.md §10)."""

    STRING = "string"
    SYMBOL = "symbol"
    CHAR = "char"
    BOOL = "bool"
    BYTE = "byte"
    UBYTE = "ubyte"
    SHORT = "short"
    USHORT = "ushort"
    INT = "int"
    UINT = "uint"
    LONG = "long"
    ULONG = "ulong"
    FLOAT = "float"
    DOUBLE = "double"
    DECIMAL = "decimal"
    UUID = "uuid"
    TIMESTAMP = "timestamp"
    DATETIMEOFFSET = "datetimeoffset"
    TIMESPAN = "timespan"
    URI = "uri"
    BINARY = "binary"
    NULL = "null"


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

#: The integer types and the values each holds.
INTEGER_RANGES: dict[ValueType, tuple[int, int]] = {
    ValueType.BYTE: (-(2**7), 2**7 - 1),
    ValueType.UBYTE: (0, 2**8 - 1),
    ValueType.SHORT: (-(2**15), 2**15 - 1),
    ValueType.USHORT: (0, 2**16 - 1),
    ValueType.INT: (INT32_MIN, INT32_MAX),
    ValueType.UINT: (0, 2**32 - 1),
    ValueType.LONG: (INT64_MIN, INT64_MAX),
    ValueType.ULONG: (0, 2**64 - 1),
}

#: The .NET type a value of each type becomes on the broker (what filters and actions see).
DOTNET_TYPES: dict[ValueType, str] = {
    ValueType.STRING: "string",
    ValueType.SYMBOL: "string",
    ValueType.CHAR: "char",
    ValueType.BOOL: "bool",
    ValueType.BYTE: "sbyte",
    ValueType.UBYTE: "byte",
    ValueType.SHORT: "short",
    ValueType.USHORT: "ushort",
    ValueType.INT: "int",
    ValueType.UINT: "uint",
    ValueType.LONG: "long",
    ValueType.ULONG: "ulong",
    ValueType.FLOAT: "float",
    ValueType.DOUBLE: "double",
    ValueType.DECIMAL: "decimal",
    ValueType.UUID: "Guid",
    ValueType.TIMESTAMP: "DateTime",
    ValueType.DATETIMEOFFSET: "DateTimeOffset",
    ValueType.TIMESPAN: "TimeSpan",
    ValueType.URI: "Uri",
    ValueType.BINARY: "byte[]",
    ValueType.NULL: "null",
}

#: Plain scalars mean these types; every other type is written as a one-key map.
PLAIN_TYPES = frozenset({ValueType.STRING, ValueType.LONG, ValueType.DOUBLE, ValueType.BOOL, ValueType.NULL})


# ------------------------------------------------------------------------------------------------
# TypedValue
# ------------------------------------------------------------------------------------------------

_NON_FINITE = {
    "nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "infinity": math.inf, "-infinity": -math.inf,
}


@dataclass(frozen=True)
class TypedValue:
    """A property value together with its type.

    The Python value of each type: ``int`` for the eight integer types, ``float`` for double and for
    float (holding the binary32 value exactly), ``decimal.Decimal`` for decimal (a .NET decimal,
    scale kept), a one-character ``str`` for char, ``str`` for string, symbol and uri, ``bool``,
    ``uuid.UUID``, an aware UTC ``datetime`` for timestamp, ``int`` ticks for datetimeoffset (UTC
    ticks since 0001-01-01) and timespan, ``bytes`` for binary, ``None`` for null.
    """

    type: ValueType
    value: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", ValueType(self.type))
        object.__setattr__(self, "value", _coerce(self.type, self.value))

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def of_checked(cls, vtype: ValueType, value: Any) -> "TypedValue":
        """A value already of ``vtype``'s Python type and range, built without checking it again:
        for a decoder whose wire type guarantees both (a 16-bit integer read from two bytes), on
        the path that reads every peeked message."""
        typed = object.__new__(cls)
        fields = typed.__dict__  # the frozen dataclass's own storage, written once here
        fields["type"] = vtype
        fields["value"] = value
        return typed

    @classmethod
    def infer(cls, value: Any) -> "TypedValue":
        """The type a plain Python value means: str→string, int→long, float→double, bool, None→null
        (and uuid, datetime, Decimal, bytes for the values that have one obvious type)."""
        if value is None:
            return cls(ValueType.NULL)
        # The plain scalars a YAML or JSON reader makes: their type and value need no checking.
        plain = _PLAIN_TYPES.get(value.__class__)
        if plain is not None and (plain is not ValueType.LONG or INT64_MIN <= value <= INT64_MAX):
            return cls.of_checked(plain, value)
        for python_type, vtype in _INFERRED:
            if isinstance(value, python_type):
                return cls(vtype, value)
        raise TypedValueError(f"unsupported value {value!r} of type {type(value).__name__}")

    @classmethod
    def from_typed_form(cls, obj: Any, *, finite: bool = False) -> "TypedValue":
        """Read the typed form: a plain scalar, or a one-key map naming the type (``{short: 3}``).

        ``finite`` refuses NaN and infinities, for values a person declares: a plan could never
        compare a NaN with the live rule (it would show as drift forever), and JSON, which plans
        and reports are written in, has no number for either. What the namespace holds (a live
        rule in a plan, the emulator's state, a message) is read as it is.
        """
        value = cls._read_typed_form(obj)
        if finite and isinstance(value.value, float) and not math.isfinite(value.value):
            raise NonFiniteValueError(
                f"{value.describe()} is refused: declare a finite number (a plan cannot compare NaN with the "
                "live rule, and JSON has no number for NaN or infinities)"
            )
        return value

    @classmethod
    def _read_typed_form(cls, obj: Any) -> "TypedValue":
        if obj.__class__ is not dict and not isinstance(obj, Mapping):  # the ABC check only for others
            if isinstance(obj, (list, tuple, set)):
                raise TypedValueError("a property value must be a scalar or a one-key typed map, not a list")
            return cls.infer(obj)
        if len(obj) != 1:
            raise TypedValueError(
                "a typed value is a one-key map such as {int: 3}; got keys " + ", ".join(sorted(map(str, obj)))
            )
        ((tag, raw),) = obj.items()
        try:
            vtype = ValueType(tag)
        except ValueError:
            raise TypedValueError(unknown_type_message(tag)) from None
        return cls(vtype, raw)

    # -- views --------------------------------------------------------------------------------
    def to_typed_form(self, *, explicit: bool = False) -> Any:
        """The shortest typed form that reads back as this exact value (JSON/YAML-safe).

        ``explicit`` names the type of every non-null value (``{long: 3}``, ``{string: x}``), so a
        reader need not remember which type a plain scalar means.
        """
        vtype, value = self.type, self.value
        if vtype is ValueType.NULL:
            return None
        if vtype in (ValueType.DOUBLE, ValueType.FLOAT) and not math.isfinite(value):
            return {vtype.value: repr(value)}
        written = _WRITERS.get(vtype, _same)(value)
        if vtype in PLAIN_TYPES and not explicit:
            return written
        return {vtype.value: written}

    def describe(self) -> str:
        """Human wording such as ``int 3``, ``string '3'`` or ``decimal 0.10``, for plans and lint."""
        vtype, value = self.type, self.value
        if vtype is ValueType.NULL:
            return "null"
        if vtype in (ValueType.STRING, ValueType.SYMBOL, ValueType.CHAR, ValueType.URI):
            return f"{vtype.value} {value!r}"
        if vtype is ValueType.BOOL:
            return f"bool {str(value).lower()}"
        return f"{vtype.value} {_WRITERS.get(vtype, _same)(value)}"


#: The Python types of the scalars a typed form is written with (what YAML and JSON give).
_SCALARS = (str, int, float, bool, type(None))


def read_typed_form(obj: Any, *, finite: bool = False) -> TypedValue:
    """``TypedValue.from_typed_form``, remembered for scalar forms: rule files repeat the same
    property values (``{region: eu}``, ``{int: 1}``) over thousands of rules, and a value is
    immutable, so each distinct one is read once and shared (at 100,000 rules, reading them was a
    fifth of building the rules)."""
    if isinstance(obj, Mapping) and len(obj) == 1:
        ((tag, raw),) = obj.items()
    else:
        tag, raw = None, obj
    if type(raw) not in _SCALARS or not isinstance(tag, (str, type(None))):
        return TypedValue.from_typed_form(obj, finite=finite)
    return _read_scalar_form(tag, raw, type(raw).__name__, repr(raw), finite)


@functools.lru_cache(maxsize=8192)
def _read_scalar_form(tag: str | None, raw: Any, kind: str, written: str, finite: bool) -> TypedValue:
    """Keyed by the scalar's Python type and text as well: 1, 1.0 and true are equal keys
    otherwise, and so are 0.0 and -0.0."""
    return TypedValue.from_typed_form(raw if tag is None else {tag: raw}, finite=finite)


def unknown_type_message(tag: Any) -> str:
    """The error for a typed map whose key is not a type, with a hint for .NET's spellings."""
    hints = {"sbyte": "byte", "boolean": "bool", "guid": "uuid", "datetime": "timestamp", "decimal128": "decimal",
             "int32": "int", "int64": "long", "single": "float", "str": "string"}
    text = f"unknown value type {tag!r}"
    hint = hints.get(str(tag).lower())
    if hint == "byte":
        return f"{text} (AMQP byte is .NET sbyte: write {{byte: ...}}; .NET byte is {{ubyte: ...}})"
    if hint is not None:
        return f"{text} (did you mean {hint}?)"
    known = ", ".join(t.value for t in ValueType if t is not ValueType.NULL)
    return f"{text} (known: {known})"


def _same(value: Any) -> Any:
    return value


def _float_form(value: float) -> float:
    return float(float32_digits(value))


_WRITERS: dict[ValueType, Callable[[Any], Any]] = {
    ValueType.FLOAT: _float_form,
    ValueType.DECIMAL: decimal_text,
    ValueType.UUID: str,
    ValueType.TIMESTAMP: format_timestamp,
    ValueType.DATETIMEOFFSET: format_datetimeoffset,
    ValueType.TIMESPAN: format_duration,
    ValueType.BINARY: lambda raw: base64.b64encode(raw).decode("ascii"),
}

#: The exact classes of plain scalars and the type each means (see TypedValue.infer).
_PLAIN_TYPES: dict[type, ValueType] = {str: ValueType.STRING, int: ValueType.LONG, float: ValueType.DOUBLE, bool: ValueType.BOOL}

_INFERRED: tuple[tuple[type, ValueType], ...] = (
    (bool, ValueType.BOOL),
    (int, ValueType.LONG),
    (float, ValueType.DOUBLE),
    (str, ValueType.STRING),
    (_uuid.UUID, ValueType.UUID),
    (_dt.datetime, ValueType.TIMESTAMP),
    (Decimal, ValueType.DECIMAL),
    (bytes, ValueType.BINARY),
)


def _integer(vtype: ValueType, raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise TypedValueError(f"{vtype.value} value must be an integer, got {raw!r}")
    low, high = INTEGER_RANGES[vtype]
    if not low <= raw <= high:
        wider = next((t for t in (ValueType.LONG, ValueType.ULONG) if INTEGER_RANGES[t][0] <= raw <= INTEGER_RANGES[t][1]), None)
        hint = f"; use {{{wider.value}: {raw}}}" if wider is not None and wider is not vtype else ""
        raise TypedValueError(f"{raw} is out of range for {vtype.value} ({low}..{high}){hint}")
    return int(raw)


def _binary_float(vtype: ValueType, raw: Any) -> float:
    if isinstance(raw, bool):
        raise TypedValueError(f"{vtype.value} value must be a number, got {raw!r}")
    if isinstance(raw, int):
        return int_to_float32(raw) if vtype is ValueType.FLOAT else float(raw)
    if isinstance(raw, float):
        return to_float32(raw) if vtype is ValueType.FLOAT else raw
    if isinstance(raw, str) and raw.strip().lower() in _NON_FINITE:
        return _NON_FINITE[raw.strip().lower()]
    raise TypedValueError(f"{vtype.value} value must be a number, got {raw!r}")


def _decimal(raw: Any) -> Decimal:
    if isinstance(raw, (bool, float)):
        raise TypedValueError(
            f"write a decimal as text, such as {{decimal: '0.10'}}: a YAML or JSON number is binary and loses digits ({raw!r})"
        )
    if isinstance(raw, int):
        return dotnet_decimal(Decimal(raw))
    if isinstance(raw, Decimal):
        return dotnet_decimal(raw)
    if isinstance(raw, str) and re.fullmatch(r"\s*[+-]?(\d+\.?\d*|\.\d+)\s*", raw):
        try:
            return dotnet_decimal(Decimal(raw.strip()))
        except InvalidOperation:  # pragma: no cover - the pattern admits only valid numbers
            pass
    raise TypedValueError(f"not a decimal number such as '12.50': {raw!r}")


def _char(raw: Any) -> str:
    if not isinstance(raw, str) or len(raw) != 1:
        raise TypedValueError(f"a char is exactly one character, got {raw!r}")
    if ord(raw) > 0xFFFF:
        raise TypedValueError(f"a char is one UTF-16 code unit; {raw!r} (U+{ord(raw):X}) needs two (send it as a string)")
    return raw


def _text(vtype: ValueType, raw: Any) -> str:
    if not isinstance(raw, str):
        raise TypedValueError(f"{vtype.value} value must be text, got {raw!r}")
    if vtype is ValueType.SYMBOL and not raw.isascii():
        raise TypedValueError(f"a symbol is ASCII text, got {raw!r}")
    if vtype is ValueType.URI:
        return _check_uri(raw)
    return raw


def _ticks(vtype: ValueType, raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        low, high = (0, DATETIMEOFFSET_MAX_TICKS) if vtype is ValueType.DATETIMEOFFSET else (INT64_MIN, INT64_MAX)
        if not low <= raw <= high:
            raise TypedValueError(f"{raw} ticks are out of range for {vtype.value}")
        return raw
    if isinstance(raw, _dt.timedelta) and vtype is ValueType.TIMESPAN:
        return _ticks(vtype, (raw.days * 86_400 + raw.seconds) * TICKS_PER_SECOND + raw.microseconds * TICKS_PER_MICROSECOND)
    if isinstance(raw, _dt.datetime) and vtype is ValueType.DATETIMEOFFSET:
        return parse_datetimeoffset((raw if raw.tzinfo else raw.replace(tzinfo=_dt.timezone.utc)).isoformat())
    if isinstance(raw, str):
        return parse_duration(raw) if vtype is ValueType.TIMESPAN else parse_datetimeoffset(raw)
    example = "PT5M" if vtype is ValueType.TIMESPAN else "2024-01-02T03:04:05Z"
    raise TypedValueError(f"{vtype.value} must be ISO 8601 text such as {example}, got {raw!r}")


def _coerce(vtype: ValueType, raw: Any) -> Any:
    """Check and normalise the Python value stored for ``vtype``."""
    if vtype is ValueType.NULL:
        if raw is not None:
            raise TypedValueError("a null value carries no data")
        return None
    if raw is None:
        raise TypedValueError(f"{vtype.value} value missing (use null for a null value)")
    if vtype in INTEGER_RANGES:
        return _integer(vtype, raw)
    if vtype in (ValueType.STRING, ValueType.SYMBOL, ValueType.URI):
        return _text(vtype, raw)
    if vtype is ValueType.BOOL:
        if not isinstance(raw, bool):
            raise TypedValueError(f"bool value must be true or false, got {raw!r}")
        return raw
    if vtype in (ValueType.DOUBLE, ValueType.FLOAT):
        return _binary_float(vtype, raw)
    if vtype is ValueType.DECIMAL:
        return _decimal(raw)
    if vtype is ValueType.CHAR:
        return _char(raw)
    if vtype is ValueType.UUID:
        if isinstance(raw, _uuid.UUID):
            return raw
        try:
            return _uuid.UUID(str(raw))
        except ValueError:
            raise TypedValueError(f"not a UUID: {raw!r}") from None
    if vtype is ValueType.TIMESTAMP:
        if isinstance(raw, _dt.datetime):
            return raw if raw.tzinfo else raw.replace(tzinfo=_dt.timezone.utc)
        if isinstance(raw, _dt.date):
            return _dt.datetime(raw.year, raw.month, raw.day, tzinfo=_dt.timezone.utc)
        if isinstance(raw, str):
            return _parse_timestamp(raw)
        raise TypedValueError(f"timestamp must be an ISO 8601 string, got {raw!r}")
    if vtype in (ValueType.DATETIMEOFFSET, ValueType.TIMESPAN):
        return _ticks(vtype, raw)
    if vtype is ValueType.BINARY:
        if isinstance(raw, (bytes, bytearray, memoryview)):
            return bytes(raw)
        if isinstance(raw, str):
            try:
                return base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise TypedValueError(f"binary must be base64 text, got {raw!r}") from None
        raise TypedValueError(f"binary must be base64 text, got {raw!r}")
    raise TypedValueError(f"unsupported type {vtype}")  # pragma: no cover - enum is closed


def typed_properties(props: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> tuple[tuple[str, TypedValue], ...]:
    """Normalise a property mapping to sorted ``(name, TypedValue)`` pairs (values in typed form or typed)."""
    items = props.items() if isinstance(props, Mapping) else props
    out = []
    for key, value in items:
        tv = value if isinstance(value, TypedValue) else TypedValue.from_typed_form(value)
        out.append((str(key), tv))
    return tuple(sorted(out, key=lambda kv: kv[0]))



_NUMERIC_TYPES = (*INTEGER_RANGES, ValueType.FLOAT, ValueType.DOUBLE, ValueType.DECIMAL)
#: Types that can carry the same text (tried by constructing the value) or the same instant.
_LOOKALIKES: dict[ValueType, tuple[ValueType, ...]] = {
    ValueType.STRING: (ValueType.CHAR, ValueType.URI, ValueType.UUID),
    ValueType.SYMBOL: (ValueType.CHAR, ValueType.URI, ValueType.UUID),
    ValueType.CHAR: (ValueType.STRING,),
    ValueType.URI: (ValueType.STRING,),
    ValueType.UUID: (ValueType.STRING,),
    ValueType.TIMESTAMP: (ValueType.DATETIMEOFFSET,),
    ValueType.DATETIMEOFFSET: (ValueType.TIMESTAMP,),
}


def same_value_other_types(value: TypedValue) -> list[ValueType]:
    """The other types a producer could send this value as (the same number as written, the same
    text, the same instant), which a correlation filter holding ``value`` does not match:
    correlation compares with ``object.Equals``, type first, so ``int 3`` is neither ``short 3``
    nor ``long 3``. A string and a symbol are one type on the broker, so neither is listed for
    the other."""
    if value.type in _NUMERIC_TYPES:
        written = _number_text(value)
        if written is None:
            return [t for t in (ValueType.FLOAT, ValueType.DOUBLE) if t is not value.type]
        return [t for t in _NUMERIC_TYPES if t is not value.type and _holds(t, written)]
    out = []
    for other in _LOOKALIKES.get(value.type, ()):
        raw = value.value
        if other is ValueType.STRING:
            raw = str(raw)
        elif value.type is ValueType.DATETIMEOFFSET:
            if raw % 10_000:
                continue  # finer than the millisecond an AMQP timestamp carries
            raw = format_datetimeoffset(raw)
        elif value.type is ValueType.TIMESTAMP:
            raw = format_timestamp(raw)
        try:
            TypedValue(other, raw)
        except TypedValueError:
            continue
        out.append(other)
    return out


def _number_text(value: TypedValue) -> Decimal | None:
    """The number as its writer would have typed it (binary floats by their shortest digits)."""
    if value.type is ValueType.FLOAT:
        text = float32_digits(value.value)
    elif value.type is ValueType.DOUBLE:
        text = repr(value.value)
    else:
        return Decimal(value.value)
    number = Decimal(text)
    return number if number.is_finite() else None


def _holds(vtype: ValueType, number: Decimal) -> bool:
    """Whether a value of ``vtype`` can be exactly ``number`` (binary floats: by shortest digits)."""
    try:
        if vtype in INTEGER_RANGES:
            return number == number.to_integral_value() and TypedValue(vtype, int(number)) is not None
        if vtype is ValueType.DECIMAL:
            return TypedValue(vtype, number) is not None
        converted = TypedValue(vtype, float(number))
    except TypedValueError:
        return False
    return _number_text(converted) == number
