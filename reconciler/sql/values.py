"""Run-time values and the C#-flavoured operators the broker's filter engine applies to them.

Values at run time are Python objects whose class is their .NET type: ``None`` (null), ``bool``,
``str`` (string; a symbol is a string on the broker), ``int`` (Int64) and the ``int`` subclasses
:class:`SByte` … :class:`UInt64` and :class:`Char`, ``float`` (Double) and :class:`Single`,
``decimal.Decimal`` (a .NET decimal), ``uuid.UUID`` (Guid), ``datetime`` (DateTime, UTC),
:class:`DateTimeOffset`, :class:`TimeSpan`, :class:`Uri` and ``bytes`` (byte[]), plus the
:data:`MISSING` sentinel for an absent user property (UNKNOWN / DBNull).

The rules follow ``docs/sql-language.md`` §5: C# operator binding on runtime types (numeric
promotion of §5.11, where C# refuses decimal with a binary float and ulong with a signed type),
C# null semantics, checked integer arithmetic, truncating division, .NET decimal arithmetic,
type mismatch = evaluation error.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import operator
import re
import uuid
from decimal import Decimal
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

from reconciler.scalars import UNIX_EPOCH_TICKS, split_ticks
from reconciler.sql.errors import SqlEvalError
from reconciler.typed_values import TICKS_PER_MICROSECOND, TypedValue, ValueType, decimal_text, float32_digits, int_to_float32


class _Missing:
    """An absent user property: UNKNOWN in predicates, DBNull in the reference engine."""

    _instance: "_Missing | None" = None

    def __new__(cls) -> "_Missing":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


# ---------------------------------------------------------------------------------------------
# Run-time classes of the .NET types that Python has no class of its own for
# ---------------------------------------------------------------------------------------------


class _Integral(int):
    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"


class SByte(_Integral):
    """A value the publisher sent as AMQP byte (.NET sbyte)."""


class Byte(_Integral):
    """AMQP ubyte (.NET byte)."""


class Int16(_Integral):
    """AMQP short."""


class UInt16(_Integral):
    """AMQP ushort."""


class Int32(_Integral):
    """AMQP int (Int32 op Int32 stays Int32, checked)."""


class UInt32(_Integral):
    """AMQP uint."""


class UInt64(_Integral):
    """AMQP ulong."""


class Char(_Integral):
    """A .NET char: numeric in arithmetic and comparisons (its UTF-16 code), a character as text."""


class Single(float):
    """A .NET float: the binary32 value, exactly, in a Python float."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Single({float32_digits(self)})"


class _Ticks:
    """A value counted in 100-ns ticks."""

    __slots__ = ("ticks",)

    def __init__(self, ticks: int):
        self.ticks = ticks

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.ticks == self.ticks

    def __hash__(self) -> int:
        return hash((type(self), self.ticks))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ticks})"


class DateTimeOffset(_Ticks):
    """A .NET DateTimeOffset as it arrives over AMQP: UTC ticks since 0001-01-01 (offset +00:00)."""

    __slots__ = ()


class TimeSpan(_Ticks):
    """A .NET TimeSpan: signed ticks."""

    __slots__ = ()


_DEFAULT_PORTS = {"http": "80", "https": "443", "ftp": "21", "ws": "80", "wss": "443"}
_UNRESERVED = re.compile(r"%(?:4[1-9A-F]|5[0-9A]|6[1-9A-F]|7[0-9A]|3[0-9]|2D|2E|5F|7E)", re.IGNORECASE)


class Uri:
    """A .NET Uri: its text as sent (``AbsoluteUri``) and the key ``Uri.Equals`` compares."""

    __slots__ = ("key", "text")

    def __init__(self, text: str):
        self.text = text
        self.key = uri_key(text)

    def __eq__(self, other: object) -> bool:
        return type(other) is Uri and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Uri({self.text!r})"


def uri_key(text: str) -> tuple[str, ...]:
    """What ``Uri.Equals`` compares: scheme and host without case, the default port dropped, escaped
    unreserved characters unescaped, the fragment ignored (docs/sql-language.md §5.10, unverified
    beyond these rules)."""
    parts = urlsplit(text)
    port = "" if parts.port is None or str(parts.port) == _DEFAULT_PORTS.get(parts.scheme.lower()) else str(parts.port)
    host = (parts.hostname or "").lower()
    path = _UNRESERVED.sub(lambda m: unquote(m.group(0)), parts.path) or ("/" if host else "")
    query = _UNRESERVED.sub(lambda m: unquote(m.group(0)), parts.query)
    return (parts.scheme.lower(), parts.username or "", parts.password or "", host, port, path, query)


# ---------------------------------------------------------------------------------------------
# Kinds: which C# operator family a value takes part in
# ---------------------------------------------------------------------------------------------

