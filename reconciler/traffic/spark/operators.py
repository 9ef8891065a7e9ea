"""The Service Bus operators over compiled values: arithmetic, comparison, IN and LIKE.

Spark's own ``=``, ``IN``, ``LIKE``, ``/`` and ``+`` cast silently, return NULL where Service Bus
returns FALSE or fails, and change with ``spark.sql.ansi.enabled``. So nothing here lets Spark
coerce: every operator is an ordered ``CASE`` over its operands' type tags that mirrors the C#
operator table (docs/sql-language.md §5), built with :mod:`reconciler.traffic.spark.algebra`.
Integer overflow uses ``try_*`` functions, and division guards replace a zero divisor before
dividing, so results do not depend on ANSI mode.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from reconciler.limits import SQL_STRING_RESULT
from reconciler.model import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from reconciler.sql.values import NEGATION, promote
from reconciler.traffic.sample.rows import micros_since_epoch
from reconciler.traffic.spark.algebra import (
    INTEGRAL,
    MISSING_TAG,
    NUMERIC,
    STRINGS,
    TIMES,
    Branch,
    Case,
    Cond,
    Pred,
    Untranslatable,
    Val,
    all_of,
    any_of,
    first_error,
    let,
    pred_case,
    reachable,
    val_case,
    with_error,
)
from reconciler.traffic.spark.dotnet_text import text_of
from reconciler.typed_values import INTEGER_RANGES, ValueType

DATETIME_MIN = micros_since_epoch(_dt.datetime(1, 1, 1, tzinfo=_dt.timezone.utc))
DATETIME_MAX = micros_since_epoch(_dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=_dt.timezone.utc))


_UINT_MAX = INTEGER_RANGES[ValueType.UINT][1]
_ULONG_MAX = INTEGER_RANGES[ValueType.ULONG][1]
_UNSIGNED = "decimal(20,0)"  # every 64-bit integer, signed or not
#: The types a promoted operation computes in, in the order C#'s promotion picks them.
_RESULTS = ("int", "uint", "long", "ulong", "float", "double")
_EACH_RESULT = tuple((result,) for result in _RESULTS)


def _wide(number: int) -> Column:
    """An integer beyond bigint as a decimal literal."""
    return F.lit(str(number)).cast("decimal(38,0)")


def _unsigned(value: Val) -> Column:
    """An integer operand as its exact value: a ulong's bits read signed are negative above
    2**63 - 1, other integers are what ``l`` says (a negative short stays negative)."""
    number = value.l.cast(_UNSIGNED)
    wrapped = all_of(value.is_({"ulong"}), value.l < 0)
    return number if wrapped is False else F.when(wrapped, number + _wide(2**64)).otherwise(number)


def _as_double(value: Val) -> Column:
    """A number as the double C# converts it to (a float is already its binary32 value in ``d``)."""
    integral = value.tags & INTEGRAL
    if not integral:
        return value.d
    whole = _unsigned(value).cast("double") if "ulong" in integral else value.l.cast("double")
    if not value.tags & {"float", "double"}:
        return whole
    return F.when(value.is_({"float", "double"}), value.d).otherwise(whole)


def _as_float(value: Val) -> Column:
    """A number converted to float (one rounding to binary32), held in a double."""
    integral = value.tags & INTEGRAL
    if not integral:
        return value.d
    whole = (_unsigned(value) if "ulong" in integral else value.l).cast("float").cast("double")
    if not value.tags & {"float"}:
        return whole
    return F.when(value.is_(INTEGRAL), whole).otherwise(value.d)


def _promoted_cases(make: Callable[[str], Callable[[], Any]], groups: tuple[tuple[str, ...], ...] = _EACH_RESULT) -> list[Case]:
    """One case per group of result types of C#'s numeric promotion (``values.promote``, the one
    table; ``make`` gets the group's first), first match winning: a case also takes the pairs of
    earlier groups (already taken), which keeps each condition one product of tag sets where the
    operands' tags allow (for int, long and double operands, the conditions of those types alone)."""
    cases: list[Case] = []
    done: tuple[str, ...] = ()
    for group in groups:
        done += group

        def cond(x: Val, y: Val, results: tuple[str, ...] = done) -> Cond:
            by_right: dict[frozenset[str], set[str]] = {}
            for left in sorted(x.tags & NUMERIC):
                rights = frozenset(right for right in y.tags & NUMERIC if promote(left, right) in results)
                if rights:
                    by_right.setdefault(rights, set()).add(left)
            return any_of(*(all_of(x.is_(lefts), y.is_(rights)) for rights, lefts in by_right.items()))

        cases.append((cond, make(group[0])))
    return cases


