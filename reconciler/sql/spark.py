"""Service Bus filters as native Spark Columns (docs/sql-language.md §10.3).

Spark's own ``=``, ``IN``, ``LIKE``, ``/`` and ``+`` cast silently, return NULL where Service Bus
returns FALSE or fails, and change with ``spark.sql.ansi.enabled``. So nothing here lets Spark
coerce: every Service Bus value is compiled to a :class:`Val` — a *type tag* plus one typed
column per representation (``s`` string, ``l`` int/long/timestamp-micros, ``d`` double, ``b``
bool) — and every operator is a ``CASE`` over the operand tags that mirrors the C# operator table.
Tags known at translate time (literals, system properties) prune the ``CASE`` before Spark sees
it. Predicates compile to a :class:`Pred`: a nullable boolean (NULL = UNKNOWN) plus an error
column; errors are data (the message is a dead-letter candidate), never ``raise_error``, so one
bad message cannot fail a job. Integer overflow uses ``try_*`` functions and division guards
replace a zero divisor before dividing, so results do not depend on ANSI mode.

What does not translate natively (a LIKE pattern or ESCAPE that is not a constant, a constant
pattern of a type whose .NET text form is not reproduced here) raises :class:`Untranslatable`;
:func:`rule_columns` then evaluates that one rule with the Python evaluator in a UDF and says so.

Known approximation: ``string + double`` and ``double LIKE …`` format the double like .NET
(shortest round-trip digits, ``E+XX`` exponent outside 1e-5 ≤ |x| < 1e15) from Spark's own
shortest text; the JVM's ``Double.toString`` before JDK 19 occasionally prints one digit more than
the shortest round-trip form (e.g. ``4.9E-324``), and then the text differs from .NET's.
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from reconciler.model import (
    CORRELATION_SYS_NAMES,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    SYSTEM_PROPERTIES,
    CorrelationFilter,
    FalseFilter,
    Rule,
    SqlFilter,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.sql import ast, values
from reconciler.traffic.rows import SYS_COLUMNS, VALUE_FIELD, micros_since_epoch

PROPS = "props"
MISSING = "missing"
USER_TAGS = frozenset(t.value for t in ValueType) | {MISSING}
INTEGRAL = frozenset({"int", "long"})
NUMERIC = frozenset({"int", "long", "double"})
TIMES = frozenset({"timestamp", "timespan"})
MAX_CONCAT = 32767
DATETIME_MIN = micros_since_epoch(_dt.datetime(1, 1, 1, tzinfo=_dt.timezone.utc))
DATETIME_MAX = micros_since_epoch(_dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=_dt.timezone.utc))

#: Computed operands up to this nesting depth are inlined by their parent operator, deeper ones bound.
INLINE_DEPTH = 1
BOUND = INLINE_DEPTH + 1

_FIELD_TYPES = {"tag": "string", "s": "string", "l": "bigint", "d": "double", "b": "boolean", "err": "string"}


class Untranslatable(Exception):
    """A construct with no native Spark translation; the rule is evaluated by a Python UDF instead."""


# ------------------------------------------------------------------------------------------------
# Compiled values and predicates
# ------------------------------------------------------------------------------------------------

Cond = bool | Column


@dataclass(frozen=True)
class Val:
    """A compiled Service Bus value: possible tags (static), the tag column, typed value columns."""

    tags: frozenset[str]
    tag: Column | None = None  # None when ``tags`` has one element
    s: Column | None = None
    l: Column | None = None
    d: Column | None = None
    b: Column | None = None
    err: Column | None = None
    #: A constant from the filter text (lets IN use one hashed ``isin``).
    const: bool = False
    #: The .NET text form when it is cheap to have (literals, stored properties); see text_of.
    text: Column | None = None
    #: Operator nesting below this value (0 = leaf): deeper values are bound once by parents (_let).
    depth: int = 0
    #: ``struct<t, s, l, d, b, e>`` holding this value, when it already exists as one column.
    packed: Column | None = None
    #: Builds a tag test (wanted tags → boolean column) in place of ``tag.isin``: see PropertyCells.
    test: Callable[[frozenset[str]], Column] | None = field(default=None, repr=False, compare=False)
    #: Tag tests already built (each Column operation is a py4j round trip to the JVM).
    _tests: dict[frozenset[str], Cond] = field(default_factory=dict, init=False, repr=False, compare=False)

    def tag_col(self) -> Column:
        return self.tag if self.tag is not None else F.lit(next(iter(self.tags)))

    def is_(self, tags: Iterable[str]) -> Cond:
        """Whether this value's tag is one of ``tags``: statically when the tag sets decide it."""
        wanted = self.tags & frozenset(tags)
        if not wanted:
            return False
        if self.tags <= wanted:
            return True
        if wanted not in self._tests:
            self._tests[wanted] = self.test(wanted) if self.test else self.tag.isin(*sorted(wanted))
        return self._tests[wanted]

    def field(self, name: str) -> Column:
        column = getattr(self, name)
        return column if column is not None else F.lit(None).cast(_FIELD_TYPES[name])


