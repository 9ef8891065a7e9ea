"""AMQP 1.0 messages as their sections (spec part 3, §3.2): bytes ⇄ ``Sections``, and the
request/response view of ``$management`` and ``$cbs`` messages.

An encoded message is a sequence of described values, one per section: header, delivery and
message annotations, properties, application-properties, the body (data, amqp-sequence or
amqp-value sections) and a footer. Sections are kept as the decoder gives them, so a message
read, changed in one field and written again keeps every other field and type it had.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from proton import ulong

from reconciler.amqp.wire.decode import READ_ERRORS, READERS, read_value, value_error
from reconciler.amqp.wire.encode import encode_value
from reconciler.amqp.wire.types import DESCRIBED, DecodeError

#: Descriptor codes of the message sections (header … footer).
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x74, 0x75, 0x76, 0x77, 0x78
SECTION_CODES = range(HEADER, FOOTER + 1)
BODY_SECTIONS = (DATA, AMQP_SEQUENCE, AMQP_VALUE)

#: The fields of the header and properties lists, in list order (§3.2.1, §3.2.4).
HEADER_FIELDS = ("durable", "priority", "ttl", "first-acquirer", "delivery-count")
PROPERTIES_FIELDS = (
    "message-id", "user-id", "to", "subject", "reply-to", "correlation-id", "content-type",
    "content-encoding", "absolute-expiry-time", "creation-time", "group-id", "group-sequence",
    "reply-to-group-id",
)
_HEADER_INDEX = {name: index for index, name in enumerate(HEADER_FIELDS)}
_PROPERTIES_INDEX = {name: index for index, name in enumerate(PROPERTIES_FIELDS)}
_MESSAGE_ID, _REPLY_TO, _CORRELATION_ID = (_PROPERTIES_INDEX[n] for n in ("message-id", "reply-to", "correlation-id"))

#: Each section's constructor and descriptor, encoded once.
_HEADS = {code: bytes([DESCRIBED]) + encode_value(ulong(code)) for code in SECTION_CODES}


def _section(code: int, value: Any) -> bytes:
    return _HEADS[code] + encode_value(value)


def encode_section(code: int, value: Any) -> bytes:
    """One complete section (a list section without its trailing nulls), for a server that encodes
    the unchanging sections of a message once and writes the rest per delivery."""
    return _section(code, _trimmed(value) if code in (HEADER, PROPERTIES) else value)


def _trimmed(fields: list[Any]) -> list[Any]:
    """A list section without its trailing nulls (they mean the same as absent fields)."""
    end = len(fields)
    while end and fields[end - 1] is None:
        end -= 1
    return fields[:end]


def _get(fields: list[Any] | None, index: int) -> Any:
    """Field ``index`` of a list section; fields past the list's end are null."""
    return fields[index] if fields is not None and len(fields) > index else None


def _set(fields: list[Any] | None, index: int, value: Any) -> list[Any]:
    fields = list(fields or ())
    fields.extend([None] * (index + 1 - len(fields)))
    fields[index] = value
    return fields


#: What each section's value must be (amqp-value sections hold any value).
_SHAPES: dict[int, tuple[type, str]] = {
    HEADER: (list, "a list"), PROPERTIES: (list, "a list"), AMQP_SEQUENCE: (list, "a list"),
    DELIVERY_ANNOTATIONS: (dict, "a map"), MESSAGE_ANNOTATIONS: (dict, "a map"),
    APPLICATION_PROPERTIES: (dict, "a map"), FOOTER: (dict, "a map"), DATA: (bytes, "binary"),
}


_SMALLULONG = 0x53


def _read_sections(payload: bytes | bytearray | memoryview) -> Iterator[tuple[int, Any]]:
    buf = bytes(payload)
    pos, size = 0, len(buf)
    readers = READERS
    while pos < size:
        if buf[pos] != DESCRIBED:
            raise DecodeError(f"byte {pos} does not start a message section")
        start = pos
        try:
            if pos + 3 < size and buf[pos + 1] == _SMALLULONG:
                # The descriptor every encoder writes (0x00 0x53 code): read as the byte it is, no
                # Described or ulong built for it, and the value read by its constructor's reader
                # straight away, since a message is a handful of sections.
                code: Any = buf[pos + 2]
                value, pos = readers[buf[pos + 3]](buf, pos + 4)
            else:
                section, pos = read_value(buf, pos)
                code, value = section.descriptor, section.value
                if not isinstance(code, ulong):
                    raise DecodeError(f"unknown message section {code!r}")
        except READ_ERRORS as exc:
            raise value_error(exc, start) from None
        if code not in SECTION_CODES:
            raise DecodeError(f"unknown message section {code!r}")
        shape = _SHAPES.get(code)
        if shape is not None and not isinstance(value, shape[0]):
            raise DecodeError(f"the section at byte {start} (0x{code:02x}) is {type(value).__name__}, not {shape[1]}")
        yield int(code), value