def _mismatch(op: str, a: Val, b: Val) -> Column:
    return F.concat(F.lit("type mismatch: "), a.tag_col(), F.lit(f" {op} "), b.tag_col())


def _any_missing(a: Val, b: Val) -> Cond:
    return any_of(a.is_({MISSING_TAG}), b.is_({MISSING_TAG}))


def _numeric_cases(op: str, a: Val, b: Val) -> list[Case]:
    """Arithmetic in the promoted type: checked integers, unsigned 64-bit through decimals,
    float rounded to binary32 after each operation, double; no common type falls through (error)."""

    def make(result: str) -> Callable[[], Any]:
        def build() -> Any:
            if result in ("int", "uint", "long"):
                low, high = {"int": (INT32_MIN, INT32_MAX), "uint": (0, _UINT_MAX), "long": (INT64_MIN, INT64_MAX)}[result]
                value, err = _integral_op(op, a.l, b.l, low, high, wide=result == "int")
                return frozenset({result}), {"l": value, "err": err}
            if result == "ulong":
                value, err = _ulong_op(op, _unsigned(a), _unsigned(b))
                return frozenset({result}), {"l": value, "err": err}
            if result == "float":
                return frozenset({result}), {"d": _double_op(op, _as_float(a), _as_float(b)).cast("float").cast("double")}
            return frozenset({result}), {"d": _double_op(op, _as_double(a), _as_double(b))}

        return build

    return _promoted_cases(make)


def _integral_op(op: str, x: Column, y: Column, low: int, high: int, wide: bool) -> tuple[Column, Column]:
    """Checked C# integer arithmetic in [low, high]. ``wide``: operands are Int32 held in a bigint
    (their + - * cannot overflow it); otherwise ``try_*`` (NULL on bigint overflow) guards."""
    overflow = F.lit(f"arithmetic overflow in {op}")
    if op in ("/", "%"):
        zero = y == 0
        min_div = (x == low) & (y == -1)
        safe_y = F.when(zero | min_div, F.lit(1).cast("bigint")).otherwise(y)
        value = F.call_function("div", x, safe_y) if op == "/" else x % safe_y
        return value, F.when(zero, F.lit("division by zero")).when(min_div, overflow)
    if wide:
        value = {"+": x + y, "-": x - y, "*": x * y}[op]
        return value, F.when((value < low) | (value > high), overflow)
    value = {"+": F.try_add, "-": F.try_subtract, "*": F.try_multiply}[op](x, y)
    if (low, high) == (INT64_MIN, INT64_MAX):
        return value, F.when(value.isNull(), overflow)
    return value, F.when(value.isNull() | (value < low) | (value > high), overflow)


def _ulong_op(op: str, x: Column, y: Column) -> tuple[Column, Column]:
    """Checked unsigned 64-bit arithmetic on decimal(20,0) operands; the result as its bits in a bigint."""
    overflow = F.lit(f"arithmetic overflow in {op}")
    if op in ("/", "%"):
        zero = y == 0
        safe_y = F.when(zero, F.lit(1).cast(_UNSIGNED)).otherwise(y)
        rough = F.floor(x / safe_y).cast("decimal(38,0)")  # the decimal quotient may round up past an integer
        quotient = F.when(rough * safe_y > x, rough - 1).otherwise(rough)
        value = quotient if op == "/" else x - quotient * safe_y
        err = F.when(zero, F.lit("division by zero"))
    else:
        value = {"+": F.try_add, "-": F.try_subtract, "*": F.try_multiply}[op](x, y)
        err = F.when(value.isNull() | (value < 0) | (value > _wide(_ULONG_MAX)), overflow)
    bits = F.when(value > INT64_MAX, value - _wide(2**64)).otherwise(value).cast("bigint")
    return F.when(err.isNull(), bits), err