@dataclass(frozen=True)
class Pred:
    """A compiled predicate: ``v`` is TRUE / FALSE / NULL (= UNKNOWN); ``err`` NULL = no error."""

    v: Column
    err: Column | None = None


def _all(*conds: Cond) -> Cond:
    out: Cond = True
    for cond in conds:
        if cond is False:
            return False
        if cond is not True:
            out = cond if out is True else out & cond
    return out


def _when(cond: Cond, value: Column) -> Column | None:
    """``CASE WHEN cond THEN value END`` with a static condition folded (None = never)."""
    if cond is False:
        return None
    return value if cond is True else F.when(cond, value)


def _err(*errs: Column | None) -> Column | None:
    """The first error in evaluation order (``coalesce`` of the ones that can happen)."""
    present = [e for e in errs if e is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else F.coalesce(*present)


@dataclass
class _Branch:
    cond: Cond
    tags: frozenset[str]
    fields: dict[str, Any] = field(default_factory=dict)


def _chain(branches: list[tuple[Cond, Column | None]], typ: str) -> Column | None:
    """``CASE WHEN c1 THEN v1 … END``; None when every value is None (the field never exists)."""
    if all(v is None for _, v in branches):
        return None
    out = None
    for cond, value in branches:
        value = value if value is not None else F.lit(None).cast(typ)
        if cond is True:
            return value if out is None else out.otherwise(value)
        out = F.when(cond, value) if out is None else out.when(cond, value)
    return out


def _case(branches: Iterable[_Branch]) -> Val:
    """Build a Val from ordered branches, pruning static conditions (first match wins)."""
    live: list[_Branch] = []
    for br in branches:
        if br.cond is False:
            continue
        live.append(br)
        if br.cond is True:
            break
    if not live:
        return Val(frozenset({MISSING}))
    tags = frozenset().union(*(br.tags for br in live))
    cols: dict[str, Column | None] = {}
    for name in ("s", "l", "d", "b", "err"):
        cols[name] = _chain([(br.cond, br.fields.get(name)) for br in live], _FIELD_TYPES[name])
    tag = None
    if len(tags) > 1:
        tag_values = []
        for br in live:
            t = br.fields.get("tag")
            if t is None:
                (only,) = br.tags
                t = F.lit(only)
            tag_values.append((br.cond, t))
        tag = _chain(tag_values, "string")
    return Val(tags, tag, **cols, depth=1)


#: An operator's branch: (condition on the operand tags only, builder of the branch's result).
Case = tuple[Callable[..., Cond], Callable[[], Any]]


def _reachable(operands: Sequence[Val], cases: Sequence[Case]) -> list[tuple[Cond, Any]]:
    """(condition, built result) of each case that some combination of the operands' possible
    tags takes, first match winning; the last case must be unconditional, and the last one kept
    becomes so.

    Each condition is first decided on one-tag stand-ins for every combination (statically: it
    depends on tags only; operators have one or two operands, so at most 121 combinations), so
    branches no message can reach — a type mismatch between properties that only ever hold
    numbers, say — are neither built nor sent to Spark."""
    taken = set()
    for combination in itertools.product(*(sorted(o.tags) for o in operands)):
        stand_ins = [Val(frozenset({tag})) for tag in combination]
        taken.add(next(i for i, (cond, _) in enumerate(cases) if cond(*stand_ins) is True))
    kept = sorted(taken)
    return [(True if i == kept[-1] else cases[i][0](*operands), cases[i][1]()) for i in kept]


def _pred_case(branches: list[tuple[Cond, Column | None, Column | None]]) -> Pred:
    """Ordered (condition, value, error) branches → Pred (pruned like :func:`_case`)."""
    live = []
    for cond, value, err in branches:
        if cond is False:
            continue
        live.append((cond, value, err))
        if cond is True:
            break
    v = _chain([(c, v) for c, v, _ in live], "boolean")
    e = _chain([(c, e) for c, _, e in live], "string")
    return Pred(v if v is not None else F.lit(None).cast("boolean"), e)


def _pack(value: Val) -> Column:
    if value.packed is not None:
        return value.packed
    return F.struct(
        value.tag_col().alias("t"),
        *(value.field(name).alias(name) for name in ("s", "l", "d", "b")),
        value.field("err").alias("e"),
    )


def _unpack(tags: frozenset[str], packed: Column, has_err: bool, depth: int) -> Val:
    return Val(
        tags,
        packed.getField("t") if len(tags) > 1 else None,
        *(packed.getField(name) for name in ("s", "l", "d", "b")),
        err=packed.getField("e") if has_err else None,
        depth=depth,
        packed=packed,
    )


def _let(operands: list[Val], body: Callable[..., Any]) -> Any:
    """``body(*operands)`` with deeply computed operands bound once (a one-element ``transform``).

    Operator translations mention each operand field several times; inlining computed operands
    at every level would grow the expression exponentially with nesting depth, so operands deeper
    than :data:`INLINE_DEPTH` are bound through a lambda variable (linear size). Shallower ones are
    inlined: higher-order functions are interpreted, not compiled, and cost far more per row than
    Spark's common-subexpression elimination of a repeated small operand.
    """
    deepest = max(o.depth for o in operands)
    if deepest <= INLINE_DEPTH:
        result = body(*operands)
        if deepest and isinstance(result, Val):
            result = replace(result, depth=deepest + 1)
        return result
    bound = [i for i, o in enumerate(operands) if o.depth]
    record = F.array(F.struct(*(_pack(operands[i]).alias(f"o{i}") for i in bound)))
    results: list[Any] = []

    def inner(x: Column) -> Column:
        args = [_unpack(o.tags, x.getField(f"o{i}"), o.err is not None, 0) if o.depth else o for i, o in enumerate(operands)]
        result = body(*args)
        results.append(result)
        if isinstance(result, Val):
            return _pack(result)
        return F.struct(result.v.alias("v"), _err_col(result.err).alias("e"))

    out = F.transform(record, inner)[0]
    (result,) = results
    if isinstance(result, Val):
        return _unpack(result.tags, out, result.err is not None, BOUND)
    return Pred(out.getField("v"), out.getField("e") if result.err is not None else None)


# ------------------------------------------------------------------------------------------------
# Leaves
# ------------------------------------------------------------------------------------------------


def literal(value: TypedValue | ast.Literal) -> Val:
    """A constant (or a substituted @parameter) as a Val with a static tag."""
    vtype, raw = value.type, value.value
    tags = frozenset({vtype.value})
    text = F.lit(values.to_string(values.from_typed(TypedValue(vtype, raw))))
    if vtype is ValueType.NULL:
        return Val(tags, const=True, text=text)
    if vtype in (ValueType.STRING, ValueType.UUID):
        return Val(tags, s=F.lit(str(raw)), const=True, text=text)
    if vtype in (ValueType.LONG, ValueType.INT):
        return Val(tags, l=F.lit(int(raw)).cast("bigint"), const=True, text=text)
    if vtype is ValueType.DOUBLE:
        return Val(tags, d=F.lit(float(raw)).cast("double"), const=True, text=text)
    if vtype is ValueType.BOOL:
        return Val(tags, b=F.lit(bool(raw)), const=True, text=text)
    return Val(tags, l=F.lit(micros_since_epoch(raw)).cast("bigint"), const=True, text=text)


def _lookup(key: Column) -> Val:
    return _cell_val(F.try_element_at(F.col(PROPS), key))


def _cell_val(cell: Column) -> Val:
    return Val(
        USER_TAGS,
        F.coalesce(cell.getField("t"), F.lit(MISSING)),
        s=cell.getField("s"),
        l=cell.getField("l"),
        d=cell.getField("d"),
        b=cell.getField("b"),
        text=F.coalesce(cell.getField("s"), F.lit("")),
    )


#: Pre-computed ``props[name]`` cells by lower-cased name (see :func:`property_names`).
Cells = Mapping[str, Column]


class PropertyCells(dict):
    """:data:`Cells` that also build each property's :class:`Val` once for all the filters using
    it (translating many filters is dominated by py4j round trips, one per Column operation), and
    name each tag test the filters make of a property as a column of its own, ``tests``, for the
    caller to project before the filters (:meth:`with_tests`).

    Why: every filter tests property tags many times (``coalesce(p.t, 'missing') IN (…)`` per
    operator branch). Inlined, those tests were most of the Java that Spark generated for a
    report of fifty rules, and generating it took far longer than running it. Projected once per
    message, a test is a boolean read."""

    def __init__(self, columns: Mapping[str, Column], types: Mapping[str, frozenset[str]] | None = None):
        super().__init__(columns)
        self.types = types
        self.vals: dict[str, Val] = {}
        self.tests: dict[str, Column] = {}
        self._names: dict[tuple[str, frozenset[str]], str] = {}

    @classmethod
    def over(
        cls, frame: Any, names: Iterable[str], types: Mapping[str, frozenset[str]] | None = None
    ) -> tuple[Any, "PropertyCells"]:
        """``frame`` with ``props[name]`` looked up once per message for each of ``names``
        (lower-cased), and the cells that refer to those lookups.

        ``types``: the type tags each property has somewhere in ``frame`` (a name not in it is
        never present); the filters are then translated for those types only. None = any type."""
        ordered = sorted(set(names))
        lookups = (F.try_element_at(F.col(PROPS), F.lit(name)).alias(f"_p{i}") for i, name in enumerate(ordered))
        return frame.select("*", *lookups), cls({name: F.col(f"_p{i}") for i, name in enumerate(ordered)}, types)

    def val(self, key: str) -> Val:
        if key not in self.vals:
            cell = _cell_val(self[key])
            if self.types is not None:
                cell = replace(cell, tags=frozenset(self.types.get(key, ())) | {MISSING})
            self.vals[key] = replace(cell, test=lambda wanted: self._test(key, cell.tag, wanted))
        return self.vals[key]

    def _test(self, key: str, tag: Column, wanted: frozenset[str]) -> Column:
        name = self._names.get((key, wanted))
        if name is None:
            name = self._names[(key, wanted)] = f"_is{len(self.tests)}"
            self.tests[name] = _tag_test(self[key], tag, self.vals[key].tags, wanted)
        return F.col(name)

    def with_tests(self, frame: Any) -> Any:
        """``frame`` with the tag tests the translated filters refer to."""
        return frame.select("*", *(test.alias(name) for name, test in self.tests.items())) if self.tests else frame


#: Struct field → the tags whose values set it (``s``: every non-null value, as text).
_SET_BY = {
    name: frozenset(t for t, f in VALUE_FIELD.items() if f == name or name == "s") for name in dict.fromkeys(VALUE_FIELD.values())
}


def _tag_test(cell: Column, tag: Column, possible: frozenset[str], wanted: frozenset[str]) -> Column:
    """Whether ``cell`` (one of the ``possible`` tags) has a ``wanted`` tag: a null check of the
    cell or of one typed field where that tells them apart, which is cheaper per message than
    reading and comparing the tag's text."""
    if possible & {MISSING} == wanted:
        return cell.isNull()
    if possible - {MISSING} == wanted:
        return cell.isNotNull()
    for name, tags in _SET_BY.items():
        if possible & tags == wanted:
            return cell.getField(name).isNotNull()
        if possible - tags == wanted:
            return cell.getField(name).isNull()
    return tag.isin(*sorted(wanted))


def _cell(name: str, cells: Cells | None) -> Column:
    key = name.lower()
    if cells is not None and key in cells:
        return cells[key]
    return F.try_element_at(F.col(PROPS), F.lit(key))


def user_property(name: str, cells: Cells | None = None) -> Val:
    """``props[lower(name)]``: a NULL struct is MISSING (tag ``missing``)."""
    key = name.lower()
    if isinstance(cells, PropertyCells) and key in cells:
        return cells.val(key)
    return _cell_val(_cell(name, cells))


def system_property(name: str) -> Val:
    """A typed system-property column; NULL there is a real null (system properties always exist)."""
    column = F.col(SYS_COLUMNS[name])
    vtype = SYSTEM_PROPERTIES[name].value
    tag = F.when(column.isNull(), F.lit("null")).otherwise(F.lit(vtype))
    tags = frozenset({"null", vtype})
    # Of two tags a test wants exactly one (is_ decides the others statically): a null check.
    val = functools.partial(Val, tags, tag, test=lambda wanted: column.isNull() if "null" in wanted else column.isNotNull())
    if vtype in ("string", "uuid"):
        return val(s=column, text=F.coalesce(column, F.lit("")))
    if vtype in ("long", "int"):
        return val(l=column.cast("bigint"), text=F.coalesce(column.cast("string"), F.lit("")))
    if vtype == "double":
        return val(d=column)
    if vtype == "bool":
        return val(b=column)
    return val(l=F.unix_micros(column))


# ------------------------------------------------------------------------------------------------
# Text form of values (.NET Convert.ToString, invariant culture)
# ------------------------------------------------------------------------------------------------


def dotnet_double_text(d: Column) -> Column:
    """``double.ToString()`` of .NET (shortest round-trip digits, ``E+XX`` outside [1e-5, 1e15))."""
    java = F.abs(d).cast("string")  # "123.45", "1.0E20", "1.234E-5"
    mantissa = F.regexp_extract(java, r"^([0-9.]+)", 1)
    exp_text = F.regexp_extract(java, r"E(-?[0-9]+)$", 1)
    exponent = F.when(exp_text == "", F.lit(0)).otherwise(exp_text.try_cast("int"))
    int_part = F.substring_index(mantissa, ".", 1)
    all_digits = F.concat(int_part, F.substring_index(mantissa, ".", -1))
    no_lead = F.regexp_replace(all_digits, "^0+", "")
    digits = F.regexp_replace(no_lead, "0+$", "")
    e = F.length(int_part) + exponent - 1 - (F.length(all_digits) - F.length(no_lead))
    n = F.length(digits)
    scientific = F.concat(
        F.substring(digits, 1, 1),
        F.when(n > 1, F.concat(F.lit("."), F.substring(digits, 2, 400))).otherwise(F.lit("")),
        F.lit("E"),
        F.when(e < 0, F.lit("-")).otherwise(F.lit("+")),
        F.lpad(F.abs(e).cast("string"), 2, "0"),
    )
    fixed = (
        F.when(e < 0, F.concat(F.lit("0."), F.repeat(F.lit("0"), -e - 1), digits))
        .when(n <= e + 1, F.concat(digits, F.repeat(F.lit("0"), e + 1 - n)))
        .otherwise(F.concat(F.substring(digits, 1, e + 1), F.lit("."), F.substring(digits, e + 2, 400)))
    )
    body = F.when((e >= 15) | (e < -4), scientific).otherwise(fixed)
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
    branches: list[tuple[Cond, Callable[[], Column]]] = [
        (value.is_({"string", "uuid"}), lambda: value.s),
        (value.is_({"null"}), lambda: F.lit("")),
        (value.is_({"bool"}), lambda: F.when(value.b, F.lit("True")).otherwise(F.lit("False"))),
        (value.is_(INTEGRAL), lambda: value.l.cast("string")),
        (value.is_({"double"}), lambda: dotnet_double_text(value.d)),
        (value.is_({"timestamp"}), lambda: F.date_format(F.timestamp_micros(value.l), "MM/dd/yyyy HH:mm:ss")),
        (value.is_({"timespan"}), lambda: timespan_text(value.l)),
    ]
    out = _chain([(c, make()) for c, make in branches if c is not False], "string")
    return out if out is not None else F.lit(None).cast("string")


# ------------------------------------------------------------------------------------------------
# Operators
# ------------------------------------------------------------------------------------------------


def _as_double(value: Val) -> Column:
    if value.tags & NUMERIC <= {"double"}:
        return value.d
    if not value.tags & {"double"}:
        return value.l.cast("double")
    return F.when(value.is_({"double"}), value.d).otherwise(value.l.cast("double"))


def _mismatch(op: str, a: Val, b: Val) -> Column:
    return F.concat(F.lit("type mismatch: "), a.tag_col(), F.lit(f" {op} "), b.tag_col())


def _numeric_cases(op: str, a: Val, b: Val) -> list[Case]:
    """int⊕int → int (checked), integral → long (checked), else double."""

    def integral(tag: str, low: int, high: int, wide: bool) -> Callable[[], Any]:
        def build() -> Any:
            value, err = _integral_op(op, a.l, b.l, low, high, wide)
            return frozenset({tag}), {"l": value, "err": err}

        return build

    return [
        (lambda x, y: _all(x.is_({"int"}), y.is_({"int"})), integral("int", INT32_MIN, INT32_MAX, True)),
        (lambda x, y: _all(x.is_(INTEGRAL), y.is_(INTEGRAL)), integral("long", INT64_MIN, INT64_MAX, False)),
        (
            lambda x, y: _all(x.is_(NUMERIC), y.is_(NUMERIC)),
            lambda: (frozenset({"double"}), {"d": _double_op(op, _as_double(a), _as_double(b))}),
        ),
    ]


def _integral_op(op: str, x: Column, y: Column, low: int, high: int, wide: bool) -> tuple[Column, Column]:
    """Checked C# integer arithmetic. ``wide``: operands are Int32 held in a bigint (cannot overflow it)."""
    overflow = F.lit(f"arithmetic overflow in {op}")
    if op in ("/", "%"):
        zero = y == 0
        min_div = (x == low) & (y == -1)
        safe_y = F.when(zero | min_div, F.lit(1).cast("bigint")).otherwise(y)
        if op == "/":
            value = F.call_function("div", x, safe_y)
            err = F.when(zero, F.lit("division by zero")).when(min_div, overflow)
        else:
            value = x % safe_y
            err = F.when(zero, F.lit("division by zero")).when(min_div, overflow)
        return value, err
    if wide:
        value = {"+": x + y, "-": x - y, "*": x * y}[op]
        return value, F.when((value < low) | (value > high), overflow)
    value = {"+": F.try_add, "-": F.try_subtract, "*": F.try_multiply}[op](x, y)
    return value, F.when(value.isNull(), overflow)


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
    """``+ - * / %`` (§5.5): MISSING first, then string concatenation, numbers, null, errors."""
    return _let([a, b], lambda x, y: _arithmetic(op, x, y))


def _arithmetic(op: str, a: Val, b: Val) -> Val:
    cases: list[Case] = [(_any_missing, lambda: (frozenset({MISSING}), {}))]
    if op == "+":

        def concat() -> Any:
            text = F.concat(text_of(a), text_of(b))
            return frozenset({"string"}), {"s": text, "err": F.when(F.length(text) > MAX_CONCAT, F.lit("string longer than 32767"))}

        cases.append((lambda x, y: _or(x.is_({"string"}), y.is_({"string"})), concat))
    cases += _numeric_cases(op, a, b)
    lifted = NUMERIC
    if op in ("+", "-"):
        cases += _time_cases(op, a, b)
        lifted = NUMERIC | TIMES
    cases.append(
        (lambda x, y: _or(_all(x.is_({"null"}), y.is_(lifted)), _all(x.is_(lifted), y.is_({"null"}))), lambda: (frozenset({"null"}), {}))
    )
    cases.append((lambda x, y: True, lambda: (frozenset({MISSING}), {"err": _mismatch(op, a, b)})))
    result = _case(_Branch(cond, tags, fields) for cond, (tags, fields) in _reachable([a, b], cases))
    return _with_err(result, _err(a.err, b.err, result.err))


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

    return [(lambda x, y, left=left, right=right: _all(x.is_(left), y.is_(right)), build(result)) for left, right, result in pairs]


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


def negate(a: Val) -> Val:
    """Unary minus: numbers (checked), MISSING stays MISSING, anything else is an error."""
    return _let([a], _negate)


def _negate(a: Val) -> Val:
    def long_negation() -> Any:
        value = F.try_subtract(F.lit(0).cast("bigint"), a.l)
        return frozenset({"long"}), {"l": value, "err": F.when(value.isNull(), F.lit("arithmetic overflow in -"))}

    cases: list[Case] = [
        (lambda x: x.is_({MISSING}), lambda: (frozenset({MISSING}), {})),
        (
            lambda x: x.is_({"int"}),
            lambda: (frozenset({"int"}), {"l": -a.l, "err": F.when(a.l == INT32_MIN, F.lit("arithmetic overflow in -"))}),
        ),
        (lambda x: x.is_({"long"}), long_negation),
        (lambda x: x.is_({"double"}), lambda: (frozenset({"double"}), {"d": -a.d})),
        (lambda x: x.is_({"timespan"}), lambda: (frozenset({"timespan"}), {"l": -a.l})),
        (lambda x: True, lambda: (frozenset({MISSING}), {"err": F.concat(F.lit("cannot negate "), a.tag_col())})),
    ]
    result = _case(_Branch(cond, tags, fields) for cond, (tags, fields) in _reachable([a], cases))
    return _with_err(result, _err(a.err, result.err))


def _with_err(value: Val, err: Column | None) -> Val:
    return replace(value, err=err, packed=None)


def _or(*conds: Cond) -> Cond:
    out: Cond = False
    for cond in conds:
        if cond is True:
            return True
        if cond is not False:
            out = cond if out is False else out | cond
    return out


def _any_missing(a: Val, b: Val) -> Cond:
    return _or(a.is_({MISSING}), b.is_({MISSING}))


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
    return _let([a, b], lambda x, y: _compare(op, x, y))


def _compare(op: str, a: Val, b: Val) -> Pred:
    equality = op in ("=", "<>")
    cmp = _COMPARE[op]
    ordered = NUMERIC | TIMES

    def doubles() -> Any:
        x, y = _as_double(a), _as_double(b)
        return F.when(F.isnan(x) | F.isnan(y), F.lit(op == "<>")).otherwise(cmp(x, y)), None

    cases: list[Case] = [
        (_any_missing, lambda: (None, None)),
        (lambda x, y: _all(x.is_({"null"}), y.is_({"null"})), lambda: (F.lit(op == "="), None)),
    ]
    if equality:
        cases.append((lambda x, y: _or(x.is_({"null"}), y.is_({"null"})), lambda: (F.lit(op == "<>"), None)))
    else:
        null_ordered = lambda x, y: _or(_all(x.is_({"null"}), y.is_(ordered)), _all(x.is_(ordered), y.is_({"null"})))  # noqa: E731
        cases.append((null_ordered, lambda: (F.lit(False), None)))
    cases.append((lambda x, y: _all(x.is_(INTEGRAL), y.is_(INTEGRAL)), lambda: (cmp(a.l, b.l), None)))
    cases.append((lambda x, y: _all(x.is_(NUMERIC), y.is_(NUMERIC)), doubles))
    same = [("string", "s"), ("bool", "b"), ("uuid", "s")] if equality else []
    for tag, column in same + [("timestamp", "l"), ("timespan", "l")]:
        cases.append(
            (lambda x, y, tag=tag: _all(x.is_({tag}), y.is_({tag})), lambda column=column: (cmp(getattr(a, column), getattr(b, column)), None))
        )
    cases.append((lambda x, y: True, lambda: (None, _mismatch(op, a, b))))
    result = _pred_case([(cond, value, err) for cond, (value, err) in _reachable([a, b], cases)])
    return Pred(result.v, _err(a.err, b.err, result.err))


def in_list(value: Val, items: list[Val], negated: bool) -> Pred:
    """Ordered ``CASE`` of Service Bus ``=`` (§5.7): FALSE, not NULL, when no item matches."""
    return _let([value, *items], lambda x, *rest: _in_list(x, list(rest), negated))


def _in_list(value: Val, items: list[Val], negated: bool) -> Pred:
    item_errs = [i.err for i in items]
    x = _with_err(value, None)
    fast = _in_fast_path(x, items)
    if fast is not None:
        result = fast
    else:
        branches: list[tuple[Cond, Column | None, Column | None]] = [(x.is_({MISSING}), None, None)]
        for item in items:
            if item.is_({MISSING}) is not False:
                branches.append((item.is_({MISSING}), None, F.lit("IN cannot compare with a missing property")))
            eq = _compare("=", x, _with_err(item, None))
            if eq.err is not None:
                branches.append((eq.err.isNotNull(), None, eq.err))
            branches.append((F.coalesce(eq.v, F.lit(False)), F.lit(True), None))
        branches.append((True, F.lit(False), None))
        result = _pred_case(branches)
    v = ~result.v if negated else result.v
    return Pred(v, _err(value.err, *item_errs, result.err))


def _in_fast_path(x: Val, items: list[Val]) -> Pred | None:
    """All items string literals (or all long literals): one hashed ``isin`` instead of a CASE chain."""
    for kind, column in (("string", "s"), ("long", "l")):
        if not all(i.tags == {kind} and i.err is None and i.const for i in items):
            continue
        same = {"string"} if kind == "string" else INTEGRAL
        values = [getattr(i, column) for i in items]
        cases: list[Case] = [
            (lambda v: v.is_({MISSING}), lambda: (None, None)),
            (lambda v: v.is_(same), lambda: (getattr(x, column).isin(*values), None)),
            (lambda v: v.is_({"null"}), lambda: (F.lit(False), None)),
        ]
        if kind == "long":
            doubles = lambda: (x.d.isin(*(v.cast("double") for v in values)) & ~F.isnan(x.d), None)  # noqa: E731
            cases.append((lambda v: v.is_({"double"}), doubles))
        cases.append((lambda v: True, lambda: (None, _mismatch("=", x, items[0]))))
        return _pred_case([(cond, value, err) for cond, (value, err) in _reachable([x], cases)])
    return None


def like(value: Val, pattern: str, escape: str | None, negated: bool) -> Pred:
    """LIKE with a constant pattern: an anchored Java regex with ``(?d)`` built here (§5.6)."""
    return _let([value], lambda x: _like(x, pattern, escape, negated))


def _like(value: Val, pattern: str, escape: str | None, negated: bool) -> Pred:
    regex, units = like_regex(pattern, escape)
    text = text_of(value)
    if units:
        text = F.regexp_replace(text, "([\\x{10000}-\\x{10FFFF}])", "$1\uffff")
    matched = text.rlike(regex)
    result = _pred_case([(value.is_({MISSING}), None, None), (True, matched, None)])
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


# ------------------------------------------------------------------------------------------------
# The walker
# ------------------------------------------------------------------------------------------------


def _constant_text(node: ast.Expr | None) -> str | None:
    """The .NET text of a constant LIKE operand, or :class:`Untranslatable`."""
    if node is None:
        return None
    if isinstance(node, ast.Literal):
        return values.to_string(values.from_typed(TypedValue(node.type, node.value)))
    raise Untranslatable("LIKE pattern or ESCAPE is not a constant")


class _Translator:
    def __init__(self, cells: Cells | None = None):
        self.cells = cells

    def value(self, node: ast.Expr) -> Val:
        if isinstance(node, ast.Literal):
            return literal(node)
        if isinstance(node, ast.Property):
            return system_property(node.name) if node.scope == "sys" else user_property(node.name, self.cells)
        if isinstance(node, ast.Unary):
            return negate(self.value(node.operand))
        if isinstance(node, ast.Binary):
            return arithmetic(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Function):
            return self.function(node)
        raise TypeError(f"not an expression node: {node!r}")

    def function(self, node: ast.Function) -> Val:
        if node.name == "newid":
            # Bound by parents, so that one evaluation sees one value, not a fresh uuid per mention.
            return Val(frozenset({"uuid"}), s=F.expr("uuid()"), depth=BOUND)
        (arg,) = node.args
        if isinstance(arg, ast.Literal) and arg.type is ValueType.STRING:
            return user_property(arg.value, self.cells)
        return _let([self.value(arg)], _dynamic_property)

    def predicate(self, node: ast.Predicate) -> Pred:
        if isinstance(node, ast.Comparison):
            return compare(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, (ast.And, ast.Or)):
            parts = [self.predicate(p) for p in _flatten(node, type(node))]
            return _junction(parts, isinstance(node, ast.And))
        if isinstance(node, ast.Not):
            inner = self.predicate(node.operand)
            return Pred(~inner.v, inner.err)
        if isinstance(node, ast.IsNull):
            if node.prop.scope == "sys":
                isnull = F.col(SYS_COLUMNS[node.prop.name]).isNull()
            else:
                isnull = _cond_col(user_property(node.prop.name, self.cells).is_({MISSING, "null"}))
            return Pred(~isnull if node.negated else isnull)
        if isinstance(node, ast.Exists):
            if node.prop.scope == "sys":
                return Pred(F.lit(True))
            return Pred(_cell(node.prop.name, self.cells).isNotNull())
        if isinstance(node, ast.In):
            return in_list(self.value(node.value), [self.value(i) for i in node.items], node.negated)
        if isinstance(node, ast.Like):
            pattern = _constant_text(node.pattern)
            escape = _constant_text(node.escape)
            return like(self.value(node.value), pattern, escape, node.negated)
        raise TypeError(f"not a predicate node: {node!r}")


def _dynamic_property(name: Val) -> Val:
    """``property(expr)``: the user property named by a computed string (error if not a string)."""
    found = _lookup(F.lower(name.s) if name.s is not None else F.lit(None).cast("string"))
    bad = name.is_(USER_TAGS - {"string"})
    err = _when(bad, F.concat(F.lit("property() needs a string, got "), name.tag_col()))
    return Val(found.tags, found.tag, found.s, found.l, found.d, found.b, _err(name.err, err), depth=1)


def _junction(parts: list[Pred], is_and: bool) -> Pred:
    """n-ary AND / OR with Service Bus short-circuiting: operand k is evaluated (and its error
    counts) only while no earlier operand decided the result; each operand is mentioned twice."""
    v = parts[0].v
    for part in parts[1:]:
        v = (v & part.v) if is_and else (v | part.v)
    if all(p.err is None for p in parts):
        return Pred(v)
    decided = F.lit(not is_and)
    err = None
    for i, part in enumerate(parts):
        if part.err is not None:
            err = F.when(part.err.isNotNull(), part.err) if err is None else err.when(part.err.isNotNull(), part.err)
        if i < len(parts) - 1 and any(p.err is not None for p in parts[i + 1 :]):
            stop = part.v == decided
            null = F.lit(None).cast("string")
            err = F.when(stop, null) if err is None else err.when(stop, null)
    return Pred(v, err)


def _flatten(node: ast.Predicate, cls: type) -> list[ast.Predicate]:
    if isinstance(node, cls):
        return _flatten(node.left, cls) + _flatten(node.right, cls)
    return [node]


def to_spark(node: ast.Predicate | ast.Expr, cells: Cells | None = None) -> tuple[Column, Column]:
    """Translate an AST node: (predicate or typed-value struct, error) — error NULL = no error.

    A predicate yields a nullable boolean (NULL = UNKNOWN); an expression yields
    ``struct<t, s, l, d, b>`` with ``t = 'missing'`` for an absent property.
    Raises :class:`Untranslatable` for constructs without a native translation. ``cells`` maps
    lower-cased property names to columns already holding ``props[name]`` (a projection computed
    once per row, shared by many rules); other names are looked up in ``props`` directly.
    """
    tr = _Translator(cells)
    if isinstance(node, ast.PREDICATE_TYPES):
        pred = tr.predicate(node)
        return pred.v, _err_col(pred.err)
    val = tr.value(node)
    struct = F.struct(
        val.tag_col().alias("t"),
        val.field("s").alias("s"),
        val.field("l").alias("l"),
        val.field("d").alias("d"),
        val.field("b").alias("b"),
    )
    return struct, _err_col(val.err)


def _cond_col(cond: Cond) -> Column:
    return F.lit(cond) if isinstance(cond, bool) else cond


def _err_col(err: Column | None) -> Column:
    return err if err is not None else F.lit(None).cast("string")


# ------------------------------------------------------------------------------------------------
# Correlation filters and whole rules
# ------------------------------------------------------------------------------------------------


def correlation_match(flt: CorrelationFilter, cells: Cells | None = None) -> Column:
    """AND of exact, type-strict ``object.Equals`` matches; never UNKNOWN, never an error (§5.10)."""
    if flt.is_empty():
        return F.lit(False)
    conds = [F.col(SYS_COLUMNS[CORRELATION_SYS_NAMES[f]]) == F.lit(v) for f, v in flt.system_fields().items()]
    for name, tv in flt.properties:
        cell = user_property(name, cells)
        same_type = cell.is_({tv.type.value})
        if same_type is False:
            return F.lit(False)
        if tv.type is ValueType.NULL:
            conds.append(_cond_col(same_type))
            continue
        column = VALUE_FIELD[tv.type.value]
        equal = getattr(cell, column) == getattr(literal(tv), column)
        if tv.type is ValueType.DOUBLE:
            equal = equal & ~F.isnan(cell.d)  # Python's float ==: NaN is not NaN
        conds.append(_cond_col(same_type) & equal)
    out = F.lit(True)
    for cond in conds:
        out = out & F.coalesce(cond, F.lit(False))
    return out


@dataclass(frozen=True)
class RuleColumns:
    """A rule compiled for Spark: ``matched`` (boolean, never NULL), ``error`` (NULL = none)."""

    matched: Column
    error: Column
    #: Why this rule runs in a Python UDF instead of natively (None = native).
    fallback: str | None = None


def property_names(flt: Any) -> set[str]:
    """Lower-cased user property names a filter reads by constant name (for pre-computed cells)."""
    if isinstance(flt, CorrelationFilter):
        return {name.lower() for name, _ in flt.properties}
    if not isinstance(flt, SqlFilter):
        return set()
    from reconciler.sql import SqlError, parse_filter

    try:
        stack: list[Any] = [parse_filter(flt.expression)]
    except SqlError:
        return set()
    names = set()
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Property) and node.scope == "user":
            names.add(node.name.lower())
        elif isinstance(node, ast.Function) and node.name == "property" and isinstance(node.args[0], ast.Literal):
            if node.args[0].type is ValueType.STRING:
                names.add(node.args[0].value.lower())
        stack.extend(ast.children(node))
    return names