NULL, BOOL, STRING, NUMBER, GUID, DATETIME, DATETIMEOFFSET, TIMESPAN, URI, BINARY = (
    "null", "bool", "string", "number", "Guid", "DateTime", "DateTimeOffset", "TimeSpan", "Uri", "byte[]",
)

#: Numeric run-time class → its type tag (the model's names: ``byte`` is .NET sbyte).
NUMERIC_TAGS: dict[type, str] = {
    SByte: "byte", Byte: "ubyte", Int16: "short", UInt16: "ushort", Int32: "int", UInt32: "uint",
    int: "long", UInt64: "ulong", Char: "char", Single: "float", float: "double", Decimal: "decimal",
}
KIND: dict[type, str] = {
    type(None): NULL,
    bool: BOOL,
    str: STRING,
    uuid.UUID: GUID,
    _dt.datetime: DATETIME,
    DateTimeOffset: DATETIMEOFFSET,
    TimeSpan: TIMESPAN,
    Uri: URI,
    bytes: BINARY,
    **dict.fromkeys(NUMERIC_TAGS, NUMBER),
}
#: Kinds with instants (compared and subtracted across DateTime and DateTimeOffset).
INSTANTS = (DATETIME, DATETIMEOFFSET)


def kind_of(value: Any) -> str:
    kind = KIND.get(value.__class__)
    if kind is None:
        raise SqlEvalError(f"unsupported value {value!r}")
    return kind


# ---------------------------------------------------------------------------------------------
# Numeric promotion (C#'s binary numeric promotion, docs/sql-language.md §5.11)
# ---------------------------------------------------------------------------------------------

SIGNED_INTEGERS = frozenset({"byte", "short", "int", "long"})
INTEGER_TAGS = frozenset({"byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong", "char"})
NUMERIC_TAG_SET = INTEGER_TAGS | {"float", "double", "decimal"}


@functools.lru_cache(maxsize=None)
def promote(left: str, right: str) -> str | None:
    """The type C# computes ``left OP right`` in, or None where it refuses (an evaluation error).

    decimal with float or double, and ulong with a signed type, have no common type; otherwise
    the first of double, float, ulong, long applies, uint with a signed type widens to long, and
    every smaller type (char included) computes in int.
    """
    pair = {left, right}
    if "decimal" in pair:
        return None if pair & {"float", "double"} else "decimal"
    if "double" in pair:
        return "double"
    if "float" in pair:
        return "float"
    if "ulong" in pair:
        return None if pair & SIGNED_INTEGERS else "ulong"
    if "long" in pair:
        return "long"
    if "uint" in pair:
        return "long" if pair & SIGNED_INTEGERS else "uint"
    return "int"


#: Unary minus: the type C# negates in (None: no operator, ulong).
NEGATION = {
    "byte": "int", "ubyte": "int", "short": "int", "ushort": "int", "char": "int", "int": "int",
    "uint": "long", "long": "long", "ulong": None, "float": "float", "double": "double", "decimal": "decimal",
}

#: Result type → the run-time class holding it.
_RESULT_CLASS: dict[str, Callable[[Any], Any]] = {
    "int": Int32, "uint": UInt32, "long": int, "ulong": UInt64, "float": Single, "double": float,
}


def as_number(value: Any, target: str) -> Any:
    """``value`` (a number) converted to the promoted type ``target`` the way C# converts it."""
    if target == "double":
        return float(value)
    if target == "float":
        return value if value.__class__ is Single else Single(int_to_float32(int(value)))
    if target == "decimal":
        return value if value.__class__ is Decimal else Decimal(int(value))
    return int(value)


# ---------------------------------------------------------------------------------------------
# Model values ⇄ run-time values
# ---------------------------------------------------------------------------------------------

_FROM_TYPED: dict[ValueType, Callable[[Any], Any]] = {
    ValueType.BYTE: SByte, ValueType.UBYTE: Byte, ValueType.SHORT: Int16, ValueType.USHORT: UInt16,
    ValueType.INT: Int32, ValueType.UINT: UInt32, ValueType.ULONG: UInt64,
    ValueType.CHAR: lambda c: Char(ord(c)), ValueType.FLOAT: Single, ValueType.SYMBOL: str,
    ValueType.DATETIMEOFFSET: DateTimeOffset, ValueType.TIMESPAN: TimeSpan, ValueType.URI: Uri,
}


def from_typed(tv: TypedValue) -> Any:
    """The run-time value of a model TypedValue (a symbol is a string, as on the broker)."""
    convert = _FROM_TYPED.get(tv.type)
    return tv.value if convert is None else convert(tv.value)


