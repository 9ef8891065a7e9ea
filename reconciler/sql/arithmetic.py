"""Arithmetic on run-time values as C# binds it: checked integers, IEEE binary floats, .NET decimal,
and date/time with time spans (the operators of a filter's expressions and an action's SET)."""


from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import math
import operator
from decimal import Decimal
from typing import Any, Callable

from reconciler.limits import SQL_STRING_RESULT, dotnet_length
from reconciler.scalars import DECIMAL_MAX_COEFFICIENT, DECIMAL_MAX_SCALE
from reconciler.sql.errors import SqlEvalError
from reconciler.sql.values import (
    _RESULT_CLASS,
    DATETIME,
    DATETIMEOFFSET,
    INSTANTS,
    NEGATION,
    NULL,
    NUMBER,
    NUMERIC_TAGS,
    ORDERED,
    TIMESPAN,
    DateTimeOffset,
    Single,
    TimeSpan,
    _mismatch,
    as_number,
    describe,
    instant_ticks,
    kind_of,
    promote,
    to_string,
)
from reconciler.typed_values import DATETIMEOFFSET_MAX_TICKS, INTEGER_RANGES, TICKS_PER_MICROSECOND, ValueType, to_float32

_RESULT_RANGES = {
    "int": INTEGER_RANGES[ValueType.INT], "uint": INTEGER_RANGES[ValueType.UINT],
    "long": INTEGER_RANGES[ValueType.LONG], "ulong": INTEGER_RANGES[ValueType.ULONG],
}
_TYPE_NAMES = {"int": "Int32", "uint": "UInt32", "long": "Int64", "ulong": "UInt64"}


def _integer(result: int, target: str, a: Any, b: Any, op: str) -> Any:
    low, high = _RESULT_RANGES[target]
    if not low <= result <= high:
        raise SqlEvalError(f"{_TYPE_NAMES[target]} overflow in {int(a)} {op} {int(b)}")
    return _RESULT_CLASS[target](result)


def _binary_float(result: float, target: str) -> float:
    return Single(to_float32(result)) if target == "float" else result


def _null_arith(op: str, a: Any, b: Any, lifted: tuple[str, ...]) -> None:
    """null op (a type with a lifted operator) is null; other null mixes fail."""
    other = kind_of(b) if a is None else kind_of(a)
    if other in lifted:
        return None
    raise _mismatch(op, a, b)


def _arithmetic(op: str, a: Any, b: Any, integer: Callable[[int, int], int], real: Callable[[float, float], float],
                dec: Callable[[Decimal, Decimal], Decimal]) -> Any:
    """A binary numeric operator in the promoted type: checked integers, binary32 rounding for float."""
    target = promote(NUMERIC_TAGS[a.__class__], NUMERIC_TAGS[b.__class__])
    if target is None:
        raise _mismatch(op, a, b)
    x, y = as_number(a, target), as_number(b, target)
    if target == "decimal":
        return dec(x, y)
    if target in ("float", "double"):
        return _binary_float(real(float(x), float(y)), target)
    return _integer(integer(x, y), target, a, b, op)


def add(a: Any, b: Any) -> Any:
    ca, cb = a.__class__, b.__class__
    if ca is str or cb is str:
        result = to_string(a) + to_string(b)
        if dotnet_length(result) > SQL_STRING_RESULT.value:
            raise SqlEvalError(f"string result longer than {SQL_STRING_RESULT.value} characters")
        return result
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb == NUMBER:
        return _arithmetic("+", a, b, operator.add, operator.add, decimal_add)
    if ka == NULL or kb == NULL:
        return _null_arith("+", a, b, ORDERED)
    if kb == TIMESPAN:  # C# has no TimeSpan + DateTime: the TimeSpan must be on the right
        if ka == DATETIME:
            return _datetime_plus(a, b.ticks, "+")
        if ka == DATETIMEOFFSET:
            return _datetimeoffset(a.ticks + b.ticks)
        if ka == TIMESPAN:
            return _timespan(a.ticks + b.ticks)
    raise _mismatch("+", a, b)


