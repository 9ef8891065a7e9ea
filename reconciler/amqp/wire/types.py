"""The AMQP 1.0 type system (spec part 1, §1.6) as one table, from which encoder and decoder are built.

Each type lists its encodings: the constructor byte, how the bytes after it are laid out (its
form) and their width. Values are the Python types proton uses (``int32``, ``ulong``, ``symbol``,
``Described``, ``Array``…; a plain ``int`` is a long, a ``float`` a double), so the codec is a
drop-in for ``proton.Data`` and can be checked against it byte for byte.
"""

from __future__ import annotations

import enum
import struct
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from proton import (
    Array,
    Data,
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


class EncodeError(ValueError):
    """A value that has no AMQP encoding (an unknown type, or out of its type's range)."""


class DecodeError(ValueError):
    """The bytes are not a well-formed AMQP encoding (truncated, unknown constructor, bad size)."""


class Form(enum.Enum):
    """How the bytes after a constructor are laid out."""

    CONSTANT = "constant"  # none: the constructor is the value (true, uint0, list0…)
    FIXED = "fixed"  # a fixed-width value, read with the encoding's struct format
    VARIABLE = "variable"  # a size of ``width`` bytes, then that many bytes
    LIST = "list"  # size and count of ``width`` bytes each, then count values
    MAP = "map"  # as a list, the values alternating key and value
    ARRAY = "array"  # size and count, one element constructor, then count element bodies


@dataclass(frozen=True)
class Encoding:
    code: int
    form: Form
    #: FIXED: the value's struct format; VARIABLE, LIST, MAP, ARRAY: the size (and count) field's.
    fmt: str = ""
    #: CONSTANT: the value the constructor stands for.
    value: Any = None

    @property
    def struct(self) -> struct.Struct:
        return struct.Struct(">" + self.fmt)


@dataclass(frozen=True)
class AmqpType:
    name: str
    #: The class decoded values have (proton's); values of ``also`` encode as this type too.
    python: type
    #: proton's ``Data`` type code, which is how an ``Array`` names its element type.
    data_type: int
    #: The first is the full-width encoding, the one array elements use.
    encodings: tuple[Encoding, ...]
    also: tuple[type, ...] = ()
    #: Wire value (what the struct format unpacks, or a VARIABLE's bytes) → Python value; None: as is.
    from_wire: Callable[[Any], Any] | None = None
    #: Python value → wire value; None: as is.
    to_wire: Callable[[Any], Any] | None = None
    #: The type (``reconciler.typed_values.ValueType`` value) an application property of this AMQP
    #: type has; None: not a property value (decimal32/64 no SDK sends; lists, maps, arrays).
    property_type: str | None = None


def _fixed(code: int, fmt: str) -> Encoding:
    return Encoding(code, Form.FIXED, fmt)


def _constant(code: int, value: Any) -> Encoding:
    return Encoding(code, Form.CONSTANT, value=value)


def _sized(code: int, form: Form, fmt: str) -> Encoding:
    return Encoding(code, form, fmt)


_ULONGS: dict[int, ulong] = {}


def _ulong(value: int) -> ulong:
    """proton's ulong checks its sign in Python; descriptors repeat the same few codes, so reuse them."""
    found = _ULONGS.get(value)
    if found is None:
        found = ulong(value)
        if len(_ULONGS) < 4096:
            _ULONGS[value] = found
    return found


def _char(code: int) -> char:
    try:
        return char(chr(code))
    except (ValueError, OverflowError):
        raise DecodeError(f"char U+{code:X} is not a code point") from None


def _decimal128(value: decimal128) -> bytes:
    if len(value) != 16:
        raise EncodeError(f"a decimal128 is 16 bytes, not {len(value)}")
    return bytes(value)


def text_error(exc: UnicodeDecodeError) -> str:
    """What is wrong with a string's or a symbol's bytes (the decoder raises it as a DecodeError)."""
    if exc.encoding == "ascii":
        return "a symbol holds non-ASCII bytes"
    return f"invalid UTF-8 in a string: {exc.reason}"


def _utf8_encode(value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError("a string holds an unpaired surrogate") from None


def _symbol_decode(raw: bytes) -> symbol:
    return symbol(raw.decode("ascii"))


def _symbol_encode(value: str) -> bytes:
    try:
        return value.encode("ascii")
    except UnicodeEncodeError:
        raise EncodeError(f"symbol {value!r:.40} is not ASCII") from None


FIXED, VARIABLE, LIST, MAP, ARRAY = Form.FIXED, Form.VARIABLE, Form.LIST, Form.MAP, Form.ARRAY

TYPES: tuple[AmqpType, ...] = (
    AmqpType("null", type(None), Data.NULL, (_constant(0x40, None),), property_type="null"),
    AmqpType("boolean", bool, Data.BOOL, (_fixed(0x56, "B"), _constant(0x41, True), _constant(0x42, False)),
             from_wire=bool, property_type="bool"),
    AmqpType("ubyte", ubyte, Data.UBYTE, (_fixed(0x50, "B"),), from_wire=ubyte, property_type="ubyte"),
    AmqpType("byte", byte, Data.BYTE, (_fixed(0x51, "b"),), from_wire=byte, property_type="byte"),
    AmqpType("ushort", ushort, Data.USHORT, (_fixed(0x60, "H"),), from_wire=ushort, property_type="ushort"),
    AmqpType("short", short, Data.SHORT, (_fixed(0x61, "h"),), from_wire=short, property_type="short"),
    AmqpType("uint", uint, Data.UINT, (_fixed(0x70, "I"), _fixed(0x52, "B"), _constant(0x43, uint(0))),
             from_wire=uint, property_type="uint"),
    AmqpType("ulong", ulong, Data.ULONG, (_fixed(0x80, "Q"), _fixed(0x53, "B"), _constant(0x44, ulong(0))),
             from_wire=_ulong, property_type="ulong"),
    AmqpType("int", int32, Data.INT, (_fixed(0x71, "i"), _fixed(0x54, "b")), from_wire=int32,
             property_type="int"),
    AmqpType("long", int, Data.LONG, (_fixed(0x81, "q"), _fixed(0x55, "b")), property_type="long"),
    AmqpType("float", float32, Data.FLOAT, (_fixed(0x72, "f"),), from_wire=float32, property_type="float"),
    AmqpType("double", float, Data.DOUBLE, (_fixed(0x82, "d"),), property_type="double"),
    AmqpType("decimal32", decimal32, Data.DECIMAL32, (_fixed(0x74, "I"),), from_wire=decimal32),
    AmqpType("decimal64", decimal64, Data.DECIMAL64, (_fixed(0x84, "Q"),), from_wire=decimal64),
    AmqpType("decimal128", decimal128, Data.DECIMAL128, (_fixed(0x94, "16s"),),
             from_wire=decimal128, to_wire=_decimal128, property_type="decimal"),
    AmqpType("char", char, Data.CHAR, (_fixed(0x73, "I"),), from_wire=_char, to_wire=ord,
             property_type="char"),
    AmqpType("timestamp", timestamp, Data.TIMESTAMP, (_fixed(0x83, "q"),), from_wire=timestamp,
             property_type="timestamp"),
    AmqpType("uuid", uuid.UUID, Data.UUID, (_fixed(0x98, "16s"),),
             from_wire=lambda raw: uuid.UUID(bytes=raw), to_wire=lambda value: value.bytes, property_type="uuid"),
    AmqpType("binary", bytes, Data.BINARY, (_sized(0xB0, VARIABLE, "I"), _sized(0xA0, VARIABLE, "B")),
             also=(bytearray, memoryview), to_wire=bytes, property_type="binary"),
    AmqpType("string", str, Data.STRING, (_sized(0xB1, VARIABLE, "I"), _sized(0xA1, VARIABLE, "B")),
             from_wire=bytes.decode, to_wire=_utf8_encode, property_type="string"),
    AmqpType("symbol", symbol, Data.SYMBOL, (_sized(0xB3, VARIABLE, "I"), _sized(0xA3, VARIABLE, "B")),
             from_wire=_symbol_decode, to_wire=_symbol_encode, property_type="symbol"),
    AmqpType("list", list, Data.LIST, (_sized(0xD0, LIST, "I"), _sized(0xC0, LIST, "B"), _constant(0x45, [])),
             also=(tuple,)),
    AmqpType("map", dict, Data.MAP, (_sized(0xD1, MAP, "I"), _sized(0xC1, MAP, "B"))),
    AmqpType("array", Array, Data.ARRAY, (_sized(0xF0, ARRAY, "I"), _sized(0xE0, ARRAY, "B"))),
)

#: The constructor of a described value: 0x00, then the descriptor and the value, each encoded.
DESCRIBED = 0x00

BY_DATA_TYPE: dict[int, AmqpType] = {t.data_type: t for t in TYPES}
BY_NAME: dict[str, AmqpType] = {t.name: t for t in TYPES}


@dataclass(frozen=True)
class DescribedType:
    """A described type Microsoft's SDKs put in application properties: a symbol descriptor and a
    value of one primitive type (docs/protocol.md §10.3)."""

    name: str
    descriptor: symbol
    value: AmqpType
    property_type: str


#: DateTimeOffset (UTC ticks; the offset is not sent), TimeSpan (ticks) and Uri (``AbsoluteUri``).
DESCRIBED_TYPES: tuple[DescribedType, ...] = (
    DescribedType("datetime-offset", symbol("com.microsoft:datetime-offset"), BY_NAME["long"], "datetimeoffset"),
    DescribedType("timespan", symbol("com.microsoft:timespan"), BY_NAME["long"], "timespan"),
    DescribedType("uri", symbol("com.microsoft:uri"), BY_NAME["string"], "uri"),
)
