"""Model ⇄ AMQP values for the `$management` node: the one place that knows the shapes of its
request and response bodies (whole messages: ``reconciler.amqp.messages``; bytes: ``wire``).

Requests (add-rule) are plain maps; enumerate-rules answers with described lists whose codes are
quoted from the SDKs in docs/protocol.md §0. The filter codes really are 0x0000001370000006..9
while the rule-description and action codes are 0x0000013700000004..6: not a typo to fix.
Typed property values cross here and only here (``to_amqp`` / ``from_amqp``), because Service Bus
compares correlation properties by type as well as value.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import proton
from proton import Described, int32, symbol, timestamp, ulong

from reconciler import model
from reconciler.amqp.wire.decimals import (
    DecimalLayoutError,
    decode_decimal32,
    decode_decimal64,
    decode_decimal128,
    encode_dotnet_decimal128,
)
from reconciler.amqp.wire.types import DESCRIBED_TYPES, TYPES, DescribedType
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.model import (
    CORRELATION_FIELDS,
    CorrelationFilter,
    FalseFilter,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    TypedValue,
    ValueType,
)

RULE_DESCRIPTION_CODE = ulong(0x0000013700000004)
EMPTY_RULE_ACTION_CODE = ulong(0x0000013700000005)
SQL_RULE_ACTION_CODE = ulong(0x0000013700000006)
SQL_FILTER_CODE = ulong(0x000001370000006)
TRUE_FILTER_CODE = ulong(0x000001370000007)
FALSE_FILTER_CODE = ulong(0x000001370000008)
CORRELATION_FILTER_CODE = ulong(0x000001370000009)

#: Symbolic names of the same descriptors (AMQP allows either form; the service sends codes).
_SYMBOLIC = {
    "com.microsoft:rule-description:list": RULE_DESCRIPTION_CODE,
    "com.microsoft:empty-rule-action:list": EMPTY_RULE_ACTION_CODE,
    "com.microsoft:sql-rule-action:list": SQL_RULE_ACTION_CODE,
    "com.microsoft:sql-filter:list": SQL_FILTER_CODE,
    "com.microsoft:true-filter:list": TRUE_FILTER_CODE,
    "com.microsoft:false-filter:list": FALSE_FILTER_CODE,
    "com.microsoft:correlation-filter:list": CORRELATION_FILTER_CODE,
}

#: The compatibility level the service reports for SQL filters and actions.
COMPATIBILITY_LEVEL = 20

#: Correlation-filter wire keys, in the model's CORRELATION_FIELDS (= wire list) order.
CORRELATION_WIRE_KEYS = (
    "correlation-id",
    "message-id",
    "to",
    "reply-to",
    "label",
    "session-id",
    "reply-to-session-id",
    "content-type",
)
_WIRE_TO_FIELD = dict(zip(CORRELATION_WIRE_KEYS, CORRELATION_FIELDS))

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MS = _dt.timedelta(milliseconds=1)


class CodecError(SbrulesError):
    """An AMQP value that does not have the shape the protocol defines (names what and where)."""

    code = ErrorCode.SERVICE


# ------------------------------------------------------------------------------------------------
# Typed values
# ------------------------------------------------------------------------------------------------


def datetime_to_timestamp(value: _dt.datetime) -> timestamp:
    """AMQP timestamp (ms since the Unix epoch, UTC); sub-millisecond digits are dropped."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return timestamp((value - _EPOCH) // _MS)


def timestamp_to_datetime(value: int) -> _dt.datetime:
    return _EPOCH + _dt.timedelta(milliseconds=int(value))


def _wire_decimal(value: Any) -> proton.decimal128:
    return proton.decimal128(encode_dotnet_decimal128(value))


def _wire_described(kind: DescribedType) -> Callable[[Any], Described]:
    return lambda value: Described(kind.descriptor, value)


