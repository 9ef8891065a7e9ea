"""Execute SQL rule actions (SET / REMOVE) on a copy of a message.

Statements run in order on the same copy. ``SET user.p = v`` stores UNKNOWN as null and converts
``v`` to the type of an existing non-null ``p`` (``Convert.ChangeType`` with the invariant
culture: double to integer rounds half to even, strings are parsed); ``SET sys.P`` converts to
P's type; ``REMOVE sys.P`` fails when executed. Failures raise :class:`SqlEvalError`.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import uuid
from typing import Any, Callable

from reconciler.model import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    SYSTEM_PROPERTIES,
    Message,
    TypedValue,
    TypedValueError,
    ValueType,
)
from reconciler.sql import ast, values
from reconciler.sql.errors import SqlEvalError
from reconciler.sql.evaluator import MessageView, compile_expr
from reconciler.sql.values import MISSING, Int32

_INTEGER_TEXT = re.compile(r"\s*([+-]?[0-9]+)\s*\Z")
_DOUBLE_TEXT = re.compile(r"\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*\Z")
_DOUBLE_SYMBOLS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
_TIMESPAN_TEXT = re.compile(r"\s*(-)?(?:(\d+)\.)?(\d+):(\d+)(?::(\d+)(?:\.(\d{1,7}))?)?\s*\Z")

_TYPE_OF_CLASS = {
    Int32: ValueType.INT,
    int: ValueType.LONG,
    float: ValueType.DOUBLE,
    str: ValueType.STRING,
    bool: ValueType.BOOL,
    uuid.UUID: ValueType.UUID,
    _dt.datetime: ValueType.TIMESTAMP,
}


class _State:
    """The message copy being modified: typed properties plus the view expressions read."""

    __slots__ = ("sys", "user", "view")

    def __init__(self, message: Message):
        self.sys = dict(message.sys)
        self.user = dict(message.user)
        self.view = MessageView.from_message(message)

    def user_key(self, name: str) -> str | None:
        lowered = name.lower()
        for key in self.user:
            if key.lower() == lowered:
                return key
        return None


Statement = Callable[[_State], None]


class CompiledAction:
    """An action compiled once; ``apply`` returns the modified copy of a message."""

    __slots__ = ("_statements", "node")

    def __init__(self, node: ast.Action):
        self.node = node
        self._statements = [_compile_statement(s) for s in node.statements]

    def apply(self, message: Message) -> Message:
        state = _State(message)
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
                state.view.user.pop(key.lower(), None)

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
            existing = state.view.user.get(key.lower())
            if existing is not None and value is not None and existing.__class__ is not value.__class__:
                target = _TYPE_OF_CLASS.get(existing.__class__)
                if target is not None:
                    value = convert(value, target, f"property {key}")
            del state.user[key]
        else:
            key = prop.name
        state.user[key] = values.to_typed(value)
        state.view.user[key.lower()] = values.from_typed(state.user[key])

    return set_user


def _convert_system(name: str, value: Any, target: ValueType) -> Any:
    if name == "TimeToLive":
        return _to_time_to_live(value)
    return convert(value, target, f"sys.{name}")


def _to_time_to_live(value: Any) -> float:
    """sys.TimeToLive is a TimeSpan (kept as seconds): strings are parsed like TimeSpan.Parse."""
    if value.__class__ is _dt.timedelta:
        return value.total_seconds()
    if value.__class__ is str:
        match = _TIMESPAN_TEXT.match(value)
        if match:
            sign, days, hours, minutes, seconds, fraction = match.groups()
            total: float = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + int(seconds or 0)
            total += int((fraction or "0").ljust(7, "0")) / 10_000_000
            return -total if sign else total
    raise SqlEvalError(f"cannot convert {values.describe(value)} to the TimeSpan sys.TimeToLive (write '00:10:00')")


def convert(value: Any, target: ValueType, what: str) -> Any:
    """``Convert.ChangeType(value, target, InvariantCulture)`` for the types sbrules models."""
    try:
        converted = _CONVERTERS[target](value)
    except (ValueError, TypedValueError, OverflowError):
        converted = None
    if converted is None:
        raise SqlEvalError(f"cannot convert {values.describe(value)} to the {target.value} type of {what}")
    return converted


def _to_integer(value: Any, low: int, high: int) -> int | None:
    cls = value.__class__
    if cls is bool or cls is int or cls is Int32:
        result = int(value)
    elif cls is float:
        if not math.isfinite(value):
            return None
        result = round(value)  # banker's rounding, like Convert.ToInt64(double)
    elif cls is str:
        match = _INTEGER_TEXT.match(value)
        if match is None:
            return None
        result = int(match.group(1))
    else:
        return None
    return result if low <= result <= high else None


def _to_long(value: Any) -> int | None:
    return _to_integer(value, INT64_MIN, INT64_MAX)


def _to_int(value: Any) -> Int32 | None:
    result = _to_integer(value, INT32_MIN, INT32_MAX)
    return None if result is None else Int32(result)


def _to_double(value: Any) -> float | None:
    cls = value.__class__
    if cls is bool or cls is int or cls is Int32 or cls is float:
        return float(value)
    if cls is str:
        text = value.strip()
        if text in _DOUBLE_SYMBOLS:
            return _DOUBLE_SYMBOLS[text]
        match = _DOUBLE_TEXT.match(value)
        return float(match.group(1)) if match else None
    return None


def _to_bool(value: Any) -> bool | None:
    cls = value.__class__
    if cls is bool:
        return value
    if cls is int or cls is Int32 or cls is float:
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


_CONVERTERS: dict[ValueType, Callable[[Any], Any]] = {
    ValueType.STRING: values.to_string,
    ValueType.LONG: _to_long,
    ValueType.INT: _to_int,
    ValueType.DOUBLE: _to_double,
    ValueType.BOOL: _to_bool,
    ValueType.UUID: _to_uuid,
    ValueType.TIMESTAMP: _to_timestamp,
}
