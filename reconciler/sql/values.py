"""Run-time values and the C#-flavoured operators the broker's filter engine applies to them.

Values at run time are plain Python objects: ``None`` (null), ``bool``, ``str``, ``int`` (Int64),
:class:`Int32`, ``float`` (Double), ``uuid.UUID`` (Guid), ``datetime`` (DateTime) and ``timedelta``
(TimeSpan), plus the :data:`MISSING` sentinel for an absent user property (UNKNOWN / DBNull).
The rules follow ``docs/sql-language.md`` §5: C# operator binding on runtime types, C# null
semantics, checked Int64/Int32 arithmetic, truncating division, type mismatch = evaluation error.
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

from reconciler.limits import SQL_STRING_RESULT, dotnet_length
from reconciler.model import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, TypedValue, ValueType
from reconciler.sql.errors import SqlEvalError


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


class Int32(int):
    """An integer the publisher sent as a 32-bit int (Int32 op Int32 stays Int32, checked)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Int32({int(self)})"


# Kinds of runtime values (C# operator families).
NULL, BOOL, STRING, NUMBER, GUID, DATETIME, TIMESPAN = "null", "bool", "string", "number", "Guid", "DateTime", "TimeSpan"
KIND: dict[type, str] = {
    type(None): NULL,
    bool: BOOL,
    str: STRING,
    int: NUMBER,
    Int32: NUMBER,
    float: NUMBER,
    uuid.UUID: GUID,
    _dt.datetime: DATETIME,
    _dt.timedelta: TIMESPAN,
}


def kind_of(value: Any) -> str:
    kind = KIND.get(value.__class__)
    if kind is None:
        raise SqlEvalError(f"unsupported value {value!r}")
    return kind


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
    if cls is Int32:
        return f"Int32 {int(value)}"
    if cls is int:
        return f"Int64 {value}"
    if cls is float:
        return f"Double {to_string(value)}"
    return f"{kind_of(value)} {to_string(value)}"


def from_typed(tv: TypedValue) -> Any:
    """The runtime value of a model TypedValue."""
    if tv.type is ValueType.INT:
        return Int32(tv.value)
    return tv.value


def to_typed(value: Any) -> TypedValue:
    """The model TypedValue of a runtime value (TimeSpan is stored as Double seconds)."""
    cls = value.__class__
    if value is MISSING or value is None:
        return TypedValue(ValueType.NULL)
    if cls is Int32:
        return TypedValue(ValueType.INT, int(value))
    if cls is _dt.timedelta:
        return TypedValue(ValueType.DOUBLE, value.total_seconds())
    return TypedValue.infer(value)


# ---------------------------------------------------------------------------------------------
# .NET formatting (Convert.ToString with the invariant culture)
# ---------------------------------------------------------------------------------------------


def format_double(value: float) -> str:
    """.NET Core ``double.ToString()``: shortest round-trip digits, exponent form outside 1e-5..1e15."""
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, figures, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int), "finite: NaN and the infinities were handled above"
    digits = list(figures)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exponent += 1
    scientific = len(digits) - 1 + exponent
    text = "".join(map(str, digits))
    prefix = "-" if sign else ""
    if -5 < scientific < 15:
        if exponent >= 0:
            return prefix + text + "0" * exponent
        point = len(text) + exponent
        if point > 0:
            return prefix + text[:point] + "." + text[point:]
        return prefix + "0." + "0" * (-point) + text
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{prefix}{mantissa}E{'+' if scientific >= 0 else '-'}{abs(scientific):02d}"


def _format_timespan(value: _dt.timedelta) -> str:
    total = round(value.total_seconds() * 10_000_000)
    sign = "-" if total < 0 else ""
    total = abs(total)
    ticks = total % 10_000_000
    seconds = total // 10_000_000
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = f"{sign}{f'{days}.' if days else ''}{hours:02d}:{minutes:02d}:{seconds:02d}"
    return text + (f".{ticks:07d}" if ticks else "")


