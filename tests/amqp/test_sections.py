"""Message sections: what proton writes reads back field by field, and what we write proton reads."""

from __future__ import annotations

import proton
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import int32, symbol, timestamp, ubyte, uint

from reconciler.amqp.wire import sections as s
from reconciler.amqp.wire.types import DecodeError

pytestmark = pytest.mark.unit

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)


def proton_message(payload: bytes) -> proton.Message:
    message = proton.Message()
    message.decode(payload)
    return message


def test_sections_of_a_proton_message():
    message = proton.Message(id="m1", correlation_id="c1", properties={"statusCode": 200}, body={"k": 1})
    message.ttl = 1.5
    sections = s.Sections.decode(bytes(message.encode()))
    assert sections.properties_field("message-id") == "m1"
    assert sections.properties_field("correlation-id") == "c1"
    assert sections.properties_field("group-id") is None  # past the list's end
    assert sections.header_field("ttl") == uint(1500)
    assert sections.application_properties == {"statusCode": 200}
    assert sections.body == [(s.AMQP_VALUE, {"k": 1})]
    assert sections.message_annotations is None and sections.footer is None


def test_a_section_must_be_a_described_section_code_of_its_shape():
    with pytest.raises(DecodeError, match="does not start a message section"):
        s.Sections.decode(b"\x41")
    with pytest.raises(DecodeError, match="unknown message section"):
        s.Sections.decode(b"\x00\x53\x10\x45")
    with pytest.raises(DecodeError, match="not a list"):
        s.Sections.decode(b"\x00\x53\x70\xa1\x01x")  # a header that is a string
    with pytest.raises(DecodeError, match="not a map"):
        s.Sections.decode(b"\x00\x53\x74\x45")  # application-properties that are a list


@settings(max_examples=100)
@given(
    st.none() | text,
    st.none() | text,
    st.none() | text,
    st.dictionaries(text, st.integers(-(2**63), 2**63 - 1) | text, max_size=4),
    st.dictionaries(st.text("abcdef", min_size=1, max_size=8).map(lambda k: symbol("x-" + k)), text, max_size=3),
    st.binary(max_size=300),
    st.integers(0, 2**32 - 1),
)
def test_read_and_written_again_is_the_same_message_to_proton(
    message_id, subject, group_id, properties, annotations, body, ttl_ms
):
    message = proton.Message(id=message_id, subject=subject, group_id=group_id, properties=properties or None,
                             annotations=annotations or None, body=body, inferred=True)
    message.ttl = ttl_ms / 1000
    payload = bytes(message.encode())
    again = proton_message(s.Sections.decode(payload).encode())
    assert (again.id, again.subject, again.group_id, again.ttl) == (message_id, subject, group_id, message.ttl)
    assert (again.properties or {}) == properties and (again.annotations or {}) == annotations
    assert again.body == body


def test_setting_a_field_keeps_every_other_field():
    message = proton.Message(id="m1", reply_to="r", priority=7, delivery_count=3, body="b")
    sections = s.Sections.decode(bytes(message.encode()))
    sections.set_properties_field("group-id", "g")
    sections.set_header_field("durable", True)
    again = proton_message(sections.encode())
    assert (again.id, again.reply_to, again.group_id) == ("m1", "r", "g")
    assert (again.durable, again.priority, again.delivery_count, again.body) == (True, 7, 3, "b")


def test_sections_are_written_in_the_spec_order_without_trailing_nulls():
    sections = s.Sections(
        footer={symbol("f"): 1},
        body=[(s.DATA, b"a"), (s.DATA, b"b")],
        properties=["id", None, None, None, None, None, None, None, None, None, None],
        message_annotations={symbol("x-opt-a"): timestamp(5)},
        header=[True, ubyte(4), None, False, uint(0)],
    )
    payload = sections.encode()
    decoded = s.Sections.decode(payload)
    assert decoded.properties == ["id"]
    assert decoded.header == [True, ubyte(4), None, False, uint(0)]
    assert decoded.body == [(s.DATA, b"a"), (s.DATA, b"b")] and decoded.footer == {symbol("f"): 1}
    assert proton_message(payload).annotations == {symbol("x-opt-a"): timestamp(5)}


def test_management_message_reads_back_with_proton():
    payload = s.encode_management_message(
        message_id="m1", reply_to="r", application_properties={"operation": "x", "n": uint(5)}, body={"k": [1]}
    )
    message = proton_message(payload)
    assert (message.id, message.reply_to, message.correlation_id) == ("m1", "r", None)
    assert message.properties == {"operation": "x", "n": 5} and message.body == {"k": [1]}


def test_management_message_from_proton():
    request = proton.Message(id="m1", reply_to="r", correlation_id="c", properties={"k": int32(1)}, body=[1])
    decoded = s.decode_management_message(bytes(request.encode()))
    assert (decoded.message_id, decoded.reply_to, decoded.correlation_id) == ("m1", "r", "c")
    assert decoded.properties == {"k": int32(1)} and decoded.body == [1]


def test_value_section_appended_to_a_bodiless_message_is_its_body():
    head = s.encode_management_message(correlation_id="c1", application_properties={"statusCode": int32(200)})
    decoded = proton_message(head + s.encode_value_section({"rules": [1, 2]}))
    assert decoded.correlation_id == "c1" and decoded.body == {"rules": [1, 2]}
