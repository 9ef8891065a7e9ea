"""The message codec: model messages ⇄ AMQP message bytes, checked against proton's own Message."""

from __future__ import annotations

import datetime as dt

import proton
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import short, symbol

from reconciler import model as m
from reconciler.amqp import codec as c
from reconciler.amqp import messages

from .strategies import ms_datetimes, names, typed_values

pytestmark = pytest.mark.unit


def proton_message(payload: bytes) -> proton.Message:
    message = proton.Message()
    message.decode(payload)
    return message


def test_message_round_trip_with_annotations():
    enq = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.timezone.utc)
    msg = m.Message(
        sys={
            "MessageId": m.TypedValue("string", "m1"), "Label": m.TypedValue("string", "order"),
            "SessionId": m.TypedValue("string", "s1"), "ContentType": m.TypedValue("string", "text/plain"),
            "SequenceNumber": m.TypedValue("long", 42), "EnqueuedTimeUtc": m.TypedValue("timestamp", enq),
            "TimeToLive": m.TypedValue("double", 60.0), "DeliveryCount": m.TypedValue("int", 2),
        },
        user={"color": m.TypedValue("string", "red"), "n": m.TypedValue("int", 3), "big": m.TypedValue("long", 2**40)},
        body=b"hello",
    )
    payload = messages.encode_model_message(msg, {"x-opt-partition-id": short(3)})
    decoded = messages.decode_model_message(payload)
    assert decoded.message.sys == msg.sys
    assert decoded.message.user == msg.user
    assert decoded.message.body == b"hello"
    assert decoded.annotations["x-opt-sequence-number"] == 42
    assert decoded.annotations["x-opt-partition-id"] == 3
    assert decoded.size == len(payload)


system_strings = st.sampled_from(["MessageId", "CorrelationId", "To", "ReplyTo", "Label", "SessionId"])
no_nul = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
ascii_text = st.text(st.characters(min_codepoint=1, max_codepoint=127), max_size=20)
model_messages = st.builds(
    lambda sys_props, extra, user, body: m.Message(sys={**sys_props, **extra}, user=user, body=body),
    st.dictionaries(system_strings, no_nul.map(lambda v: m.TypedValue("string", v)), max_size=4)
    | st.fixed_dictionaries({"ContentType": ascii_text.map(lambda v: m.TypedValue("string", v))}),
    st.fixed_dictionaries({}, optional={
        "SequenceNumber": st.integers(1, m.INT64_MAX).map(lambda v: m.TypedValue("long", v)),
        "TimeToLive": st.integers(1, 2**32 - 1).map(lambda ms: m.TypedValue("double", ms / 1000)),
        # Not the epoch itself, which the properties section cannot tell from an unset time (0).
        "ExpiresAtUtc": ms_datetimes.filter(lambda v: v.timestamp() != 0).map(lambda v: m.TypedValue("timestamp", v)),
        "DeliveryCount": st.integers(0, m.INT32_MAX).map(lambda v: m.TypedValue("int", v)),
    }),
    st.dictionaries(names, typed_values.filter(lambda tv: tv.type is not m.ValueType.NULL), max_size=5),
    st.binary(max_size=300),
)


@settings(max_examples=80)
@given(model_messages)
def test_message_round_trip_property(msg):
    decoded = messages.decode_model_message(messages.encode_model_message(msg))
    assert decoded.message.sys == {"DeliveryCount": m.TypedValue("int", 0), **msg.sys}
    assert decoded.message.user == msg.user and decoded.message.body == msg.body


#: System property → how proton.Message exposes the field it is written to.
PROTON_FIELDS = {
    "MessageId": "id", "CorrelationId": "correlation_id", "To": "address", "ReplyTo": "reply_to",
    "Label": "subject", "SessionId": "group_id", "ContentType": "content_type",
}