def subtract(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb == NUMBER:
        return _arithmetic("-", a, b, operator.sub, operator.sub, decimal_subtract)
    if ka == NULL or kb == NULL:
        return _null_arith("-", a, b, ORDERED)
    if ka in INSTANTS and kb in INSTANTS:
        if ka == kb == DATETIME:
            return TimeSpan(int((a - b) / _dt.timedelta(microseconds=1)) * TICKS_PER_MICROSECOND)
        return _timespan(instant_ticks(a) - instant_ticks(b))
    if kb == TIMESPAN:
        if ka == DATETIME:
            return _datetime_plus(a, -b.ticks, "-")
        if ka == DATETIMEOFFSET:
            return _datetimeoffset(a.ticks - b.ticks)
        if ka == TIMESPAN:
            return _timespan(a.ticks - b.ticks)
    raise _mismatch("-", a, b)


def _datetime_plus(moment: _dt.datetime, ticks: int, op: str) -> _dt.datetime:
    """DateTime ± TimeSpan; DateTime has microseconds here, so sub-microsecond ticks are truncated."""
    try:
        return moment + _dt.timedelta(microseconds=int(ticks / TICKS_PER_MICROSECOND))
    except OverflowError:
        raise SqlEvalError(f"DateTime {op} TimeSpan is outside DateTime's range") from None


def _datetimeoffset(ticks: int) -> DateTimeOffset:
    if not 0 <= ticks <= DATETIMEOFFSET_MAX_TICKS:
        raise SqlEvalError("DateTimeOffset arithmetic outside DateTimeOffset's range")
    return DateTimeOffset(ticks)


def _timespan(ticks: int) -> TimeSpan:
    low, high = INTEGER_RANGES[ValueType.LONG]
    if not low <= ticks <= high:
        raise SqlEvalError("TimeSpan overflow")
    return TimeSpan(ticks)


def multiply(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb == NUMBER:
        return _arithmetic("*", a, b, operator.mul, operator.mul, decimal_multiply)
    if ka == NULL or kb == NULL:
        return _null_arith("*", a, b, (NUMBER,))
    raise _mismatch("*", a, b)


def _ieee_divide(x: float, y: float) -> float:
    if y == 0:
        if x == 0 or x != x:
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def _ieee_remainder(x: float, y: float) -> float:
    if y == 0 or math.isinf(x) or x != x or y != y:
        return math.nan
    return math.fmod(x, y)


def _truncating_divide(x: int, y: int) -> int:
    if y == 0:
        raise SqlEvalError("integer division by zero")
    quotient = abs(x) // abs(y)
    return -quotient if (x < 0) != (y < 0) else quotient


def _truncating_remainder(x: int, y: int) -> int:
    if y == 0:
        raise SqlEvalError("integer remainder by zero")
    result = abs(x) % abs(y)
    return -result if x < 0 else result


def divide(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb == NUMBER:
        return _arithmetic("/", a, b, _truncating_divide, _ieee_divide, decimal_divide)
    if ka == NULL or kb == NULL:
        return _null_arith("/", a, b, (NUMBER,))
    raise _mismatch("/", a, b)


def remainder(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb == NUMBER:
        target = promote(NUMERIC_TAGS[a.__class__], NUMERIC_TAGS[b.__class__])
        if target in ("int", "long") and int(b) == -1:
            # C#: MinValue % -1 throws like MinValue / -1; every other x % -1 is 0.
            _integer(-int(a), target, a, b, "%")
            return _RESULT_CLASS[target](0)
        return _arithmetic("%", a, b, _truncating_remainder, _ieee_remainder, decimal_remainder)
    if ka == NULL or kb == NULL:
        return _null_arith("%", a, b, (NUMBER,))
    raise _mismatch("%", a, b)


def negate(a: Any) -> Any:
    cls = a.__class__
    tag = NUMERIC_TAGS.get(cls)
    if tag is not None:
        target = NEGATION[tag]
        if target is None:
            raise SqlEvalError(f"unary - is not defined for {describe(a)}")
        if target == "decimal":
            return -a if a else a.copy_abs()
        if target in ("float", "double"):
            return _binary_float(-float(a), target)
        result = -int(a)
        low, high = _RESULT_RANGES[target]
        if not low <= result <= high:
            raise SqlEvalError(f"{_TYPE_NAMES[target]} overflow in -({int(a)})")
        return _RESULT_CLASS[target](result)
    if cls is TimeSpan:
        return _timespan(-a.ticks)
    raise SqlEvalError(f"unary - is not defined for {describe(a)}")


ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": add,
    "-": subtract,
    "*": multiply,
    "/": divide,
    "%": remainder,
}


# ---------------------------------------------------------------------------------------------
# .NET decimal arithmetic (dotnet/runtime Decimal.DecCalc.cs: VarDecAdd, VarDecMul, VarDecDiv,
# VarDecMod): exact, then rounded half to even into 96 bits and a scale of at most 28.
# ---------------------------------------------------------------------------------------------

_EXACT = _decimal.Context(prec=200, rounding=_decimal.ROUND_HALF_EVEN, Emin=-999999, Emax=999999)
_DECIMAL_OVERFLOW = "Decimal overflow (beyond ±79228162514264337593543950335)"


def _scale(value: Decimal) -> int:
    return -int(value.as_tuple().exponent)


def _fits(value: Decimal) -> bool:
    return value.scaleb(_scale(value), _EXACT).copy_abs() <= DECIMAL_MAX_COEFFICIENT


def _fit_scale(exact: Decimal, scale: int) -> Decimal:
    """``exact`` with at most ``scale`` (≤ 28) digits after the point, fewer while the coefficient
    would not fit 96 bits, rounded once half to even; OverflowException below scale 0."""
    for target in range(min(scale, DECIMAL_MAX_SCALE), -1, -1):
        rounded = exact.quantize(Decimal(1).scaleb(-target), context=_EXACT)
        if _fits(rounded):
            return rounded.copy_abs() if rounded.is_zero() else rounded
    raise SqlEvalError(_DECIMAL_OVERFLOW)


def decimal_add(a: Decimal, b: Decimal) -> Decimal:
    exact = _EXACT.add(a, b)
    return _fit_scale(exact, _scale(exact))


def decimal_subtract(a: Decimal, b: Decimal) -> Decimal:
    exact = _EXACT.subtract(a, b)
    return _fit_scale(exact, _scale(exact))


def decimal_multiply(a: Decimal, b: Decimal) -> Decimal:
    """A product whose scale exceeds 28 + 19 is zero outright (scale 0), as VarDecMul returns it."""
    exact = _EXACT.multiply(a, b)
    if _scale(exact) > DECIMAL_MAX_SCALE + 19:
        return Decimal(0)
    return _fit_scale(exact, _scale(exact))


def decimal_divide(a: Decimal, b: Decimal) -> Decimal:
    """The scale is the dividend's minus the divisor's when the quotient is exact there (at least
    0); otherwise as many digits as fit, rounded, then trailing zeros removed."""
    if b.is_zero():
        raise SqlEvalError("decimal division by zero")
    natural = _scale(a) - _scale(b)
    exact_at_natural = _EXACT.divide(a, b)
    if exact_at_natural == exact_at_natural.quantize(Decimal(1).scaleb(-max(natural, 0)), context=_EXACT):
        result = exact_at_natural.quantize(Decimal(1).scaleb(-max(natural, 0)), context=_EXACT)
        if not _fits(result):
            raise SqlEvalError(_DECIMAL_OVERFLOW)
        return result.copy_abs() if result.is_zero() else result
    rounded = _fit_scale(exact_at_natural, DECIMAL_MAX_SCALE)
    normal = rounded.normalize(_EXACT)
    if _scale(normal) < 0:
        normal = normal.quantize(Decimal(1), context=_EXACT)
    return normal.copy_abs() if normal.is_zero() else normal


def decimal_remainder(a: Decimal, b: Decimal) -> Decimal:
    """The dividend's sign; ``a`` itself when ``|a| < |b|``; otherwise exact, at the larger scale."""
    if b.is_zero():
        raise SqlEvalError("decimal remainder by zero")
    if a.is_zero() or a.copy_abs() < b.copy_abs():
        return a
    result = _EXACT.remainder(a, b)
    result = result.quantize(Decimal(1).scaleb(-max(_scale(a), _scale(b))), context=_EXACT)
    return result.copy_abs() if result.is_zero() else result