def to_string(value: Any) -> str:
    """``Convert.ToString(value, InvariantCulture)``: null is the empty string, TRUE is ``True``."""
    cls = value.__class__
    if cls is str:
        return value
    if value is None:
        return ""
    if cls is bool:
        return "True" if value else "False"
    if cls is int or cls is Int32:
        return str(int(value))
    if cls is float:
        return format_double(value)
    if cls is _dt.datetime:
        return value.strftime("%m/%d/%Y %H:%M:%S")
    if cls is _dt.timedelta:
        return _format_timespan(value)
    if cls is uuid.UUID:
        return str(value)
    raise SqlEvalError(f"cannot convert {value!r} to a string")


# ---------------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------------


def _mismatch(op: str, a: Any, b: Any) -> SqlEvalError:
    return SqlEvalError(f"operator {op} is not defined for {describe(a)} and {describe(b)}")


def equals(a: Any, b: Any) -> bool:
    """C# ``==`` on runtime types (neither side missing): null == null, numeric promotion."""
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb:
        if ka == NUMBER and (a.__class__ is float or b.__class__ is float):
            return float(a) == float(b)
        return a == b
    if ka == NULL or kb == NULL:
        return False
    raise _mismatch("=", a, b)


_RELATIONAL: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def relational(op: str, a: Any, b: Any) -> bool:
    """C# ``< <= > >=``: numbers (promoted), DateTime, TimeSpan; null vs those is FALSE."""
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb and ka in (NUMBER, DATETIME, TIMESPAN):
        if ka == NUMBER and (a.__class__ is float or b.__class__ is float):
            return _RELATIONAL[op](float(a), float(b))
        return _RELATIONAL[op](a, b)
    if ka == NULL or kb == NULL:
        other = kb if ka == NULL else ka
        if other in (NULL, NUMBER, DATETIME, TIMESPAN):
            return False
    raise _mismatch(op, a, b)


def compare(op: str, a: Any, b: Any) -> bool:
    """Any comparison operator on two present values."""
    if op == "=":
        return equals(a, b)
    if op == "<>":
        return not equals(a, b)
    return relational(op, a, b)


# ---------------------------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------------------------


def _integer(result: int, a: Any, b: Any, op: str) -> int:
    if a.__class__ is Int32 and b.__class__ is Int32:
        if not INT32_MIN <= result <= INT32_MAX:
            raise SqlEvalError(f"Int32 overflow in {int(a)} {op} {int(b)}")
        return Int32(result)
    if not INT64_MIN <= result <= INT64_MAX:
        raise SqlEvalError(f"Int64 overflow in {int(a)} {op} {int(b)}")
    return result


def _null_arith(op: str, a: Any, b: Any) -> None:
    """null op (number | DateTime | TimeSpan) is null (lifted operator); other null mixes fail."""
    other = kind_of(b) if a is None else kind_of(a)
    if other in (NUMBER, DATETIME, TIMESPAN):
        return None
    raise _mismatch(op, a, b)


def add(a: Any, b: Any) -> Any:
    ca, cb = a.__class__, b.__class__
    if ca is str or cb is str:
        result = to_string(a) + to_string(b)
        if dotnet_length(result) > SQL_STRING_RESULT.value:
            raise SqlEvalError(f"string result longer than {SQL_STRING_RESULT.value} characters")
        return result
    ka, kb = kind_of(a), kind_of(b)
    if ka == NUMBER and kb == NUMBER:
        if ca is float or cb is float:
            return float(a) + float(b)
        return _integer(a + b, a, b, "+")
    if ka == NULL or kb == NULL:
        return _null_arith("+", a, b)
    if (ka, kb) in ((DATETIME, TIMESPAN), (TIMESPAN, TIMESPAN)):  # C# has no TimeSpan + DateTime
        return _date_arith(operator.add, a, b)
    raise _mismatch("+", a, b)


