"""Every application-property type on the wire: the bytes .NET producers send (docs/protocol.md §10),
read back exactly, and the decimal128 layouts of .NET and of IEEE 754 both understood."""

from __future__ import annotations

from decimal import Decimal

import proton
import pytest
from azure.servicebus._pyamqp import _decode as pyamqp_decode
from azure.servicebus._pyamqp import _encode as pyamqp_encode
from hypothesis import given
from hypothesis import strategies as st

from reconciler import model as m
from reconciler.amqp import codec as c
from reconciler.amqp import messages
from reconciler.amqp.wire.decimals import decode_decimal128, encode_dotnet_decimal128
from reconciler.amqp.wire.decode import decode_value
from reconciler.amqp.wire.encode import encode_value

from .strategies import TYPED_BY_TYPE, dotnet_decimals, typed_values

DTO = "00a31d" + b"com.microsoft:datetime-offset".hex()
TIMESPAN = "00a316" + b"com.microsoft:timespan".hex()
URI = "00a311" + b"com.microsoft:uri".hex()

#: (typed form, the bytes Microsoft.Azure.Amqp writes for the same .NET value)
WIRE = [
    ({"byte": -3}, "51fd"),
    ({"ubyte": 3}, "5003"),
    ({"short": 3}, "610003"),
    ({"ushort": 3}, "600003"),
    ({"int": 3}, "5403"),
    ({"uint": 3}, "5203"),
    (3, "5503"),
    ({"ulong": 2**64 - 1}, "80" + "ff" * 8),
    ({"float": 0.3}, "723e99999a"),
    (0.5, "823fe0000000000000"),
    ({"decimal": "0.1"}, "940c3e" + "00" * 13 + "01"),
    ({"decimal": "3"}, "940c40" + "00" * 13 + "03"),
    ({"decimal": "3.00"}, "940c3c" + "00" * 12 + "012c"),
    ({"decimal": "-1.5"}, "948c3e" + "00" * 13 + "0f"),
    ({"decimal": "0.0000000000000000000000000001"}, "940c08" + "00" * 13 + "01"),
    ({"decimal": "4294967296"}, "940c40" + "00" * 9 + "01" + "00" * 4),
    ({"decimal": "79228162514264337593543950335"}, "940c400000" + "ff" * 12),
    ({"char": "A"}, "7300000041"),
    ({"symbol": "abc"}, "a303616263"),
    ({"datetimeoffset": "2024-01-02T03:04:05.678Z"}, DTO + "8108dc0b3f7b2734e0"),
    ({"timespan": "PT5M"}, TIMESPAN + "8100000000b2d05e00"),
    ({"uri": "https://example.com/"}, URI + "a114" + b"https://example.com/".hex()),
]


@pytest.mark.parametrize("form, wire", WIRE, ids=[str(f) for f, _ in WIRE])
def test_each_type_encodes_as_dotnet_does_and_reads_back(form, wire):
    value = m.TypedValue.from_typed_form(form)
    assert encode_value(c.to_amqp(value)).hex() == wire
    assert c.from_amqp(decode_value(bytes.fromhex(wire))) == value


@given(typed_values)
def test_proton_reads_our_bytes_as_the_same_amqp_type(value):
    """The independent AMQP stack (proton-c) decodes every encoding to the type we meant."""
    data = proton.Data()
    data.decode(encode_value(c.to_amqp(value)))
    decoded = data.get_object()
    assert c.from_amqp(decoded if not isinstance(decoded, memoryview) else bytes(decoded)) == value


@given(dotnet_decimals)
def test_ieee_decimal128_from_pythons_sdk_reads_as_the_same_decimal(value):
    """Microsoft's Python SDK (and proton producers) write IEEE 754 BID; the decoder tells the layouts apart."""
    out = bytearray()
    pyamqp_encode.encode_decimal128(out, value, with_constructor=False)
    assert m.TypedValue("decimal", decode_decimal128(bytes(out))) == m.TypedValue("decimal", value)


@pytest.mark.parametrize("text", ["0.1", "3.00", "-1.5", "0.0000000000000000000000000001", "4294967295"])
def test_pythons_sdk_reads_the_dotnet_layout_we_write(text):
    """The Python SDK's receiver assumes .NET's layout (and is correct for coefficients below 2**32)."""
    _, decoded = pyamqp_decode._decode_decimal128(memoryview(encode_dotnet_decimal128(Decimal(text))))
    assert decoded.as_tuple() == Decimal(text).as_tuple()


def test_decimals_dotnet_cannot_hold_are_codec_errors():
    nan = bytes([0x7C]) + bytes(15)
    with pytest.raises(c.CodecError, match="NaN"):
        c.from_amqp(proton.decimal128(nan))
    tiny = bytearray(16)  # IEEE exponent -6176: far more than 28 digits after the point
    tiny[15] = 1
    with pytest.raises(c.CodecError, match="28 digits"):
        c.from_amqp(proton.decimal128(bytes(tiny)))


def test_ieee_decimal32_and_64_read_as_decimal():
    assert c.from_amqp(proton.decimal32(0x3200000F)) == m.TypedValue("decimal", "1.5")  # 15 × 10^-1
    assert c.from_amqp(proton.decimal64(0x31A0000000000019)) == m.TypedValue("decimal", "2.5")


@given(st.fixed_dictionaries({vtype.value: strategy for vtype, strategy in TYPED_BY_TYPE.items()}))
def test_every_type_crosses_a_message_unchanged(values):
    message = m.Message(user=values)
    assert messages.decode_model_message(messages.encode_model_message(message)).message.user == values


@pytest.mark.parametrize(
    "value, message",
    [([1], "list"), ({"k": 1}, "map"), (proton.Described(proton.symbol("com.microsoft:timespan"), "x"), "must describe a long")],
)
def test_values_no_property_can_hold_are_refused(value, message):
    with pytest.raises(c.CodecError, match=message):
        c.from_amqp(value)
