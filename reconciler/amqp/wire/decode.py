"""AMQP 1.0 encoded values read straight from bytes into the Python types proton uses.

Why not ``proton.Data``: its Python binding walks a decoded tree with several foreign calls per
node, about 2 ms for an enumerate-rules page of 50 rules and most of the client's time per
request. Reading the bytes with ``struct`` is several times faster. One reader per constructor
byte, built from the type table (``types.TYPES``), in a list indexed by that byte. The results are
the types ``Data.get_object`` returns except that binaries are ``bytes`` owned by the caller, not
memoryviews into proton's buffers, so a decoded value can cross threads as it is.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from proton import UNDESCRIBED, Array, Described, symbol

from reconciler.amqp.wire.types import DESCRIBED, TYPES, AmqpType, DecodeError, Encoding, Form, text_error

Reader = Callable[[bytes, int], "tuple[Any, int]"]


def _constant(value: Any) -> Reader:
    if isinstance(value, list):
        return lambda buf, pos: ([], pos)  # list0: a fresh list each time
    return lambda buf, pos: (value, pos)


def _fixed(fmt: struct.Struct, wrap: Callable[[Any], Any] | None) -> Reader:
    size, unpack = fmt.size, fmt.unpack_from
    if size == 1:
        # One byte (ubyte, the small uint/ulong/int/long, boolean): its 256 values made once, since
        # proton's integer types check their range in Python on every construction.
        table = [unpack(bytes([byte]))[0] for byte in range(256)]
        if wrap is not None:
            table = [wrap(value) for value in table]
        return lambda buf, pos: (table[buf[pos]], pos + 1)
    if wrap is None:
        return lambda buf, pos: (unpack(buf, pos)[0], pos + size)
    return lambda buf, pos: (wrap(unpack(buf, pos)[0]), pos + size)


def _variable(width: struct.Struct, wrap: Callable[[bytes], Any] | None) -> Reader:
    size, unpack = width.size, width.unpack_from

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        length = unpack(buf, pos)[0]
        start = pos + size
        end = start + length
        if end > len(buf):
            raise DecodeError(f"a {length}-byte value at byte {pos} runs past the end ({len(buf)} bytes)")
        return (buf[start:end] if wrap is None else wrap(buf[start:end])), end

    return read


def _compound(width: struct.Struct, is_map: bool) -> Reader:
    """list/map: a size and a count of the given width, then count encoded values (map: key, value…)."""
    size, unpack = width.size, width.unpack_from

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        length = unpack(buf, pos)[0]
        end = pos + size + length
        if end > len(buf) or length < size:
            raise DecodeError(f"a compound of {length} bytes at byte {pos} does not fit")
        count = unpack(buf, pos + size)[0]
        if is_map and count % 2:
            raise DecodeError(f"the map at byte {pos} has an odd number of elements")
        values, pos = _elements(buf, pos + 2 * size, count)
        if pos != end:
            raise DecodeError(f"a compound ending at byte {end} does not match its size ({pos - end:+d} bytes)")
        if is_map:
            items = iter(values)
            return dict(zip(items, items)), pos
        return values, pos

    return read


def _code(name: str, form: Form, fmt: str = "", value: Any = None) -> int:
    """The constructor code of one encoding of the type table's ``name`` type."""
    (kind,) = [t for t in TYPES if t.name == name]
    (code,) = [e.code for e in kind.encodings if e.form is form and e.fmt == fmt and e.value is value]
    return code


_NULL = _code("null", Form.CONSTANT)
_TRUE, _FALSE = _code("boolean", Form.CONSTANT, value=True), _code("boolean", Form.CONSTANT, value=False)
_STR8, _SYM8 = _code("string", Form.VARIABLE, "B"), _code("symbol", Form.VARIABLE, "B")


#: Short symbols already read, by their bytes: a few names (annotation keys, descriptors) recur in
#: every message and response, and a proton ``symbol`` is costly to make. Bounded, since the peer
#: chooses what it sends.
_SYMBOLS: dict[bytes, symbol] = {}
_SYMBOLS_KEPT = 4096