#: Model value → the Python value proton's type for it takes, where the two differ.
_TO_WIRE: dict[ValueType, Callable[[Any], Any]] = {
    ValueType.TIMESTAMP: datetime_to_timestamp,
    ValueType.DECIMAL: _wire_decimal,
    ValueType.UUID: lambda value: value,
    ValueType.NULL: lambda value: None,
    **{ValueType(kind.property_type): _wire_described(kind) for kind in DESCRIBED_TYPES},
}
#: The AMQP type (one row of the wire table) each model type is sent as.
_AMQP_TYPE = {ValueType(t.property_type): t for t in TYPES if t.property_type is not None}


def to_amqp(value: TypedValue) -> Any:
    """The proton-typed Python value that encodes ``value`` with its exact AMQP type (docs/protocol.md §10)."""
    convert = _TO_WIRE.get(value.type)
    if convert is not None:
        return convert(value.value)
    return _AMQP_TYPE[value.type].python(value.value)


#: Wire value (of proton's type for it) → the model's Python value; integers become plain ints.
_FROM_WIRE: dict[str, Callable[[Any], Any]] = {
    "timestamp": timestamp_to_datetime,
    "decimal": lambda raw: decode_decimal128(bytes(raw)),
    "bool": bool,
    "char": str,
    "symbol": str,
    "string": str,
    "float": float,
    "double": float,
    "binary": bytes,
    "uuid": lambda value: value,
    "null": lambda value: None,
}
_PROPERTY_TYPES = {t.python: t.property_type for t in TYPES if t.property_type is not None}
_PROPERTY_TYPES.update({also: t.property_type for t in TYPES if t.property_type is not None for also in t.also})
_DESCRIBED = {kind.descriptor: kind for kind in DESCRIBED_TYPES}
#: decimal32/64: no SDK sends them, but Microsoft.Azure.Amqp reads them as a .NET decimal too.
_IEEE_DECIMALS = {proton.decimal32: decode_decimal32, proton.decimal64: decode_decimal64}


#: AMQP types whose decoded values are always of their model type's Python type and within its range
#: (a fixed-width integer, a binary32, UTF-8 or ASCII text…), so that reading them needs no check:
#: Python class → (model type, conversion or None). char (UTF-32 on the wire, one UTF-16 unit in
#: .NET) and decimal are checked.
UNCHECKED: dict[type, tuple[ValueType, Callable[[Any], Any] | None]] = {
    kind: (ValueType(tag), None if kind in (str, int, float, bytes, bool, uuid.UUID) else _FROM_WIRE.get(tag, int))
    for kind, tag in _PROPERTY_TYPES.items()
    if tag not in ("char", "decimal") and kind in {t.python for t in TYPES}
}
UNCHECKED[type(None)] = (ValueType.NULL, None)


class UnknownDescribedValue(CodecError):
    """A described value whose descriptor is not one of Microsoft's property types (§10.3)."""


def from_amqp(value: Any) -> TypedValue:
    """The TypedValue for a decoded AMQP value, exact: ``short 3`` stays short (docs/protocol.md §10).

    Raises CodecError for values no property can hold (lists, maps, arrays) and
    UnknownDescribedValue for a described value of another vendor's type (a message's
    reader drops it, as .NET receivers do).
    """
    kind = type(value)
    unchecked = UNCHECKED.get(kind)
    if unchecked is not None:
        vtype, convert = unchecked
        return TypedValue.of_checked(vtype, value if convert is None else convert(value))
    try:
        tag = _PROPERTY_TYPES.get(kind)
        if tag is not None:
            convert = _FROM_WIRE.get(tag)
            return TypedValue(ValueType(tag), convert(value) if convert is not None else int(value))
        if kind is Described:
            return _from_described(value)
        decode = _IEEE_DECIMALS.get(kind)
        if decode is not None:
            return TypedValue(ValueType.DECIMAL, decode(int(value)))
    except (DecimalLayoutError, model.TypedValueError) as exc:
        raise CodecError(f"{_wire_name(kind)} value {value!r:.60}: {exc}") from None
    raise CodecError(f"an application property cannot be an AMQP {_wire_name(kind)} ({value!r:.40})")


def _from_described(value: Described) -> TypedValue:
    kind = _DESCRIBED.get(value.descriptor) if isinstance(value.descriptor, symbol) else None
    if kind is None:
        raise UnknownDescribedValue(f"described value with unknown descriptor {value.descriptor!r:.60}")
    if type(value.value) is not kind.value.python:
        raise CodecError(f"{kind.descriptor} must describe a {kind.value.name}, not {type(value.value).__name__}")
    return TypedValue(ValueType(kind.property_type), value.value)


