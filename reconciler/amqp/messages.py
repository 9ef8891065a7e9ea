"""Service Bus messages ⇄ AMQP message bytes: the one message codec of the client and the emulator.

The client reads peeked and received messages with it and writes scheduled ones; the emulator
decodes each published transfer with it once (``decode_transfer``), routes the model view, and
writes rule-action copies and deliveries through the same sections. The model view
(``model.Message``) is what filters see: system properties (docs/protocol.md §7), typed
application properties and the body as bytes. Everything else a message carries stays in its
``Sections``, so a server that changes a few fields re-encodes the rest as it came.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proton import symbol, uint

from reconciler import model
from reconciler.amqp.codec import (
    UNCHECKED,
    CodecError,
    UnknownDescribedValue,
    datetime_to_timestamp,
    from_amqp,
    timestamp_to_datetime,
    to_amqp,
)
from reconciler.amqp.wire.encode import encode_value
from reconciler.amqp.wire.sections import DATA, MESSAGE_ANNOTATIONS, PROPERTIES_FIELDS, Sections, read_section
from reconciler.amqp.wire.sections import HEADER_FIELDS as HEADER_LIST_FIELDS
from reconciler.amqp.wire.types import DecodeError, EncodeError
from reconciler.model import TypedValue, ValueType, WireSection


def _fields(section: WireSection) -> dict[str, str]:
    return {p.name: p.wire.name for p in model.SYSTEM_PROPERTY_TABLE if p.wire and p.wire.section is section}


#: System property → its field in the properties section (from the model's system-property table).
PROPERTY_FIELDS = _fields(WireSection.PROPERTIES)
#: System property → its field in the header.
HEADER_FIELDS = _fields(WireSection.HEADER)
#: System property → its message annotation (docs/protocol.md §6, §7).
ANNOTATIONS = _fields(WireSection.ANNOTATIONS)
_ANNOTATION_TO_SYS = {v: k for k, v in ANNOTATIONS.items()}
#: Fields that receivers built on proton keep as C strings, which a NUL would silently cut short.
_C_STRING_FIELDS = {"To", "ReplyTo", "Label", "SessionId", "ReplyToSessionId", "ContentType"}


@dataclass(frozen=True)
class DecodedMessage:
    """A decoded message: its bytes and sections, the model view, every message annotation (str keys)."""

    payload: bytes
    sections: Sections
    message: model.Message
    annotations: Mapping[str, Any]

    @property
    def size(self) -> int:
        return len(self.payload)


def _uint(name: str, value: int) -> uint:
    if not 0 <= value < 2**32:
        raise CodecError(f"{name} is out of range for its AMQP field (a uint)")
    return uint(value)


def to_sections(message: model.Message, annotations: Mapping[str, Any] | None = None) -> Sections:
    """The sections of a model message (a data body); ``annotations`` adds or overrides annotations.

    Size and ForcePersistence have no AMQP field and are not carried.
    """
    sections = Sections(body=[(DATA, bytes(message.body))])
    ann: dict[symbol, Any] = {}
    for name, typed in message.sys.items():
        value = typed.value
        if value is None:
            continue  # a null system property is an absent field
        if name in _C_STRING_FIELDS and "\x00" in str(value):
            raise CodecError(f"{name} must not contain NUL characters")
        if name == "ContentType":
            if not str(value).isascii():
                raise CodecError("ContentType is an AMQP symbol and must be ASCII")
            value = symbol(value)
        prop = model.SYSTEM_PROPERTY[name]
        wire = prop.wire
        if wire is None:
            continue
        if wire.section is WireSection.PROPERTIES:
            if prop.type is ValueType.TIMESTAMP:
                value = datetime_to_timestamp(value)
            sections.set_properties_field(wire.name, value)
        elif wire.section is WireSection.ANNOTATIONS:
            ann[symbol(wire.name)] = to_amqp(typed)
        elif name == "TimeToLive":
            if value:
                sections.set_header_field(wire.name, _uint(name, round(value * 1000)))
        else:
            sections.set_header_field(wire.name, _uint(name, value))
    for key, value in (annotations or {}).items():
        ann[symbol(key)] = value
    if ann:
        sections.message_annotations = ann
    if message.user:
        sections.application_properties = {key: to_amqp(value) for key, value in message.user.items()}
    return sections


def encode_model_message(message: model.Message, annotations: Mapping[str, Any] | None = None) -> bytes:
    """A model message as AMQP message bytes (see ``to_sections``)."""
    sections = to_sections(message, annotations)
    try:
        return sections.encode()
    except EncodeError as exc:
        raise CodecError(f"cannot encode the message: {exc}") from None


def _body_bytes(body: list[tuple[int, Any]]) -> bytes:
    """The body as bytes: data sections joined, an amqp-value string as UTF-8, any other value encoded
    (a decoded value always encodes again)."""
    data = [value for code, value in body if code == DATA]
    if data:
        return b"".join(data)
    for _, value in body:
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode()
        return encode_value(value) if value is not None else b""
    return b""


@dataclass(frozen=True)
class MessageFields:
    """The fields the model view is made of, before it is made: each system property's value (of
    its type in the system-property table), the typed application properties, the body and every
    message annotation. A reader that stores fields rather than evaluating filters (the traffic
    sampler) takes them as they are; ``model()`` wraps them in the model view."""

    system: dict[str, Any]
    user: dict[str, TypedValue]
    body: bytes
    annotations: dict[str, Any]

    def model(self) -> model.Message:
        types = model.SYSTEM_PROPERTIES
        sys_props = {name: TypedValue(types[name], value) for name, value in self.system.items()}
        return model.Message(sys=sys_props, user=self.user, body=self.body)


def _message_fields(sections: Sections) -> MessageFields:
    """The fields of decoded sections (lenient about property types: peeked traffic is foreign)."""
    system: dict[str, Any] = {}
    fields = sections.properties or ()
    for name, index, is_timestamp in _PROPERTY_SLOTS:
        if index >= len(fields):
            break
        value = fields[index]
        if value is None:
            continue
        if is_timestamp:
            if value:  # 0 is how proton-based senders leave a time unset, so the epoch itself reads as unset
                system[name] = timestamp_to_datetime(value)
        else:
            system[name] = value.hex() if isinstance(value, bytes) else str(value)  # a binary id as hex
    header = sections.header or ()
    ttl = header[_TTL] if len(header) > _TTL else None
    if ttl:
        system["TimeToLive"] = int(ttl) / 1000
    count = header[_DELIVERY_COUNT] if len(header) > _DELIVERY_COUNT else None
    system["DeliveryCount"] = int(count or 0)
    annotations = {str(k): v for k, v in (sections.message_annotations or {}).items()}
    for key, value in annotations.items():
        read = _ANNOTATION_READS.get((key, value.__class__))
        if read is not None:
            system[read[0]] = value if read[1] is None else read[1](value)
            continue
        sys_name = _ANNOTATION_TO_SYS.get(key)
        if sys_name is None or value is None:
            continue
        try:
            typed = from_amqp(value)
            if typed.type is not _SYSTEM_TYPES[sys_name]:
                typed = TypedValue(_SYSTEM_TYPES[sys_name], typed.value)
        except (CodecError, model.TypedValueError) as exc:
            raise CodecError(f"message annotation {key}: {exc}") from None
        system[sys_name] = typed.value
    user: dict[str, TypedValue] = {}
    for key, value in (sections.application_properties or {}).items():
        try:
            user[str(key)] = from_amqp(value)
        except UnknownDescribedValue:
            continue  # .NET receivers drop another vendor's described types; filters do not see them
        except CodecError as exc:
            raise CodecError(f"application property {key!r}: {exc}") from None
    return MessageFields(system, user, _body_bytes(sections.body), annotations)


_SYSTEM_TYPES = model.SYSTEM_PROPERTIES
#: (system property, index in the properties section, whether a timestamp), in list order.
_PROPERTY_SLOTS = sorted(
    ((name, PROPERTIES_FIELDS.index(field), _SYSTEM_TYPES[name] is ValueType.TIMESTAMP)
     for name, field in PROPERTY_FIELDS.items()),
    key=lambda slot: slot[1],
)
#: (annotation, Python class of its decoded value) → (system property, conversion or None), for the
#: values whose AMQP type is the property's own (a long sequence number, a timestamp): read without
#: making a TypedValue, since every peeked message has several.
_ANNOTATION_READS = {
    (wire, kind): (name, convert)
    for name, wire in ANNOTATIONS.items()
    for kind, (vtype, convert) in UNCHECKED.items()
    if vtype is _SYSTEM_TYPES[name]
}
_TTL = HEADER_LIST_FIELDS.index(HEADER_FIELDS["TimeToLive"])
_DELIVERY_COUNT = HEADER_LIST_FIELDS.index(HEADER_FIELDS["DeliveryCount"])


def _model_view(payload: bytes, sections: Sections) -> DecodedMessage:
    fields = _message_fields(sections)
    return DecodedMessage(payload, sections, fields.model(), fields.annotations)


def _sections(payload: bytes) -> Sections:
    try:
        return Sections.decode(payload)
    except DecodeError as exc:
        raise CodecError(f"undecodable AMQP message ({len(payload)} bytes): {exc}") from None


def decode_message_fields(payload: bytes | memoryview) -> MessageFields:
    """Decode AMQP message bytes into their fields, without the model view (CodecError when they
    are not a message)."""
    return _message_fields(_sections(bytes(payload)))


_SEQUENCE_NUMBER = ANNOTATIONS["SequenceNumber"]


def sequence_number(payload: bytes) -> int:
    """A peeked or received message's sequence number, read from its message annotations without
    decoding the rest (CodecError when it has none or the bytes are not a message)."""
    try:
        annotations = read_section(payload, MESSAGE_ANNOTATIONS)
    except DecodeError as exc:
        raise CodecError(f"undecodable AMQP message ({len(payload)} bytes): {exc}") from None
    value = annotations.get(_SEQUENCE_NUMBER) if annotations is not None else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise CodecError(f"the message has no {_SEQUENCE_NUMBER} annotation")
    return int(value)


def decode_model_message(payload: bytes | memoryview) -> DecodedMessage:
    """Decode AMQP message bytes into the model view (CodecError when they are not a message)."""
    raw = bytes(payload)
    return _model_view(raw, _sections(raw))


def decode_transfer(payload: bytes | memoryview) -> list[DecodedMessage]:
    """The messages one transfer carries: those of a batch envelope, else the one message it is.

    The SDKs send ``send_messages([...])`` as one transfer with message-format 0x80013700: an
    envelope whose body is data sections only, each holding one complete encoded message (the
    envelope may copy the first message's properties). proton does not expose a delivery's
    message format, so the envelope is recognised by its shape: a body of data sections only,
    each of which is itself a message with a body.
    """
    raw = bytes(payload)
    sections = _sections(raw)
    if sections.body and all(code == DATA for code, _ in sections.body):
        inner = []
        for _, item in sections.body:
            try:
                item_sections = Sections.decode(item)
            except DecodeError:
                break
            if not item_sections.body:
                break
            inner.append((item, item_sections))
        else:
            return [_model_view(item, item_sections) for item, item_sections in inner]
    return [_model_view(raw, sections)]