@settings(max_examples=80)
@given(model_messages)
def test_proton_reads_each_field_where_the_protocol_puts_it(msg):
    received = proton_message(messages.encode_model_message(msg))
    for name, attribute in PROTON_FIELDS.items():
        expected = msg.sys[name].value if name in msg.sys else None
        if expected is None and name == "ContentType":
            continue  # proton shows an absent content-type as symbol('None')
        assert (getattr(received, attribute) or None) == (expected or None), name
    ttl = msg.sys.get("TimeToLive")
    assert received.ttl == (ttl.value if ttl else 0)
    expires = msg.sys.get("ExpiresAtUtc")
    assert received.expiry_time == (c.datetime_to_timestamp(expires.value) / 1000 if expires else 0)
    count = msg.sys.get("DeliveryCount")
    assert received.delivery_count == (count.value if count else 0)
    sequence = msg.sys.get("SequenceNumber")
    assert (received.annotations or {}).get(symbol("x-opt-sequence-number")) == (sequence.value if sequence else None)
    assert (received.properties or {}) == {k: c.to_amqp(v) for k, v in msg.user.items()}
    assert received.body == msg.body


def test_decode_keeps_every_property_type_and_drops_foreign_described_values():
    foreign = proton.Described(symbol("vendor:thing"), 1)
    msg = proton.Message(body="text body", properties={"s": short(5), "sym": symbol("v"), "x": foreign})
    decoded = messages.decode_model_message(msg.encode())
    assert decoded.message.user == {"s": m.TypedValue("short", 5), "sym": m.TypedValue("symbol", "v")}
    assert decoded.message.body == b"text body"
    with pytest.raises(c.CodecError, match="undecodable"):
        messages.decode_model_message(b"\x00garbage")


def test_binary_message_id_reads_as_hex():
    decoded = messages.decode_model_message(proton.Message(id=b"\x01\x02", body=b"").encode())
    assert decoded.message.sys["MessageId"] == m.TypedValue("string", "0102")


def test_fields_a_receiver_could_not_carry_are_refused_not_truncated():
    with pytest.raises(c.CodecError, match="ASCII"):
        messages.encode_model_message(m.Message(sys={"ContentType": m.TypedValue("string", "tëxt")}))
    with pytest.raises(c.CodecError, match="NUL"):
        messages.encode_model_message(m.Message(sys={"To": m.TypedValue("string", "a\x00b")}))


def _envelope(inner: list[bytes], first_id: str = "first") -> bytes:
    data = proton.Data()
    for item in inner:
        data.put_described()
        data.enter()
        data.put_ulong(0x75)
        data.put_binary(item)
        data.exit()
    return bytes(proton.Message(id=first_id).encode()) + bytes(data.encode())


def test_a_batch_envelope_is_split_into_its_messages():
    inner = [bytes(proton.Message(id=f"m{i}", body=f"m{i}").encode()) for i in range(3)]
    decoded = messages.decode_transfer(_envelope(inner))
    assert [d.payload for d in decoded] == inner
    assert [d.message.sys["MessageId"].value for d in decoded] == ["m0", "m1", "m2"]


def test_plain_messages_are_not_split():
    amqp_value_body = bytes(proton.Message(body=b"\x00Sw\xa1\x01x").encode())
    data_not_a_message = _envelope([b"\x00Sw\xa1\x01x", b"plain bytes"])
    for payload in (amqp_value_body, data_not_a_message):
        (decoded,) = messages.decode_transfer(payload)
        assert decoded.payload == payload


@pytest.mark.parametrize("name, value", [("TimeToLive", m.TypedValue("double", -1.0)),
                                         ("TimeToLive", m.TypedValue("double", 5e9)),
                                         ("DeliveryCount", m.TypedValue("int", -1))])
def test_header_fields_out_of_a_uint_are_refused(name, value):
    with pytest.raises(c.CodecError, match=f"{name} is out of range"):
        messages.encode_model_message(m.Message(sys={name: value}))


def test_a_messages_sequence_number_is_read_alone():
    """The sampler places its next pages by sequence numbers read without decoding the messages."""
    msg = m.Message(sys={"SequenceNumber": m.TypedValue("long", 42), "MessageId": m.TypedValue.infer("x")}, body=b"b")
    payload = messages.encode_model_message(msg)
    assert messages.sequence_number(payload) == 42
    without = messages.encode_model_message(m.Message(sys={"MessageId": m.TypedValue.infer("x")}))
    with pytest.raises(c.CodecError, match="x-opt-sequence-number"):
        messages.sequence_number(without)
    with pytest.raises(c.CodecError, match="undecodable"):
        messages.sequence_number(b"\x00Sr\xc1\x09\x02")  # message annotations cut short
