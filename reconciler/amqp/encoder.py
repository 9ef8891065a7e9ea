"""AMQP 1.0 encoding of Python values (with proton's type markers) straight to bytes.

The counterpart of ``decoder``, for the same reason: ``proton.Message``/``Data`` build every value
through several foreign calls, which made encoding a request or a response one of the largest
costs per management operation. Values carry their AMQP type as proton's classes say (``int32``,
``ulong``, ``symbol``, ``Described``, ``Array``…; a plain ``int`` is a long, a ``float`` a double),
so the bytes are exactly what proton writes: compact scalars (uint0, smallulong, str8…) and, as
proton does, the 32-bit forms of lists, maps and arrays.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Callable

from proton import (
    UNDESCRIBED,
    Array,
    Data,
    Described,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

from reconciler.amqp.decoder import AMQP_VALUE, APPLICATION_PROPERTIES, PROPERTIES


class EncodeError(ValueError):
    """A value that has no AMQP encoding (an unknown type, or out of its type's range)."""


_PACK = {
    fmt: struct.Struct(">" + fmt).pack for fmt in ("B", "b", "H", "h", "I", "i", "Q", "q", "f", "d")
}


def _scalar(code: int, fmt: str) -> Callable[[Any], bytes]:
    head, pack = bytes([code]), _PACK[fmt]
    return lambda value: head + pack(value)


def _small(zero: int | None, small: int, full: int, full_fmt: str, lo: int, hi: int) -> Callable[[Any], bytes]:
    """uint/ulong/int/long: the zero-width and one-byte forms when the value fits."""
    pack_full, pack_small = _PACK[full_fmt], _PACK["b" if lo < 0 else "B"]
    zero_bytes = bytes([zero]) if zero is not None else None

    def encode(value: Any) -> bytes:
        if value == 0 and zero_bytes is not None:
            return zero_bytes
        if lo <= value <= hi:
            return bytes([small]) + pack_small(value)
        return bytes([full]) + pack_full(value)

    return encode


def _variable(short_code: int, long_code: int, raw: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def encode(value: Any) -> bytes:
        data = raw(value)
        if len(data) < 256:
            return bytes([short_code, len(data)]) + data
        return bytes([long_code]) + _PACK["I"](len(data)) + data

    return encode


def _compound(code: int, items: list[bytes], count: int) -> bytes:
    """list32/map32/array32: size (counting the count field), count, then the items."""
    body = b"".join(items)
    return bytes([code]) + _PACK["I"](len(body) + 4) + _PACK["I"](count) + body


def _list(value: list[Any] | tuple[Any, ...]) -> bytes:
    if not value:
        return b"\x45"
    return _compound(0xD0, [encode_value(v) for v in value], len(value))


def _map(value: dict[Any, Any]) -> bytes:
    items = []
    for key, item in value.items():
        items.append(encode_value(key))
        items.append(encode_value(item))
    return _compound(0xD1, items, len(items))


def _described(value: Described) -> bytes:
    return b"\x00" + encode_value(value.descriptor) + encode_value(value.value)


def _utf8(value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError("a string holds an unpaired surrogate") from None


def _ascii(value: str) -> bytes:
    try:
        return value.encode("ascii")
    except UnicodeEncodeError:
        raise EncodeError(f"symbol {value!r:.40} is not ASCII") from None


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    type(None): lambda value: b"\x40",
    bool: lambda value: b"\x41" if value else b"\x42",
    ubyte: _scalar(0x50, "B"),
    byte: _scalar(0x51, "b"),
    ushort: _scalar(0x60, "H"),
    short: _scalar(0x61, "h"),
    uint: _small(0x43, 0x52, 0x70, "I", 0, 255),
    ulong: _small(0x44, 0x53, 0x80, "Q", 0, 255),
    int32: _small(None, 0x54, 0x71, "i", -128, 127),
    int: _small(None, 0x55, 0x81, "q", -128, 127),
    float32: _scalar(0x72, "f"),
    float: _scalar(0x82, "d"),
    decimal32: _scalar(0x74, "I"),
    decimal64: _scalar(0x84, "Q"),
    decimal128: lambda value: b"\x94" + bytes(value),
    char: lambda value: b"\x73" + _PACK["I"](ord(value)),
    timestamp: _scalar(0x83, "q"),
    uuid.UUID: lambda value: b"\x98" + value.bytes,
    bytes: _variable(0xA0, 0xB0, bytes),
    bytearray: _variable(0xA0, 0xB0, bytes),
    memoryview: _variable(0xA0, 0xB0, bytes),
    str: _variable(0xA1, 0xB1, _utf8),
    symbol: _variable(0xA3, 0xB3, _ascii),
    list: _list,
    tuple: _list,
    dict: _map,
    Described: _described,
}

#: proton's Data type code of an array → the full-width constructor its elements use.
_ARRAY_CONSTRUCTORS = {
    Data.NULL: 0x40, Data.BOOL: 0x56, Data.UBYTE: 0x50, Data.BYTE: 0x51, Data.USHORT: 0x60,
    Data.SHORT: 0x61, Data.UINT: 0x70, Data.ULONG: 0x80, Data.INT: 0x71, Data.LONG: 0x81,
    Data.FLOAT: 0x72, Data.DOUBLE: 0x82, Data.DECIMAL32: 0x74, Data.DECIMAL64: 0x84,
    Data.DECIMAL128: 0x94, Data.CHAR: 0x73, Data.TIMESTAMP: 0x83, Data.UUID: 0x98, Data.BINARY: 0xB0,
    Data.STRING: 0xB1, Data.SYMBOL: 0xB3, Data.LIST: 0xD0, Data.MAP: 0xD1,
}


#: Fixed-width array element constructors → their struct format.
_FIXED_WIDTH = {
    0x50: "B", 0x51: "b", 0x60: "H", 0x61: "h", 0x70: "I", 0x80: "Q", 0x71: "i", 0x81: "q",
    0x72: "f", 0x82: "d", 0x74: "I", 0x84: "Q", 0x83: "q",
}


def _array_element(constructor: int, value: Any) -> bytes:
    """An element without its constructor, in the array's (full-width) form."""
    if constructor == 0x40:
        return b""
    if constructor == 0x56:
        return b"\x01" if value else b"\x00"
    if constructor in (0xB0, 0xB1, 0xB3):
        data = bytes(value) if constructor == 0xB0 else _utf8(value) if constructor == 0xB1 else _ascii(value)
        return _PACK["I"](len(data)) + data
    if constructor in (0xD0, 0xD1):
        items = list(value) if constructor == 0xD0 else [e for pair in value.items() for e in pair]
        return _compound(constructor, [encode_value(v) for v in items], len(items))[1:]
    fixed = _FIXED_WIDTH.get(constructor)
    if fixed is not None:
        return _PACK[fixed](value)
    if constructor == 0x73:
        return _PACK["I"](ord(value))
    return bytes(value) if constructor == 0x94 else value.bytes  # decimal128, uuid


def _array(value: Array) -> bytes:
    constructor = _ARRAY_CONSTRUCTORS.get(value.type)
    if constructor is None:
        raise EncodeError(f"arrays of proton type {value.type} are not supported")
    head = b"" if value.descriptor is UNDESCRIBED else b"\x00" + encode_value(value.descriptor)
    elements = [_array_element(constructor, v) for v in value.elements]
    return _compound(0xF0, [head, bytes([constructor]), *elements], len(value.elements))


_ENCODERS[Array] = _array


def encode_value(value: Any) -> bytes:
    """The AMQP encoding of ``value`` (constructor included)."""
    encode = _ENCODERS.get(type(value))
    if encode is None:
        raise EncodeError(f"no AMQP encoding for {type(value).__name__} ({value!r:.40})")
    try:
        return encode(value)
    except struct.error:
        raise EncodeError(f"{value!r:.40} is out of range for {type(value).__name__}") from None


def _section(code: int, value: Any) -> bytes:
    return b"\x00\x53" + bytes([code]) + encode_value(value)


def encode_message(
    *,
    message_id: Any = None,
    to: str | None = None,
    reply_to: str | None = None,
    correlation_id: Any = None,
    application_properties: dict[str, Any] | None = None,
    body: Any = None,
) -> bytes:
    """A request or response: properties, application-properties, then an amqp-value body (or none
    when ``body`` is None, so that a caller can append an already encoded body section)."""
    fields = [message_id, None, to, None, reply_to, correlation_id]
    while fields and fields[-1] is None:
        fields.pop()
    parts = [_section(PROPERTIES, fields)] if fields else []
    if application_properties:
        parts.append(_section(APPLICATION_PROPERTIES, application_properties))
    if body is not None:
        parts.append(_section(AMQP_VALUE, body))
    return b"".join(parts)
