"""Execute SQL rule actions (SET / REMOVE) on a copy of a message.

Statements run in order on the same copy. ``SET user.p = v`` stores UNKNOWN as null; when ``p``
already holds a non-null value, ``v`` is converted to that value's .NET type the way the broker's
engine does (docs/sql-language.md §6: ``Convert.ChangeType`` with the invariant culture, strings
parsed into Guid, Uri, DateTimeOffset and TimeSpan, null refused by value types) and the key keeps
the spelling it had. ``SET sys.P`` converts to P's type; ``REMOVE sys.P`` fails when executed.
Failures raise :class:`SqlEvalError`.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import uuid
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Callable

from reconciler.model import SYSTEM_PROPERTIES, Message, TypedValue, TypedValueError, ValueType
from reconciler.names import name_key
from reconciler.sql import ast, values
from reconciler.sql.errors import SqlEvalError
from reconciler.sql.evaluator import MessageView, compile_expr
from reconciler.sql.values import MISSING, NUMERIC_TAGS, Char, DateTimeOffset, Single, TimeSpan, Uri
from reconciler.typed_values import (
    INTEGER_RANGES,
    TICKS_PER_SECOND,
    dotnet_decimal,
    int_to_float32,
    parse_datetimeoffset,
    to_float32,
)

_INTEGER_TEXT = re.compile(r"\s*([+-]?[0-9]+)\s*\Z")
_DOUBLE_TEXT = re.compile(r"\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*\Z")
_DECIMAL_TEXT = re.compile(r"\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))\s*\Z")
_DOUBLE_SYMBOLS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
_TIMESPAN_TEXT = re.compile(r"\s*(-)?(?:(\d+)\.)?(\d+):(\d+)(?::(\d+)(?:\.(\d{1,7}))?)?\s*\Z")
_TIMESPAN_DAYS = re.compile(r"\s*(-)?(\d+)\s*\Z")

#: Run-time class of an existing value → the type SET converts to (a symbol is a string by now).
_TYPE_OF_CLASS: dict[type, ValueType] = {
    **{cls: ValueType(tag) for cls, tag in NUMERIC_TAGS.items()},
    str: ValueType.STRING,
    bool: ValueType.BOOL,
    uuid.UUID: ValueType.UUID,
    _dt.datetime: ValueType.TIMESTAMP,
    DateTimeOffset: ValueType.DATETIMEOFFSET,
    TimeSpan: ValueType.TIMESPAN,
    Uri: ValueType.URI,
    bytes: ValueType.BINARY,
}
#: Types whose .NET values are references: null is stored into them, value types refuse it.
_NULLABLE = frozenset({ValueType.STRING, ValueType.URI, ValueType.BINARY})


class _State:
    """The message copy being modified: typed properties plus the view expressions read."""

    __slots__ = ("sys", "user", "view")

    def __init__(self, message: Message, view: MessageView | None = None):
        self.sys = dict(message.sys)
        self.user = dict(message.user)
        self.view = MessageView.from_message(message) if view is None else MessageView(dict(view.sys), dict(view.user))

    def user_key(self, name: str) -> str | None:
        wanted = name_key(name)
        for key in self.user:
            if len(key) == len(wanted) and name_key(key) == wanted:  # a key is as long as its name
                return key
        return None


Statement = Callable[[_State], None]


class CompiledAction:
    """An action compiled once; ``apply`` returns the modified copy of a message."""

    __slots__ = ("_statements", "node")

    def __init__(self, node: ast.Action):
        self.node = node
        self._statements = [_compile_statement(s) for s in node.statements]

    def apply(self, message: Message, view: MessageView | None = None) -> Message:
        """``view``: the message's view, when the caller has made it (copied, not changed)."""
        state = _State(message, view)
        for statement in self._statements:
            statement(state)
        return Message(sys=state.sys, user=state.user, body=message.body)


