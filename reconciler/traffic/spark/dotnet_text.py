""".NET text of values (``Convert.ToString``, invariant culture), as Spark Columns.

String ``+`` and LIKE compare the text a value has in .NET. Property cells carry it already (a sample
stores every non-null property value's text in ``s``), and so do literals; what remains is the
text of computed values: numbers, booleans, timestamps and time spans.

Known approximation: a double is formatted like .NET Core 3.0+ (:func:`dotnet_double_text`) from
Spark's own text; the JVM's ``Double.toString`` before JDK 19 is not always the shortest round-trip
form, on ordinary values too (``-18841273551008952`` for .NET's ``-18841273551008950``; ``4.9E-324``),
and then the text differs from .NET's.
A computed float has no translation (:class:`Untranslatable`): ``Float.toString`` of JDK 17 errs
the same way on ordinary values (``1.4E-45`` for .NET's ``1E-45``), so its rules run in the Python
evaluator.
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from reconciler.traffic.spark.algebra import INTEGRAL, Cond, Untranslatable, Val, bound, when_chain


def dotnet_double_text(d: Column) -> Column:
    """``double.ToString()`` of .NET Core 3.0+: shortest round-trip digits, ``E+XX`` when the point
    would sit more than max(digits, 17) places right of the first digit or more than 4 left of it.

    The formatting reads its operand a dozen times and the digits and exponent many times more, so
    both are bound once (:func:`~reconciler.traffic.spark.algebra.bound`): inlined, a computed
    operand was copied into the expression about a hundred times."""
    return bound(d, lambda x: bound(_digits_and_exponent(x), lambda parts: _dotnet_text(x, parts)))


def _digits_and_exponent(d: Column) -> Column:
    """``struct(digits, e)``: the shortest round-trip digits of ``|d|`` without leading or trailing
    zeros, and the decimal exponent of the first one, from the JVM's text ("123.45", "1.0E20")."""
    java = F.abs(d).cast("string")
    mantissa = F.regexp_extract(java, r"^([0-9.]+)", 1)
    exp_text = F.regexp_extract(java, r"E(-?[0-9]+)$", 1)
    exponent = F.when(exp_text == "", F.lit(0)).otherwise(exp_text.try_cast("int"))
    int_part = F.substring_index(mantissa, ".", 1)
    all_digits = F.concat(int_part, F.substring_index(mantissa, ".", -1))
    no_lead = F.regexp_replace(all_digits, "^0+", "")
    digits = F.regexp_replace(no_lead, "0+$", "")
    e = F.length(int_part) + exponent - 1 - (F.length(all_digits) - F.length(no_lead))
    return F.named_struct(F.lit("digits"), digits, F.lit("e"), e)


def _dotnet_text(d: Column, parts: Column) -> Column:
    digits, e = parts.getField("digits"), parts.getField("e")
    n = F.length(digits)
    scientific = F.concat(
        F.substring(digits, 1, 1),
        F.when(n > 1, F.concat(F.lit("."), F.substring(digits, 2, 400))).otherwise(F.lit("")),
        F.lit("E"),
        F.when(e < 0, F.lit("-")).otherwise(F.lit("+")),
        F.when(F.abs(e) < 10, F.lit("0")).otherwise(F.lit("")),  # at least two digits (lpad would cut 300 to 30)
        F.abs(e).cast("string"),
    )
    fixed = (
        F.when(e < 0, F.concat(F.lit("0."), F.repeat(F.lit("0"), -e - 1), digits))
        .when(n <= e + 1, F.concat(digits, F.repeat(F.lit("0"), e + 1 - n)))
        .otherwise(F.concat(F.substring(digits, 1, e + 1), F.lit("."), F.substring(digits, e + 2, 400)))
    )
    body = F.when((e + 1 > F.greatest(n, F.lit(17))) | (e < -4), scientific).otherwise(fixed)
    return (
        F.when(F.isnan(d), F.lit("NaN"))
        .when(d == F.lit(float("inf")), F.lit("Infinity"))
        .when(d == F.lit(float("-inf")), F.lit("-Infinity"))
        .when(d == 0, F.when(d.cast("string").startswith("-"), F.lit("-0")).otherwise(F.lit("0")))
        .otherwise(F.concat(F.when(d < 0, F.lit("-")).otherwise(F.lit("")), body))
    )


def text_of(value: Val) -> Column:
    """The .NET text form of a known (non-missing) value: what ``+`` and LIKE see."""
    if value.text is not None:
        return value.text
    if "float" in value.tags:
        raise Untranslatable("the .NET text of a computed float (JDK 17's Float.toString is not the shortest)")
    branches: list[tuple[Cond, Callable[[], Column]]] = [
        (value.is_({"string", "symbol", "uuid", "char"}), lambda: value.s),
        (value.is_({"null"}), lambda: F.lit("")),
        (value.is_({"bool"}), lambda: F.when(value.b, F.lit("True")).otherwise(F.lit("False"))),
        (value.is_({"ulong"}), lambda: _ulong_text(value.l)),
        (value.is_(INTEGRAL), lambda: value.l.cast("string")),
        (value.is_({"double"}), lambda: dotnet_double_text(value.d)),
        (value.is_({"timestamp"}), lambda: F.date_format(F.timestamp_micros(value.l), "MM/dd/yyyy HH:mm:ss")),
        (value.is_({"timespan"}), lambda: timespan_text(value.l)),
    ]
    out = when_chain([(c, make()) for c, make in branches if c is not False], "string")
    return out if out is not None else F.lit(None).cast("string")


def _ulong_text(bits: Column) -> Column:
    """A ulong's digits from its 64 bits read signed."""
    unsigned = bits.cast("decimal(20,0)") + F.lit(str(2**64)).cast("decimal(20,0)")
    return F.when(bits < 0, unsigned.cast("string")).otherwise(bits.cast("string"))


def timespan_text(micros: Column) -> Column:
    """.NET ``TimeSpan.ToString()``: ``[-][d.]hh:mm:ss[.fffffff]``."""
    total = F.abs(micros)
    seconds = F.floor(total / 1_000_000).cast("bigint")
    ticks = (total % 1_000_000) * 10
    days = F.floor(seconds / 86_400).cast("bigint")
    return F.concat(
        F.when(micros < 0, F.lit("-")).otherwise(F.lit("")),
        F.when(days > 0, F.concat(days.cast("string"), F.lit("."))).otherwise(F.lit("")),
        F.format_string("%02d:%02d:%02d", F.floor((seconds % 86_400) / 3600), F.floor((seconds % 3600) / 60), seconds % 60),
        F.when(ticks > 0, F.format_string(".%07d", ticks)).otherwise(F.lit("")),
    )
