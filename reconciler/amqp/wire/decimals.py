"""AMQP decimal values ⇄ ``decimal.Decimal``, in the layout .NET writes and in IEEE 754's.

AMQP defines decimal128 as IEEE 754-2008 decimal128 in the binary integer (BID) encoding: a sign
bit, a 14-bit exponent biased by 6176 and a 113-bit coefficient. Microsoft.Azure.Amqp (used by the
.NET SDKs and, it is assumed, the broker) writes a .NET ``decimal`` differently: the exponent's top
five bits land in the first byte shifted by nine, not seven, its bits 7-8 are dropped, and the
96-bit coefficient fills the last twelve bytes (docs/protocol.md §10.2). Both layouts are in the
wild (Microsoft's Python SDK and proton-based producers write IEEE), so reading tells them apart by
the exponent field, and writing uses .NET's, which the .NET SDKs and Microsoft's Python SDK read.
"""

from __future__ import annotations

from decimal import Decimal

_BIAS128 = 6176
#: The 14-bit exponent field .NET writes for scale 0 (it decodes as 1568 - scale).
_DOTNET_FIELD_SCALE0 = 1568
_DOTNET_MAX_SCALE = 28


class DecimalLayoutError(ValueError):
    """Bytes that hold no finite decimal, or one .NET's decimal cannot represent."""


def encode_dotnet_decimal128(value: Decimal) -> bytes:
    """The 16 bytes Microsoft.Azure.Amqp writes for a .NET decimal (coefficient < 2**96, scale 0..28)."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int) or exponent > 0 or -exponent > _DOTNET_MAX_SCALE:
        raise DecimalLayoutError(f"{value} has no .NET decimal scale (0..28)")
    coefficient = int("".join(map(str, digits)) or "0")
    if coefficient >= 1 << 96:
        raise DecimalLayoutError(f"{value} is out of range for a .NET decimal")
    biased = _BIAS128 + exponent
    head = bytes([(0x80 if sign else 0) | (biased >> 9), (biased & 0x7F) << 1, 0, 0])
    return head + coefficient.to_bytes(12, "big")


def decode_decimal128(raw: bytes) -> Decimal:
    """A decimal128 in either layout. An exponent field of 1540..1568 is .NET's layout (scale =
    1568 - field), anything else IEEE BID; the IEEE range that holds .NET's scales is 6148..6176,
    so the two never overlap for the values .NET can send."""
    if len(raw) != 16:
        raise DecimalLayoutError(f"a decimal128 is 16 bytes, not {len(raw)}")
    bits = int.from_bytes(raw, "big")
    field, coefficient = _bid_fields(bits, 128, 14)
    if _DOTNET_FIELD_SCALE0 - _DOTNET_MAX_SCALE <= field <= _DOTNET_FIELD_SCALE0:
        return _decimal(bits >> 127, coefficient, field - _DOTNET_FIELD_SCALE0)
    return _decimal(bits >> 127, coefficient, field - _BIAS128)


def decode_decimal64(raw: int) -> Decimal:
    """An IEEE 754 decimal64 (BID), as the 64-bit integer the AMQP decoder reads."""
    field, coefficient = _bid_fields(raw, 64, 10)
    return _decimal(raw >> 63, coefficient, field - 398)


def decode_decimal32(raw: int) -> Decimal:
    """An IEEE 754 decimal32 (BID), as the 32-bit integer the AMQP decoder reads."""
    field, coefficient = _bid_fields(raw, 32, 8)
    return _decimal(raw >> 31, coefficient, field - 101)


def _bid_fields(bits: int, width: int, exponent_bits: int) -> tuple[int, int]:
    """(biased exponent, coefficient) of a BID encoding; infinities and NaNs are errors."""
    combination = (bits >> (width - 6)) & 0x1F
    if combination >> 1 == 0b1111:
        raise DecimalLayoutError("an infinite or NaN decimal has no .NET value")
    coefficient_bits = width - 1 - exponent_bits
    if combination >> 3 == 0b11:
        field = (bits >> (coefficient_bits - 2)) & ((1 << exponent_bits) - 1)
        coefficient = (0b100 << (coefficient_bits - 2)) | (bits & ((1 << (coefficient_bits - 2)) - 1))
    else:
        field = (bits >> coefficient_bits) & ((1 << exponent_bits) - 1)
        coefficient = bits & ((1 << coefficient_bits) - 1)
    return field, coefficient


def _decimal(sign: int, coefficient: int, exponent: int) -> Decimal:
    return Decimal((sign, tuple(map(int, str(coefficient))), exponent))
