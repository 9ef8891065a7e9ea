"""The one row layout of a traffic sample (Parquet / Spark), and Message ⇄ row conversion.

Service Bus application properties are typed per message, so they cannot share one column type.
Each message row therefore keeps them in a *tagged map* (docs/sql-language.md §10.2)::

    props: map<string, struct<k: string, t: string, s: string, l: int64, d: double, b: bool>>

The map key is the property name folded at ingestion (``names.name_key``: names are case-insensitive in filters),
``k`` keeps the name as published and ``t`` is the type tag (:class:`model.ValueType` values), so
the sample keeps every type: ``short 3`` stays short. ``t = 'null'`` is a property present with a
null value; a key absent from the map is a *missing* property. The value is held by one field,
chosen so that no type needs a wider Parquet type than its own and none loses a digit:

- ``l`` (int64): the integer types; ``char`` as its UTF-16 code; ``ulong`` as the same 64 bits read
  signed (values above 2**63 - 1 are negative here); ``timestamp`` as microseconds since the Unix
  epoch; ``datetimeoffset`` as UTC ticks since 0001-01-01 and ``timespan`` as ticks (100 ns),
  because Arrow's timestamp and duration types cannot hold .NET's whole tick range;
- ``d`` (double): ``double``, and ``float`` as the binary32 value (exact in a double);
- ``b``: ``bool``;
- ``s`` (string): the value of ``string``, ``symbol``, ``uuid``, ``uri``, and of ``decimal`` as its
  .NET text, which keeps coefficient and scale exactly (``3.00``; a Parquet decimal column has one
  scale for all rows and cannot hold .NET's 29 + 28 digits); ``binary`` as base64.

For every non-null type except ``binary`` (whose .NET text is always ``System.Byte[]``) ``s`` also
holds the value's .NET text form (``Convert.ToString``, invariant culture: ``True``, ``1E+20``,
``00:05:00``), computed once at ingestion by the Python evaluator's formatter, because that is what
string ``+`` and LIKE compare and .NET number formatting is costly to rebuild from Spark expressions.

System properties are ordinary typed columns (NULL = unset), named in :data:`SYS_COLUMNS`.

Files record :data:`LAYOUT_VERSION` in their footer. A file that records property tags but no
layout was written by an sbrules that widened types (short, byte and char to int or string, float
to double): the report refuses it with one line telling to sample again
(``traffic.sample.footers.OutdatedSample``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import uuid as _uuid
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from reconciler.model import SYSTEM_PROPERTIES, SYSTEM_PROPERTY_TABLE, Message, TypedValue, ValueType
from reconciler.names import name_key
from reconciler.sql import values

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ARROW_TYPES = {
    ValueType.STRING: pa.string(),
    ValueType.LONG: pa.int64(),
    ValueType.INT: pa.int32(),
    ValueType.DOUBLE: pa.float64(),
    ValueType.BOOL: pa.bool_(),
    ValueType.UUID: pa.string(),
    ValueType.TIMESTAMP: _TIMESTAMP,
}

#: System property (BrokeredMessage name) → column name in the sample (from the model's table).
SYS_COLUMNS: dict[str, str] = {prop.name: prop.column for prop in SYSTEM_PROPERTY_TABLE}
#: The column holding a message's application properties (the tagged map above).
PROPS = "props"

PROP_STRUCT = pa.struct(
    [
        ("k", pa.string()),
        ("t", pa.string()),
        ("s", pa.string()),
        ("l", pa.int64()),
        ("d", pa.float64()),
        ("b", pa.bool_()),
    ]
)

#: The Parquet schema of every sample file.
SCHEMA = pa.schema(
    [("topic", pa.string()), ("subscription", pa.string())]
    + [(prop.column, _ARROW_TYPES[prop.type]) for prop in SYSTEM_PROPERTY_TABLE]
    + [("body_size", pa.int64()), (PROPS, pa.map_(pa.string(), PROP_STRUCT))]
)


def micros_since_epoch(value: _dt.datetime) -> int:
    """Exact microseconds since the Unix epoch (no float rounding)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