def _compile_statement(node: ast.Set | ast.Remove) -> Statement:
    prop = node.prop
    if isinstance(node, ast.Remove):
        if prop.scope == "sys":
            def remove_system(state: _State) -> None:
                raise SqlEvalError(f"REMOVE sys.{prop.name}: system properties cannot be removed")

            return remove_system

        def remove_user(state: _State) -> None:
            key = state.user_key(prop.name)
            if key is not None:
                del state.user[key]
                state.view.user.pop(name_key(key), None)

        return remove_user
    expr = compile_expr(node.value)
    if prop.scope == "sys":
        target = SYSTEM_PROPERTIES[prop.name]

        def set_system(state: _State) -> None:
            value = expr(state.view)
            if value is MISSING or value is None:
                state.sys.pop(prop.name, None)
                state.view.sys.pop(prop.name, None)
                return
            converted = _convert_system(prop.name, value, target)
            state.sys[prop.name] = values.to_typed(converted)
            state.view.sys[prop.name] = converted

        return set_system

    def set_user(state: _State) -> None:
        value = expr(state.view)
        if value is MISSING:
            value = None
        key = state.user_key(prop.name)
        if key is not None:
            existing = state.view.user.get(name_key(key))
            if existing is not None:
                target = _TYPE_OF_CLASS[existing.__class__]
                if value is not None:
                    value = convert(value, target, f"property {key}")
                elif target not in _NULLABLE:
                    raise SqlEvalError(f"cannot store null in property {key}, which holds a {values.describe(existing)}")
            del state.user[key]
        else:
            key = prop.name
        state.user[key] = values.to_typed(value)
        state.view.user[name_key(key)] = values.from_typed(state.user[key])

    return set_user


def _convert_system(name: str, value: Any, target: ValueType) -> Any:
    if name == "TimeToLive":
        return _to_time_to_live(value)
    return convert(value, target, f"sys.{name}")


def _to_time_to_live(value: Any) -> float:
    """sys.TimeToLive is a TimeSpan (kept as seconds): strings are parsed like TimeSpan.Parse."""
    if value.__class__ is not TimeSpan:
        value = _to_timespan(value)
    if value is None:
        raise SqlEvalError(f"cannot convert {values.describe(value)} to the TimeSpan sys.TimeToLive (write '00:10:00')")
    return value.ticks / TICKS_PER_SECOND


def convert(value: Any, target: ValueType, what: str) -> Any:
    """``Convert.ChangeType(value, target, InvariantCulture)``, with the engine's own string parsing
    for Guid, Uri, DateTimeOffset and TimeSpan; the run-time value of the result."""
    try:
        converted = _CONVERTERS[target](value)
    except (ValueError, TypedValueError, OverflowError, ArithmeticError):
        converted = None
    if converted is None:
        raise SqlEvalError(f"cannot convert {values.describe(value)} to the {target.value} type of {what}")
    return converted


def _integer_of(value: Any) -> int | None:
    """The integer ``Convert.ToInt64`` and its siblings start from: doubles and decimals round half to even."""
    cls = value.__class__
    if cls is bool:
        return int(value)
    if cls is float or cls is Single:
        return round(value) if math.isfinite(value) else None
    if cls is Decimal:
        return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))
    if cls in NUMERIC_TAGS:
        return int(value)
    if cls is str:
        match = _INTEGER_TEXT.match(value)
        return int(match.group(1)) if match else None
    return None


def _integer(target: ValueType) -> Callable[[Any], Any]:
    low, high = INTEGER_RANGES[target]
    tag = target.value

    def to_integer(value: Any) -> Any:
        result = _integer_of(value)
        if result is None or not low <= result <= high:
            return None
        return values.from_typed(TypedValue(ValueType(tag), result))

    return to_integer


def _to_char(value: Any) -> Char | None:
    cls = value.__class__
    if cls is str:
        return Char(ord(value)) if len(value) == 1 else None
    if cls in NUMERIC_TAGS and cls not in (float, Single, Decimal):
        return Char(int(value)) if 0 <= int(value) <= 0xFFFF else None
    return None


def _double_of(value: Any) -> float | None:
    cls = value.__class__
    if cls is Char:
        return None  # Convert.ToDouble(char) is an InvalidCastException
    if cls is bool or cls in NUMERIC_TAGS:
        return float(value)
    if cls is str:
        text = value.strip()
        if text in _DOUBLE_SYMBOLS:
            return _DOUBLE_SYMBOLS[text]
        match = _DOUBLE_TEXT.match(value)
        return float(match.group(1)) if match else None
    return None


