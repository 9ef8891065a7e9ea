"""Splitting Microsoft batch transfers into their messages.

The SDKs send ``send_messages([...])`` as one transfer with message-format 0x80013700: an envelope
whose only sections are data sections, each holding one complete encoded message. python-qpid-
proton does not expose a delivery's message format, so the emulator recognises the envelope by
its shape: a body of data sections only, each of which is itself a complete AMQP message.
"""

from __future__ import annotations

import proton

DATA_SECTION = 0x75
#: data, amqp-sequence, amqp-value.
BODY_SECTIONS = (0x75, 0x76, 0x77)
#: Descriptor codes of the AMQP 1.0 message sections (header .. footer).
SECTION_CODES = range(0x70, 0x79)


def sections(payload: bytes) -> list[tuple[int, object]] | None:
    """The (descriptor code, value) of each top-level section, or None if ``payload`` is not a section list."""
    out = []
    offset = 0
    while offset < len(payload):
        data = proton.Data()
        try:
            used = data.decode(payload[offset:])
        except proton.DataException:
            return None
        data.rewind()
        if used <= 0 or not data.next() or data.type() != proton.Data.DESCRIBED:
            return None
        data.enter()
        data.next()
        code = data.get_object()
        data.next()
        value = data.get_object()
        if isinstance(value, memoryview):  # points into the Data buffer, freed with it
            value = bytes(value)
        data.exit()
        if not isinstance(code, int) or int(code) not in SECTION_CODES:
            return None
        out.append((int(code), value))
        offset += used
    return out


def unbatch(payload: bytes) -> list[bytes]:
    """The messages a transfer carries: the inner messages of a batch envelope, else the payload itself.

    The envelope may copy the first message's properties; its body is data sections only.
    """
    parts = sections(payload)
    body = [value for code, value in parts or () if code in BODY_SECTIONS]
    if not parts or not body or any(code not in (DATA_SECTION,) for code, _ in parts if code in BODY_SECTIONS):
        return [payload]
    inner = [bytes(value) for value in body]
    if all(_is_message(item) for item in inner):
        return inner
    return [payload]


def _is_message(payload: bytes) -> bool:
    parts = sections(payload)
    return bool(parts) and any(code in BODY_SECTIONS for code, _ in parts)


HEADER_SECTION = 0x70


def encode_with_header(msg: proton.Message) -> bytes:
    """Encode ``msg`` with every header field written out, delivery-count included.

    proton drops trailing header fields that hold their default, so a first delivery would reach
    the client without a delivery-count (the Python SDK then reports None, where the service says 0).
    """
    header = proton.Data()
    header.put_described()
    header.enter()
    header.put_ulong(HEADER_SECTION)
    header.put_list()
    header.enter()
    header.put_bool(bool(msg.durable))
    header.put_ubyte(int(msg.priority))
    if msg.ttl:
        header.put_uint(int(round(msg.ttl * 1000)))
    else:
        header.put_null()
    header.put_bool(bool(msg.first_acquirer))
    header.put_uint(int(msg.delivery_count))
    header.exit()
    header.exit()
    ttl = msg.ttl
    msg.durable, msg.priority, msg.ttl, msg.first_acquirer, msg.delivery_count = False, 4, 0, False, 0
    rest = bytes(msg.encode())
    msg.ttl = ttl
    first = proton.Data()
    used = first.decode(rest)
    if sections(rest[:used]) and sections(rest[:used])[0][0] == HEADER_SECTION:
        rest = rest[used:]  # proton may still write an empty header
    return bytes(header.encode()) + rest