def _double_op(op: str, x: Column, y: Column) -> Column:
    """IEEE double arithmetic; Spark returns NULL / raises on ``/ 0``, C# gives ±Infinity / NaN."""
    if op in ("+", "-", "*"):
        return {"+": x + y, "-": x - y, "*": x * y}[op]
    zero = y == 0
    safe_y = F.when(zero, F.lit(1.0)).otherwise(y)
    if op == "%":
        return F.when(zero | F.isnan(y), F.lit(float("nan"))).otherwise(x % safe_y)
    y_negative = F.when(zero, y.cast("string").startswith("-")).otherwise(y < 0)  # -0.0 counts
    signed_inf = F.when((x > 0) != y_negative, F.lit(float("inf"))).otherwise(F.lit(float("-inf")))
    return F.when(zero, F.when((x == 0) | F.isnan(x), F.lit(float("nan"))).otherwise(signed_inf)).otherwise(x / safe_y)


def arithmetic(op: str, a: Val, b: Val) -> Val:
    """``+ - * / %`` (§5.5): a missing operand first, then string concatenation, numbers, null, errors."""
    return let([a, b], lambda x, y: _arithmetic(op, x, y))


def _arithmetic(op: str, a: Val, b: Val) -> Val:
    cases: list[Case] = [(_any_missing, lambda: (frozenset({MISSING_TAG}), {}))]
    if op == "+":

        def concat() -> Any:
            text = F.concat(text_of(a), text_of(b))
            utf16_units = F.octet_length(F.encode(text, "UTF-16LE")) / 2  # as .NET counts (limits.dotnet_length)
            too_long = F.when(utf16_units > SQL_STRING_RESULT.value, F.lit(f"string longer than {SQL_STRING_RESULT.value}"))
            return frozenset({"string"}), {"s": text, "err": too_long}

        cases.append((lambda x, y: any_of(x.is_(STRINGS), y.is_(STRINGS)), concat))
    cases += _numeric_cases(op, a, b)
    lifted = NUMERIC
    if op in ("+", "-"):
        cases += _time_cases(op, a, b)
        lifted = NUMERIC | TIMES
    cases.append(
        (
            lambda x, y: any_of(all_of(x.is_({"null"}), y.is_(lifted)), all_of(x.is_(lifted), y.is_({"null"}))),
            lambda: (frozenset({"null"}), {}),
        )
    )
    cases.append((lambda x, y: True, lambda: (frozenset({MISSING_TAG}), {"err": _mismatch(op, a, b)})))
    result = val_case(Branch(cond, tags, fields) for cond, (tags, fields) in reachable([a, b], cases))
    return with_error(result, first_error(a.err, b.err, result.err))


def _time_cases(op: str, a: Val, b: Val) -> list[Case]:
    """DateTime ± TimeSpan, DateTime − DateTime, TimeSpan ± TimeSpan (C# operators; µs resolution)."""
    ts, span = frozenset({"timestamp"}), frozenset({"timespan"})
    pairs = [(ts, span, "timestamp"), (span, span, "timespan")]
    pairs.append((span, ts, "timestamp") if op == "+" else (ts, ts, "timespan"))

    def build(result: str) -> Callable[[], Any]:
        def make() -> Any:
            value = a.l + b.l if op == "+" else a.l - b.l
            err = None
            if result == "timestamp":
                err = F.when((value < DATETIME_MIN) | (value > DATETIME_MAX), F.lit("DateTime arithmetic out of range"))
            return frozenset({result}), {"l": value, "err": err}

        return make

    return [
        (lambda x, y, left=left, right=right: all_of(x.is_(left), y.is_(right)), build(result)) for left, right, result in pairs
    ]


def negate(a: Val) -> Val:
    """Unary minus: numbers (checked), a missing operand stays missing, anything else is an error."""
    return let([a], _negate)


def _negate(a: Val) -> Val:
    """C#'s unary minus: small integers negate as int, uint as long, float and double keep their
    type; ulong has no unary minus (an error)."""

    def int_negation() -> Any:  # every operand fits an int: only int.MinValue overflows
        return frozenset({"int"}), {"l": -a.l, "err": F.when(a.l == INT32_MIN, F.lit("arithmetic overflow in -"))}

    def long_negation() -> Any:
        value = F.try_subtract(F.lit(0).cast("bigint"), a.l)
        return frozenset({"long"}), {"l": value, "err": F.when(value.isNull(), F.lit("arithmetic overflow in -"))}

    def negated(result: str) -> Callable[[], Any]:
        return lambda: (frozenset({result}), {"d": -a.d})

    cases: list[Case] = [(lambda x: x.is_({MISSING_TAG}), lambda: (frozenset({MISSING_TAG}), {}))]
    for negated_type, build in (
        ("int", int_negation),
        ("long", long_negation),
        ("float", negated("float")),
        ("double", negated("double")),
    ):
        operand_tags = frozenset(tag for tag, to in NEGATION.items() if to == negated_type and tag in NUMERIC)
        cases.append((lambda x, tags=operand_tags: x.is_(tags), build))
    cases += [
        (lambda x: x.is_({"timespan"}), lambda: (frozenset({"timespan"}), {"l": -a.l})),
        (lambda x: True, lambda: (frozenset({MISSING_TAG}), {"err": F.concat(F.lit("cannot negate "), a.tag_col())})),
    ]
    result = val_case(Branch(cond, tags, fields) for cond, (tags, fields) in reachable([a], cases))
    return with_error(result, first_error(a.err, result.err))


