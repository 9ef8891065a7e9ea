""".NET scalar encodings a typed value's text and bytes follow: IEEE binary32, .NET decimal, 100 ns
ticks (DateTimeOffset, TimeSpan), UTC timestamps and absolute URIs, with the errors of reading them."""

from __future__ import annotations

import datetime as _dt
import math
import re
import struct
from decimal import Decimal
from urllib.parse import urlsplit

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class TypedValueError(ValueError):
    """A value that cannot be represented as the requested type."""


class NonFiniteValueError(TypedValueError):
    """NaN or an infinity where a person declares a value (rule files, an environment's variables)."""


# ------------------------------------------------------------------------------------------------
# float (IEEE binary32)
# ------------------------------------------------------------------------------------------------

_FLOAT32 = struct.Struct("<f")


def to_float32(value: float) -> float:
    """``value`` rounded to the nearest binary32 (ties to even), as the Python float holding it exactly."""
    try:
        return float(_FLOAT32.unpack(_FLOAT32.pack(value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def int_to_float32(value: int) -> float:
    """``(float)value`` in C#: one correct rounding of the integer (Python's ``float(int)`` would round twice)."""
    magnitude = abs(value)
    if magnitude < 2**53:
        return to_float32(float(value))
    shift = magnitude.bit_length() - 24
    quotient, remainder = divmod(magnitude, 1 << shift)
    half = 1 << (shift - 1)
    if remainder > half or (remainder == half and quotient & 1):
        quotient += 1
    return math.copysign(float(quotient << shift), value)


def float32_digits(value: float) -> str:
    """The shortest decimal text (``%g`` style) that reads back as the binary32 ``value``."""
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        if to_float32(float(text)) == value:
            return text
    return repr(value)  # pragma: no cover - nine significant digits always round-trip


# ------------------------------------------------------------------------------------------------
# decimal (.NET System.Decimal: a 96-bit coefficient and a scale of 0..28)
# ------------------------------------------------------------------------------------------------

DECIMAL_MAX_SCALE = 28
DECIMAL_MAX_COEFFICIENT = 2**96 - 1


def dotnet_decimal(value: Decimal) -> Decimal:
    """``value`` as a .NET decimal keeps it: the same coefficient and scale (``3.00`` stays ``3.00``).

    A positive exponent is multiplied out (``1E+3`` is ``1000``); negative zero is zero (.NET prints
    and compares it as 0). More than 28 digits after the point, or a coefficient beyond 96 bits,
    is not a .NET decimal.
    """
    if not value.is_finite():
        raise TypedValueError(f"a decimal must be finite, not {value}")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    coefficient = int("".join(map(str, digits)) or "0")
    if exponent > 0:
        coefficient *= 10**exponent
        exponent = 0
    if -exponent > DECIMAL_MAX_SCALE:
        raise TypedValueError(f"{value} has more than {DECIMAL_MAX_SCALE} digits after the point (a .NET decimal's limit)")
    if coefficient > DECIMAL_MAX_COEFFICIENT:
        raise TypedValueError(f"{value} is out of range for decimal (±79228162514264337593543950335)")
    return Decimal((sign if coefficient else 0, tuple(map(int, str(coefficient))), exponent))


def decimal_text(value: Decimal) -> str:
    """.NET ``decimal.ToString()``: every digit of the scale, never an exponent (``3.00``, ``-0.5``);
    a negative zero prints without its sign."""
    return format(value.copy_abs() if value.is_zero() else value, "f")


# ------------------------------------------------------------------------------------------------
# Ticks: DateTimeOffset and TimeSpan count 100-nanosecond ticks
# ------------------------------------------------------------------------------------------------

TICKS_PER_SECOND = 10_000_000
TICKS_PER_MICROSECOND = 10
#: Ticks from 0001-01-01T00:00:00Z (.NET's origin) to the Unix epoch.
UNIX_EPOCH_TICKS = 621_355_968_000_000_000
#: DateTimeOffset.MaxValue.UtcTicks (9999-12-31T23:59:59.9999999Z).
DATETIMEOFFSET_MAX_TICKS = 3_155_378_975_999_999_999
_TICKS_PER_DAY = 86_400 * TICKS_PER_SECOND

_DATETIME_TEXT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?(Z|[+-]\d{2}:\d{2})?\Z", re.IGNORECASE
)


def parse_datetimeoffset(text: str) -> int:
    """UtcTicks of ISO 8601 text with up to seven fraction digits; no offset means UTC."""
    match = _DATETIME_TEXT.match(text.strip())
    if match is None:
        raise TypedValueError(f"not an ISO 8601 date and time (e.g. 2024-01-02T03:04:05.1234567Z): {text!r}")
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    try:
        date = _dt.date(int(year), int(month), int(day))
        clock = _dt.time(int(hour), int(minute), int(second))
    except ValueError as exc:
        raise TypedValueError(f"not a valid date and time: {text!r} ({exc})") from None
    ticks = (date.toordinal() - 1) * _TICKS_PER_DAY
    ticks += (clock.hour * 3600 + clock.minute * 60 + clock.second) * TICKS_PER_SECOND
    ticks += int((fraction or "0").ljust(7, "0"))
    if offset and offset.upper() != "Z":
        hours, minutes = int(offset[1:3]), int(offset[4:6])
        shift = (hours * 3600 + minutes * 60) * TICKS_PER_SECOND
        ticks -= shift if offset[0] == "+" else -shift
    if not 0 <= ticks <= DATETIMEOFFSET_MAX_TICKS:
        raise TypedValueError(f"{text!r} is outside DateTimeOffset's range (years 1 to 9999, UTC)")
    return ticks


def format_datetimeoffset(ticks: int) -> str:
    """ISO 8601 in UTC with the fraction's significant digits (up to seven): ``2024-01-02T03:04:05.5Z``."""
    days, rest = divmod(ticks, _TICKS_PER_DAY)
    seconds, fraction = divmod(rest, TICKS_PER_SECOND)
    date = _dt.date.fromordinal(days + 1)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = f"{date.isoformat()}T{hours:02d}:{minutes:02d}:{seconds:02d}"
    if fraction:
        text += "." + f"{fraction:07d}".rstrip("0")
    return text + "Z"


_DURATION_TEXT = re.compile(
    r"(-)?P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:\.(\d{1,7}))?S)?)?\Z"
)


def parse_duration(text: str) -> int:
    """Ticks of an ISO 8601 duration in days, hours, minutes and seconds (``PT5M``, ``-P1DT0.5S``).

    Years and months are refused: their length in ticks depends on a calendar date.
    """
    stripped = text.strip()
    match = _DURATION_TEXT.match(stripped)
    if match is None or stripped.endswith(("P", "T")):
        if re.match(r"-?P(?:\d+[YW]|\d+M)", stripped):
            raise TypedValueError(f"{text!r}: a timespan has no years, months or weeks (write days: P30D)")
        raise TypedValueError(f"not an ISO 8601 duration such as PT5M, P1DT2H or PT0.5S: {text!r}")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    ticks = (int(days or 0) * 86_400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)) * TICKS_PER_SECOND
    ticks += int((fraction or "0").ljust(7, "0"))
    ticks = -ticks if sign else ticks
    if not INT64_MIN <= ticks <= INT64_MAX:
        raise TypedValueError(f"{text!r} is outside TimeSpan's range (±10675199 days)")
    return ticks


def split_ticks(ticks: int) -> tuple[str, int, int, int, int, int]:
    """``ticks`` as (sign, days, hours, minutes, seconds, ticks of the second): what every text form of a
    time span is written from."""
    seconds, fraction = divmod(abs(ticks), TICKS_PER_SECOND)
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    return ("-" if ticks < 0 else ""), days, hours, minutes, seconds, fraction


def format_duration(ticks: int) -> str:
    """The ISO 8601 duration of ``ticks`` in days, hours, minutes and seconds (``PT0S`` for zero)."""
    sign, days, hours, minutes, seconds, fraction = split_ticks(ticks)
    clock = ""
    if hours:
        clock += f"{hours}H"
    if minutes:
        clock += f"{minutes}M"
    if seconds or fraction:
        clock += str(seconds) + ("." + f"{fraction:07d}".rstrip("0") if fraction else "") + "S"
    text = f"{days}D" if days else ""
    if clock or not text:
        text += "T" + (clock or "0S")
    return f"{sign}P{text}"


# ------------------------------------------------------------------------------------------------
# timestamp (AMQP timestamp, .NET DateTime in UTC)
# ------------------------------------------------------------------------------------------------


def _parse_timestamp(text: str) -> _dt.datetime:
    try:
        parsed = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise TypedValueError(f"not an ISO 8601 timestamp: {text!r}") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.timezone.utc)
    return parsed.astimezone(_dt.timezone.utc)


def format_timestamp(value: _dt.datetime) -> str:
    text = value.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*\Z")


def _check_uri(text: str) -> str:
    """An absolute URI (what ``Uri.AbsoluteUri`` sends: .NET cannot send a relative one)."""
    try:
        scheme = urlsplit(text).scheme
    except ValueError as exc:
        raise TypedValueError(f"not a URI: {text!r} ({exc})") from None
    if not scheme or not _URI_SCHEME.match(scheme) or any(c.isspace() for c in text):
        raise TypedValueError(f"not an absolute URI such as https://example.com/path: {text!r}")
    return text