def subtract(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == NUMBER and kb == NUMBER:
        if a.__class__ is float or b.__class__ is float:
            return float(a) - float(b)
        return _integer(a - b, a, b, "-")
    if ka == NULL or kb == NULL:
        return _null_arith("-", a, b)
    if (ka, kb) in ((DATETIME, TIMESPAN), (DATETIME, DATETIME), (TIMESPAN, TIMESPAN)):
        return _date_arith(operator.sub, a, b)
    raise _mismatch("-", a, b)


def _date_arith(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    try:
        return fn(a, b)
    except OverflowError:
        raise SqlEvalError("DateTime/TimeSpan arithmetic out of range") from None


def multiply(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == NUMBER and kb == NUMBER:
        if a.__class__ is float or b.__class__ is float:
            return float(a) * float(b)
        return _integer(a * b, a, b, "*")
    if ka == NULL or kb == NULL:
        return _null_number("*", a, b)
    raise _mismatch("*", a, b)


def _null_number(op: str, a: Any, b: Any) -> None:
    other = kind_of(b) if a is None else kind_of(a)
    if other == NUMBER:
        return None
    raise _mismatch(op, a, b)


def divide(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == NUMBER and kb == NUMBER:
        if a.__class__ is float or b.__class__ is float:
            x, y = float(a), float(b)
            if y == 0:
                if x == 0 or x != x:
                    return math.nan
                return math.copysign(math.inf, x) * math.copysign(1.0, y)
            return x / y
        if b == 0:
            raise SqlEvalError("integer division by zero")
        quotient = abs(a) // abs(b)
        return _integer(-quotient if (a < 0) != (b < 0) else quotient, a, b, "/")
    if ka == NULL or kb == NULL:
        return _null_number("/", a, b)
    raise _mismatch("/", a, b)


def remainder(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == NUMBER and kb == NUMBER:
        if a.__class__ is float or b.__class__ is float:
            x, y = float(a), float(b)
            if y == 0 or math.isinf(x) or x != x or y != y:
                return math.nan
            return math.fmod(x, y)
        if b == 0:
            raise SqlEvalError("integer remainder by zero")
        if b == -1:
            # C#: MinValue % -1 throws like MinValue / -1; every other x % -1 is 0.
            _integer(-a, a, b, "%")
            return Int32(0) if a.__class__ is Int32 and b.__class__ is Int32 else 0
        result = abs(a) % abs(b)
        return _integer(-result if a < 0 else result, a, b, "%")
    if ka == NULL or kb == NULL:
        return _null_number("%", a, b)
    raise _mismatch("%", a, b)


def negate(a: Any) -> Any:
    cls = a.__class__
    if cls is int:
        if a == INT64_MIN:
            raise SqlEvalError(f"Int64 overflow in -({a})")
        return -a
    if cls is float:
        return -a
    if cls is Int32:
        if a == INT32_MIN:
            raise SqlEvalError(f"Int32 overflow in -({int(a)})")
        return Int32(-a)
    if cls is _dt.timedelta:
        return -a
    raise SqlEvalError(f"unary - is not defined for {describe(a)}")


ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": add,
    "-": subtract,
    "*": multiply,
    "/": divide,
    "%": remainder,
}


# ---------------------------------------------------------------------------------------------
# LIKE
# ---------------------------------------------------------------------------------------------


def utf16_units(text: str) -> str:
    """``text`` with astral characters split into surrogate pairs (one char per UTF-16 unit)."""
    if text.isascii() or max(text) <= "\uffff":
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if code > 0xFFFF:
            code -= 0x10000
            out.append(chr(0xD800 + (code >> 10)))
            out.append(chr(0xDC00 + (code & 0x3FF)))
        else:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def like_regex(pattern: str, escape: str) -> re.Pattern[str]:
    """The .NET regex the reference engine builds for LIKE (``%``/``_`` wildcards, optional escape)."""
    escape_char = escape[0] if escape else None
    parts = []
    escaping = False
    for ch in utf16_units(pattern):
        if not escaping and ch == escape_char:
            escaping = True
            continue
        if not escaping and ch == "%":
            parts.append(".*")
        elif not escaping and ch == "_":
            parts.append(".")
        else:
            parts.append(re.escape(ch))
        escaping = False
    return re.compile("".join(parts) + "$")


def like(value: Any, pattern: Any, escape: Any) -> bool:
    """LIKE on present values: every operand is converted with Convert.ToString first."""
    regex = like_regex(to_string(pattern), "" if escape is None else to_string(escape))
    return regex.match(utf16_units(to_string(value))) is not None