#: The struct field that holds a value of each type (``s`` also holds every non-null value's text).
VALUE_FIELD: dict[str, str] = {
    **dict.fromkeys(("string", "symbol", "uuid", "uri", "decimal", "binary"), "s"),
    **dict.fromkeys(("byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong", "char"), "l"),
    **dict.fromkeys(("timestamp", "datetimeoffset", "timespan"), "l"),
    **dict.fromkeys(("float", "double"), "d"),
    "bool": "b",
}
assert set(VALUE_FIELD) == {t.value for t in ValueType} - {ValueType.NULL.value}, "every type needs a field"

_ULONG_WRAP = 2**64


def _stored(vtype: ValueType, value: Any) -> Any:
    """The field value of a model value (see the module docstring)."""
    if vtype is ValueType.TIMESTAMP:
        return micros_since_epoch(value)
    if vtype is ValueType.ULONG:
        return value - _ULONG_WRAP if value >= 2**63 else value
    if vtype is ValueType.CHAR:
        return ord(value)
    if vtype is ValueType.BINARY:
        return base64.b64encode(value).decode("ascii")
    return value


_FROM_FIELD: dict[ValueType, Any] = {
    ValueType.TIMESTAMP: lambda raw: _EPOCH + _dt.timedelta(microseconds=int(raw)),
    ValueType.ULONG: lambda raw: int(raw) + _ULONG_WRAP if raw < 0 else int(raw),
    ValueType.CHAR: lambda raw: chr(raw),
    ValueType.BINARY: lambda raw: base64.b64decode(raw),
}


#: The tagged struct's fields, in order.
CELL_FIELDS = tuple(f.name for f in PROP_STRUCT)


def prop_cell(name: str, value: TypedValue) -> tuple[Any, ...]:
    """One application property as the tagged struct's field values, in :data:`CELL_FIELDS` order
    (see the module docstring)."""
    vtype = value.type
    if vtype is ValueType.NULL:
        return (name, "null", None, None, None, None)
    if vtype is ValueType.BINARY:
        return (name, "binary", _stored(vtype, value.value), None, None, None)
    text = values.to_string(values.from_typed(value))
    field = VALUE_FIELD[vtype.value]
    if field == "s":
        return (name, vtype.value, text, None, None, None)
    stored = _stored(vtype, value.value)
    return (
        name, vtype.value, text,
        stored if field == "l" else None, stored if field == "d" else None, stored if field == "b" else None,
    )


def prop_to_struct(name: str, value: TypedValue) -> dict[str, Any]:
    """One application property as the tagged struct (see module docstring)."""
    return dict(zip(CELL_FIELDS, prop_cell(name, value)))


def struct_to_prop(cell: Mapping[str, Any]) -> TypedValue:
    """Inverse of :func:`prop_to_struct`."""
    vtype = ValueType(cell["t"])
    if vtype is ValueType.NULL:
        return TypedValue(vtype)
    raw = cell[VALUE_FIELD[vtype.value]]
    convert = _FROM_FIELD.get(vtype)
    return TypedValue(vtype, convert(raw) if convert is not None else raw)


def _first_per_key(user: Mapping[str, TypedValue]) -> dict[str, tuple[str, TypedValue]]:
    """Lower-cased name → (published name, value) of each :data:`PROPS` map entry: on a case-only
    key clash the first published name wins."""
    entries: dict[str, tuple[str, TypedValue]] = {}
    for name, value in user.items():
        entries.setdefault(name_key(name), (name, value))
    return entries


def props_to_map(user: Mapping[str, TypedValue]) -> list[tuple[str, dict[str, Any]]]:
    """The :data:`PROPS` map entries (see ``_first_per_key``)."""
    return [(key, prop_to_struct(name, value)) for key, (name, value) in _first_per_key(user).items()]


def message_to_row(
    message: Message,
    *,
    topic: str | None = None,
    subscription: str | None = None,
    body_size: int | None = None,
) -> dict[str, Any]:
    """The sample row of ``message`` (the only Message → row conversion in sbrules)."""
    system = {name: value.value for name, value in message.sys.items()}
    size = len(message.body) if body_size is None else body_size
    return fields_to_row(system, message.user, topic=topic, subscription=subscription, body_size=size)