def filter_columns(
    flt: Any, parameters: Mapping[str, TypedValue] | None = None, cells: Cells | None = None
) -> tuple[Column, Column]:
    """(match, error) of a model filter; raises Untranslatable (or SqlError for bad SQL)."""
    if isinstance(flt, TrueFilter):
        return F.lit(True), F.lit(None).cast("string")
    if isinstance(flt, FalseFilter):
        return F.lit(False), F.lit(None).cast("string")
    if isinstance(flt, CorrelationFilter):
        return correlation_match(flt, cells), F.lit(None).cast("string")
    if isinstance(flt, SqlFilter):
        from reconciler.sql import parse_filter

        pred, err = to_spark(parse_filter(flt.expression, parameters), cells)
        return F.coalesce(pred, F.lit(False)) & err.isNull(), err
    raise TypeError(f"not a filter: {flt!r}")


def rule_columns(rule: Rule, cells: Cells | None = None) -> RuleColumns:
    """The rule's match/error columns: native when possible, otherwise a reported Python UDF."""
    try:
        matched, error = filter_columns(rule.filter, cells=cells)
        return RuleColumns(matched, error)
    except Untranslatable as exc:
        from reconciler.traffic.fallback import python_rule_columns

        matched, error = python_rule_columns(rule)
        return RuleColumns(matched, error, fallback=str(exc))