def read_section(payload: bytes | bytearray | memoryview, code: int) -> Any:
    """The value of one section (None when absent), decoding the message no further than it: a
    reader that needs one field of many messages (a peeked message's sequence number) skips the rest."""
    for found, value in _read_sections(payload):
        if found == code:
            return value
    return None


@dataclass
class Sections:
    """One message's sections; ``body`` holds its body sections, (code, value), in order."""

    header: list[Any] | None = None
    delivery_annotations: dict[Any, Any] | None = None
    message_annotations: dict[Any, Any] | None = None
    properties: list[Any] | None = None
    application_properties: dict[Any, Any] | None = None
    body: list[tuple[int, Any]] = field(default_factory=list)
    footer: dict[Any, Any] | None = None

    @classmethod
    def decode(cls, payload: bytes | bytearray | memoryview) -> "Sections":
        """The sections of an encoded message (DecodeError when it is not one)."""
        sections = cls()
        for code, value in _read_sections(payload):
            if code in BODY_SECTIONS:
                sections.body.append((code, value))
            else:
                setattr(sections, _ATTRIBUTES[code], value)
        return sections

    def encode(self) -> bytes:
        """The message's bytes, sections in the order the spec gives them (absent ones left out)."""
        head = (
            (HEADER, self.header and _trimmed(self.header)),
            (DELIVERY_ANNOTATIONS, self.delivery_annotations),
            (MESSAGE_ANNOTATIONS, self.message_annotations),
            (PROPERTIES, self.properties and _trimmed(self.properties)),
            (APPLICATION_PROPERTIES, self.application_properties),
        )
        parts = [_section(code, value) for code, value in head if value is not None]
        parts.extend(_section(code, value) for code, value in self.body)
        if self.footer is not None:
            parts.append(_section(FOOTER, self.footer))
        return b"".join(parts)

    def header_field(self, name: str) -> Any:
        return _get(self.header, _HEADER_INDEX[name])

    def set_header_field(self, name: str, value: Any) -> None:
        self.header = _set(self.header, _HEADER_INDEX[name], value)

    def properties_field(self, name: str) -> Any:
        return _get(self.properties, _PROPERTIES_INDEX[name])

    def set_properties_field(self, name: str, value: Any) -> None:
        self.properties = _set(self.properties, _PROPERTIES_INDEX[name], value)


#: Section code → the Sections attribute that holds it (body sections aside).
_ATTRIBUTES = {
    HEADER: "header",
    DELIVERY_ANNOTATIONS: "delivery_annotations",
    MESSAGE_ANNOTATIONS: "message_annotations",
    PROPERTIES: "properties",
    APPLICATION_PROPERTIES: "application_properties",
    FOOTER: "footer",
}


@dataclass
class ManagementMessage:
    """What request/response handling reads of a message: ids, application-properties, body."""

    message_id: Any = None
    reply_to: str | None = None
    correlation_id: Any = None
    properties: dict[str, Any] = field(default_factory=dict)
    body: Any = None


def decode_management_message(payload: bytes | bytearray | memoryview) -> ManagementMessage:
    """A request or response of ``$management``/``$cbs`` (amqp-value body; string property keys)."""
    message = ManagementMessage()
    for code, value in _read_sections(payload):
        if code == PROPERTIES:
            message.message_id = _get(value, _MESSAGE_ID)
            message.reply_to = _get(value, _REPLY_TO)
            message.correlation_id = _get(value, _CORRELATION_ID)
        elif code == APPLICATION_PROPERTIES:
            message.properties = {str(k): v for k, v in value.items()}
        elif code in (AMQP_VALUE, DATA):
            message.body = value
    return message


def encode_management_message(
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
    fields = _trimmed([message_id, None, to, None, reply_to, correlation_id])
    parts = [_section(PROPERTIES, fields)] if fields else []
    if application_properties:
        parts.append(_section(APPLICATION_PROPERTIES, application_properties))
    if body is not None:
        parts.append(_section(AMQP_VALUE, body))
    return b"".join(parts)


def encode_value_section(value: Any) -> bytes:
    """``value`` as a complete amqp-value body section, ready to append to a message.

    Lets a server encode a large, unchanging body once and reuse the bytes.
    """
    return _section(AMQP_VALUE, value)
