"""A stored message split where the broker writes into it, so that peeks and deliveries cost one
small encode, not a decode and a re-encode of the whole message.

A message leaves the broker with its own header fields, its message annotations plus the broker's
(sequence number, enqueued time, lock, state), and its application properties plus any the broker
adds (dead-letter reason, properties-to-modify); every other section goes out as it came. Those
other sections are encoded once, when the message is stored, and spliced in as bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.amqp.wire.sections import (
    APPLICATION_PROPERTIES,
    DELIVERY_ANNOTATIONS,
    FOOTER,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    Sections,
    encode_section,
)


@dataclass(frozen=True)
class OutgoingParts:
    """What of a stored message the broker rewrites (decoded) and what it does not (encoded)."""

    priority: Any
    ttl: Any
    first_acquirer: bool
    #: The delivery-annotations section, encoded (b"" when absent): it precedes the message annotations.
    delivery_annotations: bytes
    annotations: dict[Any, Any]
    #: The properties section, encoded (b"" when absent).
    properties: bytes
    application_properties: dict[Any, Any] | None
    #: The application-properties section as it came, encoded (b"" when absent).
    application_properties_section: bytes
    #: The body sections and the footer, encoded.
    tail: bytes

    @classmethod
    def of(cls, sections: Sections) -> "OutgoingParts":
        def encoded(code: int, value: Any) -> bytes:
            return b"" if value is None else encode_section(code, value)

        tail = b"".join(encode_section(code, value) for code, value in sections.body)
        return cls(
            priority=sections.header_field("priority"),
            ttl=sections.header_field("ttl"),
            first_acquirer=bool(sections.header_field("first-acquirer")),
            delivery_annotations=encoded(DELIVERY_ANNOTATIONS, sections.delivery_annotations),
            annotations=dict(sections.message_annotations or {}),
            properties=encoded(PROPERTIES, sections.properties),
            application_properties=sections.application_properties,
            application_properties_section=encoded(APPLICATION_PROPERTIES, sections.application_properties),
            tail=tail + encoded(FOOTER, sections.footer),
        )

    def encode(self, header: list[Any], annotations: dict[Any, Any], extra_properties: dict[Any, Any]) -> bytes:
        """The message with ``header``, ``annotations`` (added to its own) and ``extra_properties``
        (added to its application properties)."""
        if extra_properties:
            application = encode_section(
                APPLICATION_PROPERTIES, {**(self.application_properties or {}), **extra_properties}
            )
        else:
            application = self.application_properties_section
        return b"".join((
            encode_section(HEADER, header),
            self.delivery_annotations,
            encode_section(MESSAGE_ANNOTATIONS, {**self.annotations, **annotations}),
            self.properties,
            application,
            self.tail,
        ))
