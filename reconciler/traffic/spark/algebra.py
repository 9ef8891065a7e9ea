"""The value algebra of the Spark translation: compiled values and predicates, built by ``CASE``.

A Service Bus value compiles to a :class:`Val`: the set of *type tags* it can have (known at
translate time), a tag column when that set has more than one element, and one typed column per
representation (``s`` string, ``l`` int/long/timestamp-micros, ``d`` double, ``b`` bool), the
layout of a sample's property cells (:mod:`reconciler.traffic.sample.rows`). A predicate compiles to a
:class:`Pred`: a nullable boolean (NULL = UNKNOWN) plus an error column. Errors are data (the
message is a dead-letter candidate), never ``raise_error``, so one bad message cannot fail a job.

An operator is an ordered list of cases over its operands' tags (:data:`Case`); :func:`reachable`
decides each condition on the tags alone first, so the branches no operand can take never reach
Spark, and conditions that are static fold away (:data:`Cond` is ``True``, ``False`` or a Column).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from reconciler.model import TypedValue, ValueType
from reconciler.sql import ast, values
from reconciler.sql.values import INTEGER_TAGS
from reconciler.traffic.sample.rows import VALUE_FIELD, micros_since_epoch, prop_to_struct

#: The tag of an absent user property (beside the :class:`ValueType` tags of present values).
MISSING_TAG = "missing"
#: Integer types (``char`` too: numeric in C#), in the ``l`` field; ulong as its 64 bits read signed.
INTEGRAL = INTEGER_TAGS
#: Numbers the operators translate: the integers and the binary floats (float as its binary32 value in ``d``).
NUMERIC = INTEGRAL | {"float", "double"}
#: One .NET type on the broker: System.String (an AMQP symbol arrives as a string).
STRINGS = frozenset({"string", "symbol"})
#: The types the operators below translate natively; a property that holds another type in the
#: sample (decimal, datetimeoffset, timespan, uri, binary) is evaluated by the Python fallback
#: (see cells.PropertyCells.val).
USER_TAGS = NUMERIC | STRINGS | {"bool", "uuid", "timestamp", "null", MISSING_TAG}
TIMES = frozenset({"timestamp", "timespan"})

#: Computed operands up to this nesting depth are inlined by their parent operator, deeper ones bound.
INLINE_DEPTH = 1
BOUND = INLINE_DEPTH + 1
#: A computed operand that may hold one of these is bound whatever its depth: each is one more
#: ``CASE`` branch of C#'s promotion in every operator reading it (uint, ulong and float results
#: are read through conversions), so inlining it copies a large expression many times.
BOUND_TAGS = frozenset({"uint", "ulong", "float"})

_FIELD_TYPES = {"tag": "string", "s": "string", "l": "bigint", "d": "double", "b": "boolean", "err": "string"}


class Untranslatable(Exception):
    """A construct with no native Spark translation; the rule is evaluated by a Python UDF instead."""


Cond = bool | Column


@dataclass(frozen=True)
class Val:
    """A compiled Service Bus value: possible tags (static), the tag column, typed value columns."""

    tags: frozenset[str]
    tag: Column | None = None  # None when ``tags`` has one element
    s: Column | None = None
    l: Column | None = None  # noqa: E741 - named for the cell struct's long field, beside s, d and b
    d: Column | None = None
    b: Column | None = None
    err: Column | None = None
    #: A constant from the filter text (lets IN use one hashed ``isin``).
    const: bool = False
    #: The .NET text form when it is cheap to have (literals, stored properties); see dotnet_text.
    text: Column | None = None
    #: Operator nesting below this value (0 = leaf): deeper values are bound once by parents (let).
    depth: int = 0
    #: ``struct<t, s, l, d, b, e>`` holding this value, when it already exists as one column.
    packed: Column | None = None
    #: Builds a tag test (wanted tags → boolean column) in place of ``tag.isin``: see cells.PropertyCells.
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


def all_of(*conds: Cond) -> Cond:
    """AND of conditions, folding the static ones."""
    out: Cond = True
    for cond in conds:
        if cond is False:
            return False
        if cond is not True:
            out = cond if out is True else out & cond
    return out


def any_of(*conds: Cond) -> Cond:
    """OR of conditions, folding the static ones."""
    out: Cond = False
    for cond in conds:
        if cond is True:
            return True
        if cond is not False:
            out = cond if out is False else out | cond
    return out


def as_column(cond: Cond) -> Column:
    """A condition as a boolean Column."""
    return F.lit(cond) if isinstance(cond, bool) else cond


def error_column(err: Column | None) -> Column:
    """An error as a string Column (NULL = no error)."""
    return err if err is not None else F.lit(None).cast("string")


def only_when(cond: Cond, value: Column) -> Column | None:
    """``CASE WHEN cond THEN value END`` with a static condition folded (None = never)."""
    if cond is False:
        return None
    return value if cond is True else F.when(cond, value)


def first_error(*errs: Column | None) -> Column | None:
    """The first error in evaluation order (``coalesce`` of the ones that can happen)."""
    present = [e for e in errs if e is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else F.coalesce(*present)


def with_error(value: Val, err: Column | None) -> Val:
    """``value`` with ``err`` as its error (no longer the packed struct it came from)."""
    return replace(value, err=err, packed=None)


@dataclass
class Branch:
    """One branch of a value ``CASE``: its condition, the tags it yields and its typed fields."""

    cond: Cond
    tags: frozenset[str]
    fields: dict[str, Any] = field(default_factory=dict)


def when_chain(branches: list[tuple[Cond, Column | None]], typ: str) -> Column | None:
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


def val_case(branches: Iterable[Branch]) -> Val:
    """Build a Val from ordered branches, pruning static conditions (first match wins)."""
    live: list[Branch] = []
    for br in branches:
        if br.cond is False:
            continue
        live.append(br)
        if br.cond is True:
            break
    if not live:
        return Val(frozenset({MISSING_TAG}))
    tags = frozenset().union(*(br.tags for br in live))
    cols: dict[str, Column | None] = {}
    for name in ("s", "l", "d", "b", "err"):
        cols[name] = when_chain([(br.cond, br.fields.get(name)) for br in live], _FIELD_TYPES[name])
    tag = None
    if len(tags) > 1:
        tag_values = []
        for br in live:
            t = br.fields.get("tag")
            if t is None:
                (only,) = br.tags
                t = F.lit(only)
            tag_values.append((br.cond, t))
        tag = when_chain(tag_values, "string")
    return Val(tags, tag, **cols, depth=1)


#: An operator's branch: (condition on the operand tags only, builder of the branch's result).
Case = tuple[Callable[..., Cond], Callable[[], Any]]


def reachable(operands: Sequence[Val], cases: Sequence[Case]) -> list[tuple[Cond, Any]]:
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


def pred_case(branches: list[tuple[Cond, Column | None, Column | None]]) -> Pred:
    """Ordered (condition, value, error) branches → Pred (pruned like :func:`val_case`)."""
    live = []
    for cond, value, err in branches:
        if cond is False:
            continue
        live.append((cond, value, err))
        if cond is True:
            break
    v = when_chain([(c, v) for c, v, _ in live], "boolean")
    e = when_chain([(c, e) for c, _, e in live], "string")
    return Pred(v if v is not None else F.lit(None).cast("boolean"), e)


def _struct(**fields: Column) -> Column:
    """A struct of named fields: one ``named_struct`` node, not an alias node under each field
    (nesting is what a Spark Connect plan is short of, see depth.py)."""
    return F.named_struct(*(part for name, column in fields.items() for part in (F.lit(name), column)))


def _pack(value: Val) -> Column:
    if value.packed is not None:
        return value.packed
    return _struct(
        t=value.tag_col(), **{name: value.field(name) for name in ("s", "l", "d", "b")}, e=value.field("err")
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


def bound(value: Column, body: Callable[[Column], Column]) -> Column:
    """``body(value)`` with ``value`` computed once per row: the element of a one-element
    ``transform``, referred to through its lambda variable however often ``body`` reads it."""
    return F.transform(F.array(value), body)[0]


def let(operands: list[Val], body: Callable[..., Any]) -> Any:
    """``body(*operands)`` with deeply computed operands bound once (a one-element ``transform``).

    Operator translations mention each operand field several times; inlining computed operands
    at every level would grow the expression exponentially with nesting depth, so operands deeper
    than :data:`INLINE_DEPTH` are bound through a lambda variable (linear size). Shallower ones are
    inlined: higher-order functions are interpreted, not compiled, and cost far more per row than
    Spark's common-subexpression elimination of a repeated small operand. Operands that may hold
    a :data:`BOUND_TAGS` type are bound at any depth (they are never small).
    """
    deepest = max(o.depth for o in operands)
    if any(o.depth and o.tags & BOUND_TAGS for o in operands):
        deepest = max(deepest, BOUND)
    if deepest <= INLINE_DEPTH:
        result = body(*operands)
        if deepest and isinstance(result, Val):
            result = replace(result, depth=deepest + 1)
        return result
    computed = [i for i, o in enumerate(operands) if o.depth]
    # One bound operand is the array's element itself; several are the fields of one struct.
    if len(computed) == 1:
        record = _pack(operands[computed[0]])
    else:
        record = _struct(**{f"o{i}": _pack(operands[i]) for i in computed})
    results: list[Any] = []

    def inner(x: Column) -> Column:
        args = [
            _unpack(o.tags, x if len(computed) == 1 else x.getField(f"o{i}"), o.err is not None, 0) if o.depth else o
            for i, o in enumerate(operands)
        ]
        result = body(*args)
        results.append(result)
        if isinstance(result, Val):
            return _pack(result)
        return _struct(v=result.v, e=error_column(result.err))

    out = bound(record, inner)
    (result,) = results
    if isinstance(result, Val):
        return _unpack(result.tags, out, result.err is not None, BOUND)
    return Pred(out.getField("v"), out.getField("e") if result.err is not None else None)


def literal(value: TypedValue | ast.Literal) -> Val:
    """A constant (or a substituted @parameter) as a Val with a static tag."""
    vtype, raw = value.type, value.value
    if vtype.value not in USER_TAGS:
        raise Untranslatable(f"a {vtype.value} parameter has no Spark translation")
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
    if vtype is ValueType.TIMESTAMP:
        return Val(tags, l=F.lit(micros_since_epoch(raw)).cast("bigint"), const=True, text=text)
    holder = VALUE_FIELD[vtype.value]  # a parameter of another type: stored as a sample cell stores it
    stored = prop_to_struct("", TypedValue(vtype, raw))
    columns = {"s": F.lit(stored["s"]), holder: F.lit(stored[holder]).cast(_FIELD_TYPES[holder])}
    return Val(tags, **columns, const=True, text=text)