_TO_TYPED: dict[type, Callable[[Any], TypedValue]] = {
    SByte: lambda v: TypedValue(ValueType.BYTE, int(v)),
    Byte: lambda v: TypedValue(ValueType.UBYTE, int(v)),
    Int16: lambda v: TypedValue(ValueType.SHORT, int(v)),
    UInt16: lambda v: TypedValue(ValueType.USHORT, int(v)),
    Int32: lambda v: TypedValue(ValueType.INT, int(v)),
    UInt32: lambda v: TypedValue(ValueType.UINT, int(v)),
    UInt64: lambda v: TypedValue(ValueType.ULONG, int(v)),
    Char: lambda v: TypedValue(ValueType.CHAR, chr(v)),
    Single: lambda v: TypedValue(ValueType.FLOAT, float(v)),
    DateTimeOffset: lambda v: TypedValue(ValueType.DATETIMEOFFSET, v.ticks),
    TimeSpan: lambda v: TypedValue(ValueType.TIMESPAN, v.ticks),
    Uri: lambda v: TypedValue(ValueType.URI, v.text),
}


def to_typed(value: Any) -> TypedValue:
    """The model TypedValue of a run-time value."""
    if value is MISSING or value is None:
        return TypedValue(ValueType.NULL)
    convert = _TO_TYPED.get(value.__class__)
    return TypedValue.infer(value) if convert is None else convert(value)


def describe(value: Any) -> str:
    """A short human description for error messages: ``string 'a'``, ``Int64 1``, ``null``."""
    if value is MISSING:
        return "a missing property"
    if value is None:
        return "null"
    cls = value.__class__
    if cls is bool:
        return "TRUE" if value else "FALSE"
    if cls is str:
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {shown!r}"
    name = _DOTNET_NAMES.get(cls) or kind_of(value)
    return f"{name} {to_string(value)}"


_DOTNET_NAMES: dict[type, str] = {
    SByte: "SByte", Byte: "Byte", Int16: "Int16", UInt16: "UInt16", Int32: "Int32", UInt32: "UInt32",
    int: "Int64", UInt64: "UInt64", Char: "Char", Single: "Single", float: "Double", Decimal: "Decimal",
}


# ---------------------------------------------------------------------------------------------
# .NET formatting (Convert.ToString with the invariant culture)
# ---------------------------------------------------------------------------------------------