_COMPARE: dict[str, Callable[[Column, Column], Column]] = {
    "=": lambda x, y: x == y,
    "<>": lambda x, y: x != y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}


def compare(op: str, a: Val, b: Val) -> Pred:
    """``= <> < <= > >=`` per the C# table of §5.4 (null semantics, no coercion, NaN never equal)."""
    return let([a, b], lambda x, y: _compare(op, x, y))


def _compare(op: str, a: Val, b: Val) -> Pred:
    equality = op in ("=", "<>")
    cmp = _COMPARE[op]
    ordered = NUMERIC | TIMES

    def doubles() -> Any:
        x, y = _as_double(a), _as_double(b)
        return F.when(F.isnan(x) | F.isnan(y), F.lit(op == "<>")).otherwise(cmp(x, y)), None

    cases: list[Case] = [
        (_any_missing, lambda: (None, None)),
        (lambda x, y: all_of(x.is_({"null"}), y.is_({"null"})), lambda: (F.lit(op == "="), None)),
    ]
    if equality:
        cases.append((lambda x, y: any_of(x.is_({"null"}), y.is_({"null"})), lambda: (F.lit(op == "<>"), None)))
    else:
        null_ordered = lambda x, y: any_of(all_of(x.is_({"null"}), y.is_(ordered)), all_of(x.is_(ordered), y.is_({"null"})))  # noqa: E731
        cases.append((null_ordered, lambda: (F.lit(False), None)))

    def floats() -> Any:
        x, y = _as_float(a), _as_float(b)
        return F.when(F.isnan(x) | F.isnan(y), F.lit(op == "<>")).otherwise(cmp(x, y)), None

    def numbers(result: str) -> Callable[[], Any]:
        if result == "int":  # int, uint and long: the bigint values compare as they are
            return lambda: (cmp(a.l, b.l), None)
        if result == "ulong":
            return lambda: (cmp(_unsigned(a), _unsigned(b)), None)
        return floats if result == "float" else doubles

    cases += _promoted_cases(numbers, (("int", "uint", "long"), ("ulong",), ("float",), ("double",)))
    same = [(STRINGS, "s"), (frozenset({"bool"}), "b"), (frozenset({"uuid"}), "s")] if equality else []
    for tags, column in same + [(frozenset({"timestamp"}), "l"), (frozenset({"timespan"}), "l")]:
        cases.append(
            (
                lambda x, y, tags=tags: all_of(x.is_(tags), y.is_(tags)),
                lambda column=column: (cmp(getattr(a, column), getattr(b, column)), None),
            )
        )
    cases.append((lambda x, y: True, lambda: (None, _mismatch(op, a, b))))
    result = pred_case([(cond, value, err) for cond, (value, err) in reachable([a, b], cases)])
    return Pred(result.v, first_error(a.err, b.err, result.err))


def in_list(value: Val, items: list[Val], negated: bool) -> Pred:
    """Ordered ``CASE`` of Service Bus ``=`` (§5.7): FALSE, not NULL, when no item matches."""
    return let([value, *items], lambda x, *rest: _in_list(x, list(rest), negated))