def _elements(buf: bytes, pos: int, count: int) -> tuple[list[Any], int]:
    """``count`` encoded values from ``pos``: what every message section and management body is made
    of. The constructors that make up most of them (null, booleans, short strings and symbols) are
    read in line, the others by their reader; a short value that runs past its compound is caught by
    the compound's size check, and bad text by ``read_value``."""
    readers = READERS
    values: list[Any] = []
    append = values.append
    for _ in range(count):
        code = buf[pos]
        if code == _STR8:
            start = pos + 2
            pos = start + buf[pos + 1]
            append(buf[start:pos].decode())
        elif code == _SYM8:
            start = pos + 2
            pos = start + buf[pos + 1]
            raw = buf[start:pos]
            known = _SYMBOLS.get(raw)
            if known is None:
                known = symbol(raw.decode("ascii"))
                if len(_SYMBOLS) < _SYMBOLS_KEPT:
                    _SYMBOLS[raw] = known
            append(known)
        elif code == _NULL:
            append(None)
            pos += 1
        elif code in (_TRUE, _FALSE):
            append(code == _TRUE)
            pos += 1
        else:
            value, pos = readers[code](buf, pos + 1)
            append(value)
    return values, pos


def _array(width: struct.Struct) -> Reader:
    """array: size and count, an optional descriptor, one element constructor, then the element bodies."""
    size, unpack = width.size, width.unpack_from

    def read(buf: bytes, pos: int) -> tuple[Array, int]:
        length = unpack(buf, pos)[0]
        end = pos + size + length
        if end > len(buf) or length < size + 1:
            raise DecodeError(f"an array of {length} bytes at byte {pos} does not fit")
        count = unpack(buf, pos + size)[0]
        pos += 2 * size
        descriptor: Any = UNDESCRIBED
        if buf[pos] == DESCRIBED:
            descriptor, pos = READERS[buf[pos + 1]](buf, pos + 2)
        code = buf[pos]
        element_type = _ELEMENT_TYPES.get(code)
        if element_type is None:
            raise DecodeError(f"unknown array element constructor 0x{code:02x} at byte {pos}")
        reader = READERS[code]
        pos += 1
        elements = []
        for _ in range(count):
            value, pos = reader(buf, pos)
            elements.append(value)
        if pos != end:
            raise DecodeError(f"an array ending at byte {end} does not match its size ({pos - end:+d} bytes)")
        return Array(descriptor, element_type, *elements), pos

    return read


def _described(buf: bytes, pos: int) -> tuple[Described, int]:
    descriptor, pos = READERS[buf[pos]](buf, pos + 1)
    value, pos = READERS[buf[pos]](buf, pos + 1)
    return Described(descriptor, value), pos


def _unknown(code: int) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        raise DecodeError(f"unknown AMQP constructor 0x{code:02x} at byte {pos - 1}")

    return read


def _reader(amqp_type: AmqpType, encoding: Encoding) -> Reader:
    form = encoding.form
    if form is Form.CONSTANT:
        return _constant(encoding.value)
    if form is Form.FIXED:
        return _fixed(encoding.struct, amqp_type.from_wire)
    if form is Form.VARIABLE:
        return _variable(encoding.struct, amqp_type.from_wire)
    if form is Form.ARRAY:
        return _array(encoding.struct)
    return _compound(encoding.struct, is_map=form is Form.MAP)


#: Element constructor → proton's Data type code, which an Array carries.
_ELEMENT_TYPES = {encoding.code: t.data_type for t in TYPES for encoding in t.encodings}



def _readers() -> list[Reader]:
    readers = [_unknown(code) for code in range(256)]
    readers[DESCRIBED] = _described
    for amqp_type in TYPES:
        for encoding in amqp_type.encodings:
            readers[encoding.code] = _reader(amqp_type, encoding)
    return readers


#: Constructor byte → its reader (the reader takes the position after the constructor).
READERS = _readers()


#: What a reader raises on bad bytes, which ``value_error`` turns into a DecodeError.
READ_ERRORS = (struct.error, IndexError, UnicodeDecodeError, RecursionError)


def read_value(buf: bytes, pos: int) -> tuple[Any, int]:
    """The value encoded at ``pos`` (constructor included) and the position after it."""
    try:
        return READERS[buf[pos]](buf, pos + 1)
    except READ_ERRORS as exc:
        raise value_error(exc, pos) from None


def value_error(exc: Exception, pos: int) -> DecodeError:
    """The DecodeError for what a reader raised while reading the value at byte ``pos``."""
    if isinstance(exc, UnicodeDecodeError):
        return DecodeError(text_error(exc))
    if isinstance(exc, RecursionError):
        return DecodeError(f"the value at byte {pos} is nested too deeply")
    return DecodeError(f"the encoding ends early (in the value at byte {pos})")


def decode_value(payload: bytes | bytearray | memoryview) -> Any:
    """The single value ``payload`` holds; trailing bytes are an error."""
    buf = bytes(payload)
    if not buf:
        raise DecodeError("empty AMQP payload")
    value, end = read_value(buf, 0)
    if end != len(buf):
        raise DecodeError(f"{len(buf) - end} unexpected bytes after the value")
    return value