def fields_to_row(
    system: Mapping[str, Any],
    user: Mapping[str, TypedValue],
    *,
    topic: str | None,
    subscription: str | None,
    body_size: int,
) -> dict[str, Any]:
    """The sample row of a message given as its fields: system property values (None = unset)
    and typed application properties; what ``message_to_row`` and the sampler both build on."""
    row: dict[str, Any] = {"topic": topic, "subscription": subscription}
    for name, column in SYS_COLUMNS.items():
        value = system.get(name)
        row[column] = str(value) if isinstance(value, _uuid.UUID) else value
    row["body_size"] = body_size
    row[PROPS] = props_to_map(user)
    return row


def row_to_message(row: Mapping[str, Any]) -> Message:
    """The Message a sample row describes (for Python evaluation of rows, e.g. the UDF fallback).

    Timestamp columns may be datetimes or microseconds since the epoch (what Spark hands a UDF
    when timestamps are passed as ``unix_micros`` to stay clear of session time zones).
    """
    sys_props: dict[str, TypedValue] = {}
    for name, column in SYS_COLUMNS.items():
        raw = row.get(column)
        if raw is None:
            continue
        vtype = SYSTEM_PROPERTIES[name]
        if vtype is ValueType.TIMESTAMP and isinstance(raw, int):
            raw = _EPOCH + _dt.timedelta(microseconds=raw)
        sys_props[name] = TypedValue(vtype, raw)
    entries = row.get(PROPS) or ()
    if isinstance(entries, Mapping):
        entries = entries.items()
    user = {}
    for _key, cell in entries:
        if isinstance(cell, Mapping):
            user[cell["k"]] = struct_to_prop(cell)
        else:
            user[cell.k] = struct_to_prop(cell.asDict())
    return Message(sys=sys_props, user=user)


#: Parquet footer key of a sample file: the type tags each property holds in the file (JSON).
PROPERTY_TAGS_KEY = b"sbrules.property_tags"
#: Parquet footer key of the layout version; files without it widened types (see the module docstring).
LAYOUT_KEY = b"sbrules.layout"
#: Parquet footer key of a sample file: the topics its rows belong to (JSON list).
TOPICS_KEY = b"sbrules.topics"
LAYOUT_VERSION = b"2"