def _wire_name(kind: type) -> str:
    found = next((t.name for t in TYPES if t.python is kind), None)
    return found or kind.__name__


# ------------------------------------------------------------------------------------------------
# add-rule request body (maps)
# ------------------------------------------------------------------------------------------------


def _expression_map(expression: str) -> dict[str, Any]:
    return {"expression": expression}


def _filter_request_entry(flt: model.Filter) -> tuple[str, dict[str, Any]]:
    if isinstance(flt, SqlFilter):
        return "sql-filter", _expression_map(flt.expression)
    if isinstance(flt, TrueFilter):
        return "sql-filter", _expression_map("1=1")
    if isinstance(flt, FalseFilter):
        return "sql-filter", _expression_map("1=0")
    body: dict[str, Any] = {
        wire: getattr(flt, name) for wire, name in zip(CORRELATION_WIRE_KEYS, CORRELATION_FIELDS)
    }
    body["properties"] = {name: to_amqp(value) for name, value in flt.properties}
    return "correlation-filter", body


def encode_add_rule_body(rule: Rule) -> dict[str, Any]:
    """The add-rule request body in the .NET Track-2 shape (docs/protocol.md §1)."""
    filter_key, filter_map = _filter_request_entry(rule.filter)
    action = _expression_map(rule.action.expression) if isinstance(rule.action, SqlRuleAction) else None
    description = {filter_key: filter_map, "sql-rule-action": action, "rule-name": rule.name}
    return {"rule-name": rule.name, "rule-description": description}


def _require_str(value: Any, where: str) -> str:
    if type(value) is not str:
        raise CodecError(f"{where} must be a string, got {type(value).__name__}")
    return value


def _decode_properties(raw: Any, where: str) -> tuple[tuple[str, TypedValue], ...]:
    """A correlation filter's typed properties map (the same shape in requests and rule descriptions)."""
    if not isinstance(raw, Mapping):
        raise CodecError(f"{where} must be a map, got {type(raw).__name__}")
    props: dict[str, TypedValue] = {}
    for key, value in raw.items():
        name = _require_str(str(key) if type(key) is symbol else key, f"{where} key")
        try:
            props[name] = from_amqp(value)
        except CodecError as exc:
            raise CodecError(f"{where}[{name!r}]: {exc}") from None
    return tuple(props.items())


def _decode_correlation_map(corr: Any, where: str) -> CorrelationFilter:
    if not isinstance(corr, Mapping):
        raise CodecError(f"{where} must be a map")
    fields: dict[str, Any] = {}
    for key, value in corr.items():
        if key == "properties":
            if value is not None:
                fields["properties"] = _decode_properties(value, f"{where}.properties")
        elif key in _WIRE_TO_FIELD:
            if value is not None:
                fields[_WIRE_TO_FIELD[key]] = _require_str(value, f"{where}.{key}")
        else:
            raise CodecError(f"{where}: unknown key {key!r}")
    flt = CorrelationFilter(**fields)
    if flt.is_empty():
        raise CodecError(f"{where} must set at least one field or property")
    return flt


def _decode_expression_map(value: Any, where: str) -> str:
    if not isinstance(value, Mapping) or "expression" not in value:
        raise CodecError(f"{where} must be a map with an 'expression'")
    return _require_str(value["expression"], f"{where}.expression")