def _in_list(value: Val, items: list[Val], negated: bool) -> Pred:
    item_errs = [i.err for i in items]
    x = with_error(value, None)
    fast = _in_fast_path(x, items)
    if fast is not None:
        result = fast
    else:
        branches: list[tuple[Cond, Column | None, Column | None]] = [(x.is_({MISSING_TAG}), None, None)]
        for item in items:
            if item.is_({MISSING_TAG}) is not False:
                branches.append((item.is_({MISSING_TAG}), None, F.lit("IN cannot compare with a missing property")))
            eq = _compare("=", x, with_error(item, None))
            if eq.err is not None:
                branches.append((eq.err.isNotNull(), None, eq.err))
            branches.append((F.coalesce(eq.v, F.lit(False)), F.lit(True), None))
        branches.append((True, F.lit(False), None))
        result = pred_case(branches)
    v = ~result.v if negated else result.v
    return Pred(v, first_error(value.err, *item_errs, result.err))


def _in_fast_path(x: Val, items: list[Val]) -> Pred | None:
    """All items string literals (or all long literals): one hashed ``isin`` instead of a CASE chain."""
    kinds = [k for k in ("string", "long") if all(i.tags == {k} and i.err is None and i.const for i in items)]
    if not kinds:
        return None
    kind = kinds[0]
    column = "s" if kind == "string" else "l"
    # the types = compares with a long in long (never ulong: C# refuses ulong with long)
    same = STRINGS if kind == "string" else frozenset(t for t in INTEGRAL if promote(t, "long") == "long")
    values = [getattr(i, column) for i in items]
    cases: list[Case] = [
        (lambda v: v.is_({MISSING_TAG}), lambda: (None, None)),
        (lambda v: v.is_(same), lambda: (getattr(x, column).isin(*values), None)),
        (lambda v: v.is_({"null"}), lambda: (F.lit(False), None)),
    ]
    if kind == "long":
        doubles = lambda: (x.d.isin(*(v.cast("double") for v in values)) & ~F.isnan(x.d), None)  # noqa: E731
        floats = lambda: (x.d.isin(*(v.cast("float").cast("double") for v in values)) & ~F.isnan(x.d), None)  # noqa: E731
        cases.append((lambda v: v.is_({"double"}), doubles))
        cases.append((lambda v: v.is_({"float"}), floats))
    cases.append((lambda v: True, lambda: (None, _mismatch("=", x, items[0]))))
    return pred_case([(cond, value, err) for cond, (value, err) in reachable([x], cases)])


def like(value: Val, pattern: str, escape: str | None, negated: bool) -> Pred:
    """LIKE with a constant pattern: an anchored Java regex with ``(?d)`` built here (§5.6)."""
    return let([value], lambda x: _like(x, pattern, escape, negated))


def _like(value: Val, pattern: str, escape: str | None, negated: bool) -> Pred:
    regex, units = like_regex(pattern, escape)
    text = text_of(value)
    if units:
        text = F.regexp_replace(text, "([\\x{10000}-\\x{10FFFF}])", "$1\uffff")
    matched = text.rlike(regex)
    result = pred_case([(value.is_({MISSING_TAG}), None, None), (True, matched, None)])
    v = ~result.v if negated else result.v
    return Pred(v, value.err)


def like_regex(pattern: str, escape: str | None) -> tuple[str, bool]:
    """The Java regex equivalent to the .NET one the engine builds, and whether ``_`` occurs.

    ``_`` matches one UTF-16 code unit in .NET but one code point in Java; when the pattern has an
    unescaped ``_`` the value's astral characters are widened to two regex characters (the
    character and U+FFFF) and so are the pattern's, which restores code-unit counting.
    """
    esc = escape[0] if escape else None
    if esc is not None and ord(esc) > 0xFFFF:
        raise Untranslatable("LIKE escape character outside the Basic Multilingual Plane")
    units = False
    escaping = False
    for ch in pattern:
        if escaping:
            escaping = False
        elif ch == esc:
            escaping = True
        elif ch == "_":
            units = True
    parts = ["(?d)^"]
    escaping = False
    for ch in pattern:
        if escaping:
            parts.append(_regex_literal(ch, units))
            escaping = False
        elif ch == esc:
            escaping = True
        elif ch == "%":
            parts.append(".*")
        elif ch == "_":
            parts.append(".")
        else:
            parts.append(_regex_literal(ch, units))
    parts.append("$")
    return "".join(parts), units


def _regex_literal(ch: str, units: bool) -> str:
    code = ord(ch)
    if ch.isascii() and ch.isalnum():
        return ch
    if code < 0x80:
        return "\\" + ch
    if code > 0xFFFF and units:
        return f"\\x{{{code:X}}}\\x{{FFFF}}"
    return f"\\x{{{code:X}}}"