def _tags(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Lower-cased property name → sorted type tags, of (name, tag) pairs."""
    seen: dict[str, set[str]] = {}
    for key, tag in set(pairs):
        seen.setdefault(key, set()).add(tag)
    return {key: sorted(tags) for key, tags in sorted(seen.items())}


class Columns:
    """A batch of sample rows kept column by column and built into an Arrow table with :data:`SCHEMA`.

    Rows are added as a message's fields (what the sampler peeks: no row dict is made) or as row
    dicts. Each property is kept as one tuple (``prop_cell``) and the struct's columns are made by
    transposing them at once. The table is assembled from buffers, column by column:
    ``pyarrow.array`` over Python lists would import pandas (over half a second, longer than
    sampling thousands of messages)."""

    def __init__(self) -> None:
        self._system: list[Mapping[str, Any]] = []
        self._topic: list[str | None] = []
        self._subscription: list[str | None] = []
        self._body_size: list[int] = []
        self._counts: list[int] = []  # properties per row
        self._keys: list[str] = []  # folded names (``names.name_key``), row after row
        self._cells: list[tuple[Any, ...]] = []

    def __len__(self) -> int:
        return len(self._topic)

    def add(
        self, system: Mapping[str, Any], user: Mapping[str, TypedValue], *, topic: str | None,
        subscription: str | None, body_size: int,
    ) -> None:
        """One message given as its fields (as ``fields_to_row`` takes them)."""
        self._system.append(system)
        self._topic.append(topic)
        self._subscription.append(subscription)
        self._body_size.append(body_size)
        entries = _first_per_key(user)
        self._keys.extend(entries)
        self._cells.extend(prop_cell(name, value) for name, value in entries.values())
        self._counts.append(len(entries))

    def add_row(self, row: Mapping[str, Any]) -> None:
        self._system.append({name: row.get(column) for name, column in SYS_COLUMNS.items()})
        self._topic.append(row.get("topic"))
        self._subscription.append(row.get("subscription"))
        self._body_size.append(row["body_size"])
        entries = list(row.get(PROPS) or ())
        self._keys.extend(key for key, _ in entries)
        self._cells.extend(tuple(cell[f] for f in CELL_FIELDS) for _, cell in entries)
        self._counts.append(len(entries))

    def table(self) -> pa.Table:
        """The rows as a table, their property tags and topics in its metadata (see ``traffic.sample.footers``)."""
        arrays = [_array(self._topic, pa.string()), _array(self._subscription, pa.string())]
        system_columns: dict[str, list[Any]] = {name: [None] * len(self) for name in SYS_COLUMNS}
        for index, system in enumerate(self._system):
            for name, value in system.items():  # the few a message has, not every column
                column = system_columns.get(name)
                if column is not None:
                    column[index] = value
        for name, column_name in SYS_COLUMNS.items():
            arrays.append(_array(system_columns[name], SCHEMA.field(column_name).type))
        arrays.append(_array(self._body_size, pa.int64()))
        fields = list(zip(*self._cells)) or [() for _ in CELL_FIELDS]
        arrays.append(self._props_array(fields))
        table = pa.Table.from_arrays(arrays, schema=SCHEMA)
        tags = json.dumps(_tags(zip(self._keys, fields[CELL_FIELDS.index("t")])))
        topics = json.dumps(sorted({topic for topic in self._topic if topic is not None}))
        return table.replace_schema_metadata({PROPERTY_TAGS_KEY: tags, TOPICS_KEY: topics, LAYOUT_KEY: LAYOUT_VERSION})

    def _props_array(self, fields: Sequence[Sequence[Any]]) -> pa.Array:
        offsets = np.zeros(len(self._counts) + 1, dtype=np.int32)
        np.cumsum(self._counts, out=offsets[1:])
        children = [_array(column, f.type) for column, f in zip(fields, PROP_STRUCT)]
        items = pa.StructArray.from_arrays(children, fields=list(PROP_STRUCT))
        keys = _array(self._keys, pa.string())
        offsets_array = pa.Array.from_buffers(pa.int32(), len(offsets), [None, pa.py_buffer(offsets)])
        return pa.MapArray.from_arrays(offsets_array, keys, items, type=SCHEMA.field(PROPS).type)


_NUMPY_TYPES = {pa.int64(): np.int64, pa.int32(): np.int32, pa.float64(): np.float64}


def _array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """An Arrow array of ``values`` (None = null) from buffers (see ``Columns``)."""
    count = len(values)
    nulls = values.count(None)
    if nulls == count:
        return pa.nulls(count, arrow_type)
    validity = None
    if nulls:
        present = np.array([value is not None for value in values], dtype=bool)
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    if arrow_type == pa.string():
        texts = map(str, values) if not nulls else ("" if v is None else str(v) for v in values)
        data = [text.encode() for text in texts]
        offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, data), dtype=np.int32, count=count), out=offsets[1:])
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    elif arrow_type == pa.bool_():
        bits = np.packbits(np.array([bool(v) for v in values], dtype=bool), bitorder="little")
        buffers = [validity, pa.py_buffer(bits)]
    elif arrow_type == _TIMESTAMP:
        micros = [0 if v is None else v if type(v) is int else micros_since_epoch(v) for v in values]
        buffers = [validity, pa.py_buffer(np.array(micros, dtype=np.int64))]
    else:
        zero = 0.0 if arrow_type == pa.float64() else 0
        numbers = np.array([zero if v is None else v for v in values], dtype=_NUMPY_TYPES[arrow_type])
        buffers = [validity, pa.py_buffer(numbers)]
    return pa.Array.from_buffers(arrow_type, count, buffers, null_count=nulls)


def rows_to_table(rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    """A batch of rows as an Arrow table with :data:`SCHEMA`, its property tags in the metadata
    (a report translates filters for the types that occur: see ``traffic.sample.footers``)."""
    columns = Columns()
    for row in rows:
        columns.add_row(row)
    return columns.table()
