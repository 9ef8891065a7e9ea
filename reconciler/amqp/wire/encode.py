"""AMQP 1.0 encoding of Python values (with proton's type markers) straight to bytes.

The counterpart of ``decode``, for the same reason: ``proton.Message``/``Data`` build every value
through several foreign calls, which made encoding a request or a response one of the largest
costs per management operation. One encoder per Python type, built from the type table
(``types.TYPES``), choosing the encodings proton chooses so that the bytes are exactly proton's:
a scalar takes its narrowest encoding (a zero-width constant first: true, uint0…; then the
one-byte forms: smalluint, str8…), while lists, maps and arrays always take their 32-bit forms
(an empty list is list0).
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from proton import UNDESCRIBED, Array, Described

from reconciler.amqp.wire.types import BY_DATA_TYPE, DESCRIBED, TYPES, AmqpType, EncodeError, Encoding, Form

Encoder = Callable[[Any], bytes]

_COUNT = struct.Struct(">I")


def _range(fmt: struct.Struct) -> tuple[int, int]:
    """The integers a struct format holds (lower-case formats are signed)."""
    bits = 8 * fmt.size
    if fmt.format[-1].islower():
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _fixed_body(encoding: Encoding, to_wire: Callable[[Any], Any] | None) -> Encoder:
    pack = encoding.struct.pack
    return pack if to_wire is None else lambda value: pack(to_wire(value))


def _fixed(amqp_type: AmqpType) -> Encoder:
    """A fixed-width type: a constant when the value is one, else the narrowest form that holds it."""
    constants = {e.value: bytes([e.code]) for e in amqp_type.encodings if e.form is Form.CONSTANT}
    forms = sorted((e for e in amqp_type.encodings if e.form is Form.FIXED), key=lambda e: e.struct.size)
    full = forms[-1]
    full_head, full_pack = bytes([full.code]), _fixed_body(full, amqp_type.to_wire)
    if len(forms) == 1:
        if not constants:
            return lambda value: full_head + full_pack(value)
        return lambda value: constants.get(value) or full_head + full_pack(value)
    small = forms[0]
    small_head, small_pack = bytes([small.code]), small.struct.pack
    lo, hi = _range(small.struct)

    def encode(value: Any) -> bytes:
        found = constants.get(value)
        if found is not None:
            return found
        if lo <= value <= hi:
            return small_head + small_pack(value)
        return full_head + full_pack(value)

    return encode


def _variable(amqp_type: AmqpType) -> Encoder:
    """binary, string, symbol: the one-byte size when the data is short enough, else four bytes."""
    short, long = sorted((e for e in amqp_type.encodings if e.form is Form.VARIABLE), key=lambda e: e.struct.size)
    to_wire = amqp_type.to_wire or bytes
    short_code, limit = short.code, _range(short.struct)[1]
    long_head, long_pack = bytes([long.code]), long.struct.pack

    def encode(value: Any) -> bytes:
        data = to_wire(value)
        if len(data) <= limit:
            return bytes([short_code, len(data)]) + data
        return long_head + long_pack(len(data)) + data

    return encode


def _variable_body(amqp_type: AmqpType) -> Encoder:
    """An array element of a variable-width type: always the four-byte size."""
    to_wire = amqp_type.to_wire or bytes

    def body(value: Any) -> bytes:
        data = to_wire(value)
        return _COUNT.pack(len(data)) + data

    return body


def _compound_body(items: list[bytes], count: int) -> bytes:
    """list32/map32/array32 after the constructor: size (counting the count field), count, the items."""
    content = b"".join(items)
    return _COUNT.pack(len(content) + 4) + _COUNT.pack(count) + content


def _list_body(value: list[Any] | tuple[Any, ...]) -> bytes:
    return _compound_body([encode_value(v) for v in value], len(value))


def _map_body(value: dict[Any, Any]) -> bytes:
    items = []
    for key, item in value.items():
        items.append(encode_value(key))
        items.append(encode_value(item))
    return _compound_body(items, len(items))


def _array_body(value: Array) -> bytes:
    element = _ELEMENTS.get(value.type)
    if element is None:
        raise EncodeError(f"arrays of proton type {value.type} are not supported")
    constructor, body = element
    head = b"" if value.descriptor is UNDESCRIBED else bytes([DESCRIBED]) + encode_value(value.descriptor)
    return _compound_body([head, constructor, *map(body, value.elements)], len(value.elements))


_COMPOUND_BODIES: dict[Form, Encoder] = {Form.LIST: _list_body, Form.MAP: _map_body, Form.ARRAY: _array_body}


def _compound(amqp_type: AmqpType) -> Encoder:
    """list, map, array: the 32-bit form, as proton writes them; an empty list is its constant."""
    full = amqp_type.encodings[0]
    head, body = bytes([full.code]), _COMPOUND_BODIES[full.form]
    empty = next((bytes([e.code]) for e in amqp_type.encodings if e.form is Form.CONSTANT), None)
    if empty is None:
        return lambda value: head + body(value)
    return lambda value: head + body(value) if value else empty


def _encoder(amqp_type: AmqpType) -> Encoder:
    forms = {e.form for e in amqp_type.encodings}
    if Form.VARIABLE in forms:
        return _variable(amqp_type)
    if forms & _COMPOUND_BODIES.keys():
        return _compound(amqp_type)
    if Form.FIXED in forms:
        return _fixed(amqp_type)
    (constant,) = amqp_type.encodings
    encoded = bytes([constant.code])
    return lambda value: encoded


def _element(amqp_type: AmqpType) -> tuple[bytes, Encoder]:
    """An array element's constructor (the type's full-width encoding) and its body without it."""
    full = amqp_type.encodings[0]
    if full.form is Form.CONSTANT:
        body: Encoder = lambda value: b""  # noqa: E731 - arrays of nulls
    elif full.form is Form.FIXED:
        body = _fixed_body(full, amqp_type.to_wire)
    elif full.form is Form.VARIABLE:
        body = _variable_body(amqp_type)
    else:
        body = _COMPOUND_BODIES[full.form]
    return bytes([full.code]), body


def _described(value: Described) -> bytes:
    return bytes([DESCRIBED]) + encode_value(value.descriptor) + encode_value(value.value)


def _encoders() -> dict[type, Encoder]:
    encoders: dict[type, Encoder] = {Described: _described}
    for amqp_type in TYPES:
        encoders.update(dict.fromkeys((amqp_type.python, *amqp_type.also), _encoder(amqp_type)))
    return encoders


_ELEMENTS = {data_type: _element(amqp_type) for data_type, amqp_type in BY_DATA_TYPE.items()}
_ENCODERS = _encoders()


def encode_value(value: Any) -> bytes:
    """The AMQP encoding of ``value`` (constructor included)."""
    encode = _ENCODERS.get(type(value))
    if encode is None:
        raise EncodeError(f"no AMQP encoding for {type(value).__name__} ({value!r:.40})")
    try:
        return encode(value)
    except struct.error:
        raise EncodeError(f"{value!r:.40} is out of range for {type(value).__name__}") from None