def _general(negative: bool, digits: str, exponent: int, max_digits: int) -> str:
    """.NET's "G" layout of shortest round-trip ``digits`` × 10^``exponent`` (first digit's power):
    scientific when the decimal point would sit more than ``max(len(digits), max_digits)`` places
    right of the first digit or more than four places left of it (dotnet/runtime,
    ``Number.Formatting.cs``, ``FormatDouble`` and ``FormatGeneral``)."""
    point = exponent + 1
    prefix = "-" if negative else ""
    if point > max(len(digits), max_digits) or point < -3:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}E{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return prefix + digits + "0" * (point - len(digits))
    return f"{prefix}{digits[:point]}.{digits[point:]}"


def _shortest(text: str) -> tuple[bool, str, int]:
    """(negative, significant digits, power of the first digit) of a shortest-repr text (``repr`` or
    ``%g``: ``-1.5e-05``), read as text: the sampler formats every double property it stores."""
    negative = text[0] == "-"
    mantissa, _, power = text.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exponent = (int(power) if power else 0) + len(whole) - 1 - (len(whole) + len(fraction) - len(digits))
    return negative, digits.rstrip("0") or "0", exponent


def _non_finite(value: float) -> str | None:
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    return None


def format_double(value: float) -> str:
    """.NET Core ``double.ToString()``: shortest round-trip digits, ``E+XX`` beyond 17 integer digits
    (or more when the digits need them) or below 1E-04."""
    text = repr(value)
    if "e" not in text and "n" not in text:
        # The common case, read off repr (the same shortest digits): both print fixed notation here,
        # repr with a ".0" that .NET leaves out. Not "inf" or "nan", which .NET spells otherwise.
        return text[:-2] if text.endswith(".0") else text
    special = _non_finite(value)
    if special is not None:
        return special
    return _general(*_shortest(text), max_digits=17)


def format_single(value: float) -> str:
    """.NET Core ``float.ToString()``: shortest digits that read back as the same binary32, ``E+XX``
    beyond nine integer digits (or more when the digits need them) or below 1E-04."""
    special = _non_finite(value)
    if special is not None:
        return special
    return _general(*_shortest(float32_digits(value)), max_digits=9)


def format_timespan(ticks: int) -> str:
    """.NET ``TimeSpan.ToString()``: ``[-][d.]hh:mm:ss[.fffffff]``."""
    sign, days, hours, minutes, seconds, fraction = split_ticks(ticks)
    text = f"{sign}{f'{days}.' if days else ''}{hours:02d}:{minutes:02d}:{seconds:02d}"
    return text + (f".{fraction:07d}" if fraction else "")


def _datetimeoffset_text(value: DateTimeOffset) -> str:
    moment = _EPOCH + _dt.timedelta(microseconds=(value.ticks - UNIX_EPOCH_TICKS) // TICKS_PER_MICROSECOND)
    return moment.strftime("%m/%d/%Y %H:%M:%S") + " +00:00"


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

_TEXT: dict[type, Callable[[Any], str]] = {
    bool: lambda v: "True" if v else "False",
    float: format_double,
    Single: format_single,
    Decimal: decimal_text,
    Char: chr,
    uuid.UUID: str,
    _dt.datetime: lambda v: v.strftime("%m/%d/%Y %H:%M:%S"),
    DateTimeOffset: _datetimeoffset_text,
    TimeSpan: lambda v: format_timespan(v.ticks),
    Uri: lambda v: v.text,
    bytes: lambda v: "System.Byte[]",
}


def to_string(value: Any) -> str:
    """``Convert.ToString(value, InvariantCulture)``: null is the empty string, TRUE is ``True``."""
    cls = value.__class__
    if cls is str:
        return value
    if value is None:
        return ""
    convert = _TEXT.get(cls)
    if convert is not None:
        return convert(value)
    if cls in NUMERIC_TAGS:
        return str(int(value))
    raise SqlEvalError(f"cannot convert {value!r} to a string")


# ---------------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------------


def _mismatch(op: str, a: Any, b: Any) -> SqlEvalError:
    return SqlEvalError(f"operator {op} is not defined for {describe(a)} and {describe(b)}")


def _promoted(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    target = promote(NUMERIC_TAGS[a.__class__], NUMERIC_TAGS[b.__class__])
    if target is None:
        raise _mismatch(op, a, b)
    return as_number(a, target), as_number(b, target)


def instant_ticks(value: Any) -> int:
    """UTC ticks of a DateTime or DateTimeOffset (C# converts a DateTime to DateTimeOffset to compare)."""
    if value.__class__ is DateTimeOffset:
        return value.ticks
    delta = value - _EPOCH
    return UNIX_EPOCH_TICKS + ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * TICKS_PER_MICROSECOND


def equals(a: Any, b: Any) -> bool:
    """C# ``==`` on runtime types (neither side missing): null == null, numeric promotion."""
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb:
        if ka == NUMBER:
            x, y = _promoted("=", a, b)
            return x == y
        if ka == BINARY:
            return False  # byte[] == byte[] compares references: two properties are never the same array
        if ka == DATETIMEOFFSET:
            return a.ticks == b.ticks
        return a == b
    if ka in INSTANTS and kb in INSTANTS:
        return instant_ticks(a) == instant_ticks(b)
    if ka == NULL or kb == NULL:
        return False
    raise _mismatch("=", a, b)


def object_equals(a: Any, b: Any) -> bool:
    """.NET ``a.Equals(b)`` (correlation filters, docs/sql-language.md §5.10): the same run-time
    type and value, no promotion (``Int32 3`` is not ``Int64 3``); NaN equals NaN; a decimal's
    scale does not count (``3.0`` is ``3.00``); Uris compare as ``Uri.Equals`` does (a Uri also equals
    a string that parses to it, not the other way round); a string and
    a symbol are both strings on the broker. Arrays compare by reference, so never equal."""
    if a.__class__ is Uri and b.__class__ is str:  # Uri.Equals(object) parses a string operand
        try:
            return bool(urlsplit(b).scheme) and uri_key(b) == a.key
        except ValueError:
            return False
    if a.__class__ is not b.__class__ or a.__class__ is bytes:
        return False
    if a.__class__ in (float, Single) and a != a:
        return b != b
    return bool(a == b)


_RELATIONAL: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
#: Kinds C# can order (with null lifted to FALSE).
ORDERED = (NUMBER, DATETIME, DATETIMEOFFSET, TIMESPAN)


def relational(op: str, a: Any, b: Any) -> bool:
    """C# ``< <= > >=``: numbers (promoted), DateTime / DateTimeOffset, TimeSpan; null vs those is FALSE."""
    ka, kb = kind_of(a), kind_of(b)
    compare = _RELATIONAL[op]
    if ka == kb == NUMBER:
        return compare(*_promoted(op, a, b))
    if ka in INSTANTS and kb in INSTANTS:
        return compare(instant_ticks(a), instant_ticks(b))
    if ka == kb == TIMESPAN:
        return compare(a.ticks, b.ticks)
    if ka == NULL or kb == NULL:
        other = kb if ka == NULL else ka
        if other == NULL or other in ORDERED:
            return False
    raise _mismatch(op, a, b)


def compare(op: str, a: Any, b: Any) -> bool:
    """Any comparison operator on two present values."""
    if op == "=":
        return equals(a, b)
    if op == "<>":
        return not equals(a, b)
    return relational(op, a, b)