def decode_add_rule_body(body: Any) -> Rule:
    """Read an add-rule request body in any SDK's shape (.NET Track 1/2, Java, JS).

    ``1=1`` and ``1=0`` stay SQL filters: the request carries only the expression, and it is not known
    whether the service turns them into true/false filters (docs/protocol.md §1).
    """
    if not isinstance(body, Mapping):
        raise CodecError("add-rule body must be a map")
    name = _require_str(body.get("rule-name"), "add-rule 'rule-name'")
    description = body.get("rule-description")
    where = f"add-rule {name!r} rule-description"
    if not isinstance(description, Mapping):
        raise CodecError(f"{where} must be a map")
    kinds = [k for k in ("sql-filter", "correlation-filter") if description.get(k) is not None]
    if len(kinds) != 1:
        raise CodecError(f"{where} needs exactly one of sql-filter, correlation-filter")
    flt: model.Filter
    if kinds[0] == "sql-filter":
        flt = SqlFilter(_decode_expression_map(description["sql-filter"], f"{where}.sql-filter"))
    else:
        flt = _decode_correlation_map(description["correlation-filter"], f"{where}.correlation-filter")
    raw_action = description.get("sql-rule-action")
    action: model.Action = model.NO_ACTION
    if raw_action is not None:
        action = SqlRuleAction(_decode_expression_map(raw_action, f"{where}.sql-rule-action"))
    inner_name = description.get("rule-name")
    if inner_name is not None and inner_name != name:
        raise CodecError(f"{where}.rule-name {inner_name!r} differs from rule-name {name!r}")
    return Rule(name=name, filter=flt, action=action)


# ------------------------------------------------------------------------------------------------
# enumerate-rules response (described lists)
# ------------------------------------------------------------------------------------------------


def _sql_list(expression: str) -> list[Any]:
    return [expression, int32(COMPATIBILITY_LEVEL)]


def encode_filter(flt: model.Filter) -> Described:
    if isinstance(flt, SqlFilter):
        return Described(SQL_FILTER_CODE, _sql_list(flt.expression))
    if isinstance(flt, TrueFilter):
        return Described(TRUE_FILTER_CODE, [])
    if isinstance(flt, FalseFilter):
        return Described(FALSE_FILTER_CODE, [])
    values: list[Any] = [getattr(flt, name) for name in CORRELATION_FIELDS]
    values.append({name: to_amqp(value) for name, value in flt.properties})
    return Described(CORRELATION_FILTER_CODE, values)


def encode_action(action: model.Action) -> Described:
    if isinstance(action, SqlRuleAction):
        return Described(SQL_RULE_ACTION_CODE, _sql_list(action.expression))
    return Described(EMPTY_RULE_ACTION_CODE, [])


def encode_rule_description(rule: Rule, created_at: _dt.datetime | None = None) -> Described:
    """The described list ``0x0000013700000004`` [filter, action, name, created-at?] (docs/protocol.md §3)."""
    values: list[Any] = [encode_filter(rule.filter), encode_action(rule.action), rule.name]
    if created_at is not None:
        values.append(datetime_to_timestamp(created_at))
    return Described(RULE_DESCRIPTION_CODE, values)


def _descriptor(value: Any, where: str, suffix: str = "") -> tuple[ulong, list[Any]]:
    """Descriptor and list of a described list; errors name ``where + suffix`` (joined only then)."""
    if not isinstance(value, Described):
        raise CodecError(f"{where}{suffix}: expected a described list, got {type(value).__name__}")
    code = value.descriptor
    if isinstance(code, str):
        code = _SYMBOLIC.get(str(code), code)
    if not isinstance(value.value, list):
        raise CodecError(f"{where}{suffix}: described value is {type(value.value).__name__}, not a list")
    return code, value.value


def _code_text(code: Any) -> str:
    return f"0x{int(code):016x}" if isinstance(code, int) else repr(code)


def _decode_filter(value: Any, rule: str) -> model.Filter:
    """``rule`` locates the rule-description; locations are formatted only into errors, since this
    runs for every rule of every page read."""
    code, fields = _descriptor(value, rule, "[0] (filter)")
    if code == SQL_FILTER_CODE:
        if not fields:
            raise CodecError(f"{rule}[0] (filter): sql-filter list has no expression")
        expression = fields[0]
        if type(expression) is not str:
            _require_str(expression, f"{rule}[0] (filter)[0] (expression)")
        return SqlFilter(expression)
    if code == TRUE_FILTER_CODE:
        return TrueFilter()
    if code == FALSE_FILTER_CODE:
        return FalseFilter()
    if code == CORRELATION_FILTER_CODE:
        if len(fields) > 9:
            raise CodecError(f"{rule}[0] (filter): correlation-filter list has {len(fields)} fields, at most 9")
        system: dict[str, str] = {}
        for index, (name, raw) in enumerate(zip(CORRELATION_FIELDS, fields)):
            if raw is not None:
                system[name] = raw if type(raw) is str else _require_str(
                    raw, f"{rule}[0] (filter)[{index}] ({CORRELATION_WIRE_KEYS[index]})"
                )
        props_raw = fields[8] if len(fields) == 9 else None
        props = _decode_properties(props_raw, f"{rule}[0] (filter)[8] (properties)") if props_raw is not None else ()
        return CorrelationFilter(**system, properties=props)
    raise CodecError(f"{rule}[0] (filter): unknown filter descriptor {_code_text(code)}")