def _to_double(value: Any) -> float | None:
    return _double_of(value)


def _to_single(value: Any) -> Single | None:
    cls = value.__class__
    if cls in NUMERIC_TAGS and cls not in (float, Single, Decimal, Char):
        return Single(int_to_float32(int(value)))
    result = _double_of(value)
    return None if result is None else Single(to_float32(result))


def _to_decimal(value: Any) -> Decimal | None:
    """Doubles keep 15 significant digits and floats 7, as ``Convert.ToDecimal`` rounds them."""
    cls = value.__class__
    if cls is Decimal:
        return value
    if cls is bool:
        return Decimal(int(value))
    if cls is float or cls is Single:
        if not math.isfinite(value):
            return None
        return dotnet_decimal(Decimal(f"{value:.{7 if cls is Single else 15}g}"))
    if cls in NUMERIC_TAGS and cls is not Char:
        return Decimal(int(value))
    if cls is str:
        match = _DECIMAL_TEXT.match(value)
        return dotnet_decimal(Decimal(match.group(1))) if match else None
    return None


def _to_bool(value: Any) -> bool | None:
    cls = value.__class__
    if cls is bool:
        return value
    if cls in NUMERIC_TAGS and cls is not Char:
        return value != 0
    if cls is str:
        return {"true": True, "false": False}.get(value.strip().lower())
    return None


def _to_uuid(value: Any) -> uuid.UUID | None:
    if value.__class__ is uuid.UUID:
        return value
    if value.__class__ is str:
        return uuid.UUID(value.strip())
    return None


def _to_timestamp(value: Any) -> _dt.datetime | None:
    if value.__class__ is _dt.datetime:
        return value
    if value.__class__ is str:
        return TypedValue(ValueType.TIMESTAMP, value.strip()).value
    return None


def _to_datetimeoffset(value: Any) -> DateTimeOffset | None:
    if value.__class__ is DateTimeOffset:
        return value
    if value.__class__ is str:
        return DateTimeOffset(parse_datetimeoffset(value))
    return None


def _to_timespan(value: Any) -> TimeSpan | None:
    """``TimeSpan.Parse`` with the invariant culture: ``[-][d.]hh:mm[:ss[.fffffff]]`` or whole days
    (an ISO 8601 duration such as ``PT5M`` is a FormatException there)."""
    if value.__class__ is TimeSpan:
        return value
    if value.__class__ is not str:
        return None
    days_only = _TIMESPAN_DAYS.match(value)
    if days_only:
        sign, days = days_only.groups()
        ticks = int(days) * 86_400 * TICKS_PER_SECOND
        return TimeSpan(-ticks if sign else ticks)
    match = _TIMESPAN_TEXT.match(value)
    if match is None:
        return None
    sign, days, hours, minutes, seconds, fraction = match.groups()
    if int(hours) > 23 or int(minutes) > 59 or int(seconds or 0) > 59:
        return None
    total = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + int(seconds or 0)
    ticks = total * TICKS_PER_SECOND + int((fraction or "0").ljust(7, "0"))
    return TimeSpan(-ticks if sign else ticks)


def _to_uri(value: Any) -> Uri | None:
    if value.__class__ is Uri:
        return value
    if value.__class__ is str:
        return Uri(TypedValue(ValueType.URI, value).value)  # a relative Uri could not be sent on
    return None


def _to_binary(value: Any) -> bytes | None:
    return value if value.__class__ is bytes else None


_CONVERTERS: dict[ValueType, Callable[[Any], Any]] = {
    **{vtype: _integer(vtype) for vtype in INTEGER_RANGES},
    ValueType.STRING: values.to_string,
    ValueType.SYMBOL: values.to_string,
    ValueType.CHAR: _to_char,
    ValueType.FLOAT: _to_single,
    ValueType.DOUBLE: _to_double,
    ValueType.DECIMAL: _to_decimal,
    ValueType.BOOL: _to_bool,
    ValueType.UUID: _to_uuid,
    ValueType.TIMESTAMP: _to_timestamp,
    ValueType.DATETIMEOFFSET: _to_datetimeoffset,
    ValueType.TIMESPAN: _to_timespan,
    ValueType.URI: _to_uri,
    ValueType.BINARY: _to_binary,
}