def _decode_action(value: Any, rule: str) -> model.Action:
    if value is None:
        return model.NO_ACTION
    code, fields = _descriptor(value, rule, "[1] (action)")
    if code == EMPTY_RULE_ACTION_CODE:
        return model.NO_ACTION
    if code == SQL_RULE_ACTION_CODE:
        if not fields:
            raise CodecError(f"{rule}[1] (action): sql-rule-action list has no expression")
        return SqlRuleAction(_require_str(fields[0], f"{rule}[1] (action)[0] (expression)"))
    raise CodecError(f"{rule}[1] (action): unknown action descriptor {_code_text(code)}")


@dataclass(frozen=True)
class RuleDescription:
    """A decoded rule-description: the rule and the service's created-at, when sent."""

    rule: Rule
    created_at: _dt.datetime | None = field(default=None, compare=False)


def decode_rule_description_full(value: Any, label: str = "rule") -> RuleDescription:
    """Decode a rule-description, keeping created-at. ``label`` names the rule in errors until
    the name (element 2) is known."""
    code, fields = _descriptor(value, label, ": rule-description")
    if code != RULE_DESCRIPTION_CODE:
        raise CodecError(f"{label}: rule-description has unknown descriptor {_code_text(code)}")
    if not 3 <= len(fields) <= 4:
        raise CodecError(f"{label}: rule-description list has {len(fields)} elements, expected 3 or 4")
    name = fields[2]
    if type(name) is not str:
        raise CodecError(f"{label}: rule-description[2] (name) must be a string, got {type(name).__name__}")
    where = f"rule {name!r}: rule-description"
    flt = _decode_filter(fields[0], where)
    action = _decode_action(fields[1], where)
    created_at = None
    if len(fields) == 4 and fields[3] is not None:
        if not isinstance(fields[3], int) or isinstance(fields[3], bool):
            raise CodecError(f"{where}[3] (created-at) must be a timestamp")
        created_at = timestamp_to_datetime(fields[3])
    return RuleDescription(Rule(name=name, filter=flt, action=action, created_at=created_at), created_at)


def decode_rule_description(value: Any) -> Rule:
    """The Rule in an enumerate-rules ``rule-description`` (3- or 4-element list)."""
    return decode_rule_description_full(value).rule


def encode_enumerate_rules_body(rules: list[tuple[Rule, _dt.datetime | None]]) -> dict[str, Any]:
    """The 200 response body of enumerate-rules: ``{"rules": [{"rule-description": …}, …]}``."""
    return {"rules": [{"rule-description": encode_rule_description(r, at)} for r, at in rules]}


def decode_enumerate_rules_body(body: Any, offset: int = 0) -> list[Rule]:
    """Rules from an enumerate-rules 200 body; ``offset`` numbers entries in error messages."""
    entries = body.get("rules") if isinstance(body, Mapping) else None
    if isinstance(entries, proton.Array):
        entries = list(entries.elements)  # the docs call it an array; the SDKs read a list
    if not isinstance(entries, list):
        raise CodecError("enumerate-rules response has no 'rules' list")
    rules = []
    for index, entry in enumerate(entries):
        label = f"rule #{offset + index}"
        if not isinstance(entry, Mapping) or "rule-description" not in entry:
            raise CodecError(f"{label}: entry is not a map with a 'rule-description'")
        rules.append(decode_rule_description_full(entry["rule-description"], label).rule)
    return rules
