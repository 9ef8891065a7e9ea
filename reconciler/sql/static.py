"""Static proofs about filters: a filter no message can match, and a rule another rule covers.

This module is the one home of the solver encoding of a message as Service Bus filters see it.
Every property is a type tag (missing, null, bool, string, each .NET numeric type, and the other
run-time types of :mod:`reconciler.sql.values`) with a value per domain; every predicate is
four-valued (TRUE, FALSE, UNKNOWN, evaluation error), with AND/OR short-circuiting left to right
as the Python evaluator does. A rule *matches* when its filter is TRUE without an error.

The proofs go through the z3 SMT solver. The encoding is exact for the common fragment: a
property compared with a number, string, bool or null literal (C# numeric promotion, null and
missing semantics, type-mismatch errors), IN over literals, IS NULL, EXISTS, constant
subexpressions, correlation filters, true and false filters. Everything else (LIKE, arithmetic,
two properties compared, a long beyond 2^53 compared with a double, Guid and time values) becomes
a free atom: the same subexpression has the same value within one message, but no more is assumed.
So the solver only sees *more* possible messages than exist: an "unsatisfiable" or "covered"
proof is sound (never contradicted by a message), and a filter outside the fragment may simply
go unproven.

z3 costs about a millisecond per question, so most questions never reach it: a filter for which
a quick search over the literals it names finds a matching message (checked with the Python
evaluator) is satisfiable, and a rule whose witness message the other rule does not match is not
covered by it.
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import math
import operator
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable, Iterable, Iterator, Sequence

import z3

from reconciler.model import (
    CORRELATION_SYS_NAMES,
    SYSTEM_PROPERTIES,
    CorrelationFilter,
    FalseFilter,
    Filter,
    Rule,
    SqlFilter,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.names import name_key
from reconciler.sql import ast, values
from reconciler.sql.errors import SqlError, SqlEvalError
from reconciler.sql.evaluator import CompiledFilter, MessageView
from reconciler.sql.evaluator import literal_value as _literal_value
from reconciler.sql.parser import parse_filter

#: Milliseconds the solver may spend on one question; "unknown" proves nothing.
SOLVER_TIMEOUT_MS = 2000
#: Candidate messages the witness search evaluates before asking the solver.
SEARCH_LIMIT = 96

# ------------------------------------------------------------------------------------------------
# Type tags: the run-time class of a property's value, or its absence
# ------------------------------------------------------------------------------------------------

MISSING_TAG = "missing"
_UTC = _dt.timezone.utc
#: Tag → a representative run-time value (None for null); numeric tags are values.NUMERIC_TAGS'.
REPRESENTATIVE: dict[str, Any] = {
    "null": None,
    "bool": False,
    "string": "",
    "byte": values.SByte(0),
    "ubyte": values.Byte(0),
    "short": values.Int16(0),
    "ushort": values.UInt16(0),
    "int": values.Int32(0),
    "uint": values.UInt32(0),
    "long": 0,
    "ulong": values.UInt64(0),
    "char": values.Char(65),
    "float": values.Single(0.0),
    "double": 0.0,
    "decimal": Decimal(0),
    "guid": uuid.UUID(int=0),
    "datetime": _dt.datetime(2000, 1, 1, tzinfo=_UTC),
    "datetimeoffset": values.DateTimeOffset(0),
    "timespan": values.TimeSpan(0),
    "uri": values.Uri("http://a/"),
    "binary": b"",
}
TAGS: tuple[str, ...] = (MISSING_TAG, *REPRESENTATIVE)
_TAG_NUMBER = {tag: number for number, tag in enumerate(TAGS)}
INTEGER_TAGS = ("byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong", "char")
BINARY_FLOAT_TAGS = ("float", "double")
_INTEGER_RANGE = {
    "byte": (-(2**7), 2**7 - 1), "ubyte": (0, 2**8 - 1), "short": (-(2**15), 2**15 - 1), "ushort": (0, 2**16 - 1),
    "int": (-(2**31), 2**31 - 1), "uint": (0, 2**32 - 1), "long": (-(2**63), 2**63 - 1), "ulong": (0, 2**64 - 1),
    "char": (0, 2**16 - 1),
}
#: Integers of at most this magnitude convert to float / double exactly.
_EXACT_IN = {"float": 2**24, "double": 2**53}
#: A binary float's kind: finite (its value in ``r``), NaN, +∞, −∞.
FINITE, NAN, PLUS_INF, MINUS_INF = range(4)

#: The tag of each model type (a symbol is a string on the broker).
TAG_OF_TYPE: dict[ValueType, str] = {
    ValueType.STRING: "string", ValueType.SYMBOL: "string", ValueType.CHAR: "char", ValueType.BOOL: "bool",
    ValueType.BYTE: "byte", ValueType.UBYTE: "ubyte", ValueType.SHORT: "short", ValueType.USHORT: "ushort",
    ValueType.INT: "int", ValueType.UINT: "uint", ValueType.LONG: "long", ValueType.ULONG: "ulong",
    ValueType.FLOAT: "float", ValueType.DOUBLE: "double", ValueType.DECIMAL: "decimal", ValueType.UUID: "guid",
    ValueType.TIMESTAMP: "datetime", ValueType.DATETIMEOFFSET: "datetimeoffset", ValueType.TIMESPAN: "timespan",
    ValueType.URI: "uri", ValueType.BINARY: "binary", ValueType.NULL: "null",
}

_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


#: Literals and atoms recur across the rules of a subscription: each is converted or compiled once.
literal_value = functools.lru_cache(maxsize=65536)(_literal_value)
_compiled = functools.lru_cache(maxsize=65536)(CompiledFilter)


def runtime_tag(value: Any) -> str:
    """The tag of a run-time value (values.py classes)."""
    if value is None:
        return "null"
    cls = value.__class__
    if cls in values.NUMERIC_TAGS:
        return values.NUMERIC_TAGS[cls]
    return {
        bool: "bool", str: "string", uuid.UUID: "guid", _dt.datetime: "datetime", values.DateTimeOffset: "datetimeoffset",
        values.TimeSpan: "timespan", values.Uri: "uri", bytes: "binary",
    }[cls]


# ------------------------------------------------------------------------------------------------
# Four-valued outcomes as solver terms
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tri:
    """A predicate's outcome: TRUE, FALSE or an evaluation error (at most one holds); none is UNKNOWN."""

    t: Any
    f: Any
    e: Any

    def negated(self) -> "Tri":
        return Tri(self.f, self.t, self.e)


_T, _F = z3.BoolVal(True), z3.BoolVal(False)
TRUE, FALSE, UNKNOWN, ERROR = Tri(_T, _F, _F), Tri(_F, _T, _F), Tri(_F, _F, _F), Tri(_F, _F, _T)


def _and(a: Tri, b: Tri) -> Tri:
    """The evaluator's AND: a FALSE left side decides before the right side is evaluated."""
    return Tri(
        z3.And(a.t, b.t),
        z3.And(z3.Not(a.e), z3.Or(a.f, z3.And(z3.Not(b.e), b.f))),
        z3.Or(a.e, z3.And(z3.Not(a.f), b.e)),
    )


def _or(a: Tri, b: Tri) -> Tri:
    """The evaluator's OR: a TRUE left side decides before the right side is evaluated."""
    return Tri(
        z3.And(z3.Not(a.e), z3.Or(a.t, z3.And(z3.Not(b.e), b.t))),
        z3.And(a.f, b.f),
        z3.Or(a.e, z3.And(z3.Not(a.t), b.e)),
    )


def _constant(result: bool | None, error: bool = False) -> Tri:
    if error:
        return ERROR
    return {True: TRUE, False: FALSE, None: UNKNOWN}[result]


@dataclass
class _Var:
    """One property's solver variables: its tag and a value per domain (the tag says which counts)."""

    tag: Any
    tags: tuple[str, ...]
    i: Any
    r: Any
    fk: Any
    s: Any
    b: Any

    def has(self, tag: str) -> Any:
        return self.tag == _TAG_NUMBER[tag]


@dataclass
class Encoding:
    """Filters of one message as solver terms; build one per set of filters compared together."""

    variables: dict[tuple[str, str], _Var] = field(default_factory=dict)
    constraints: list[Any] = field(default_factory=list)
    _atoms: dict[Any, Tri] = field(default_factory=dict)
    _fresh: itertools.count = field(default_factory=itertools.count)

    # -- properties ------------------------------------------------------------------------------

    def var(self, prop: ast.Property) -> _Var:
        key = (prop.scope, prop.name if prop.scope == "sys" else name_key(prop.name))
        found = self.variables.get(key)
        if found is not None:
            return found
        label = f"{key[0]}.{key[1]}"
        if prop.scope == "sys" and prop.name in SYSTEM_PROPERTIES:
            tags: tuple[str, ...] = ("null", TAG_OF_TYPE[SYSTEM_PROPERTIES[prop.name]])
        elif prop.scope == "sys":
            tags = TAGS[1:]
        else:
            tags = TAGS
        var = _Var(
            z3.Int(f"{label}:tag"), tags, z3.Int(f"{label}:i"), z3.Real(f"{label}:r"), z3.Int(f"{label}:fk"),
            z3.String(f"{label}:s"), z3.Bool(f"{label}:b"),
        )
        self.constraints.append(z3.Or(*(var.has(tag) for tag in tags)))
        self.constraints.append(z3.And(var.fk >= FINITE, var.fk <= MINUS_INF))
        for tag, (low, high) in _INTEGER_RANGE.items():
            if tag in tags:
                self.constraints.append(z3.Implies(var.has(tag), z3.And(var.i >= low, var.i <= high)))
        self.variables[key] = var
        return var

    def missing(self, prop: ast.Property) -> Any:
        return self.var(prop).has(MISSING_TAG) if prop.scope == "user" else _F

    def fresh_bool(self) -> Any:
        return z3.Bool(f"free{next(self._fresh)}")

    def fresh(self, unknown_when: Any = _F) -> Tri:
        """An outcome the encoding does not model: any of the four, UNKNOWN whenever ``unknown_when``."""
        n = next(self._fresh)
        t, f, e = z3.Bool(f"atom{n}:t"), z3.Bool(f"atom{n}:f"), z3.Bool(f"atom{n}:e")
        self.constraints += [z3.Not(z3.And(t, f)), z3.Not(z3.And(t, e)), z3.Not(z3.And(f, e))]
        self.constraints.append(z3.Implies(unknown_when, z3.Not(z3.Or(t, f, e))))
        return Tri(t, f, e)

    # -- filters ---------------------------------------------------------------------------------

    def filter(self, flt: Filter) -> Tri:
        """The outcome of a model filter (raises SqlError for SQL that does not parse)."""
        if isinstance(flt, TrueFilter):
            return TRUE
        if isinstance(flt, FalseFilter):
            return FALSE
        if isinstance(flt, CorrelationFilter):
            return self.correlation(flt)
        if isinstance(flt, SqlFilter):
            return self.predicate(parse_filter(flt.expression))
        raise TypeError(f"not a filter: {flt!r}")

    def matched(self, flt: Filter) -> Any:
        """The solver term: ``flt`` delivers the message (TRUE, no evaluation error)."""
        return self.filter(flt).t

    def correlation(self, flt: CorrelationFilter) -> Tri:
        """Ordinal string equality for system fields, type-strict ``Equals`` for properties."""
        if flt.is_empty():
            return FALSE
        terms = []
        for field_name, expected in flt.system_fields().items():
            var = self.var(ast.Property("sys", CORRELATION_SYS_NAMES[field_name]))
            same = var.s == z3.StringVal(expected) if _plain_text(expected) else self.fresh_bool()
            terms.append(z3.And(var.has("string"), same))
        for name, tv in flt.properties:
            terms.append(self._equals_typed(self.var(ast.Property("user", name)), tv))
        return Tri(z3.And(*terms), z3.Not(z3.And(*terms)), _F)

    def _equals_typed(self, var: _Var, tv: TypedValue) -> Any:
        """``tv.Equals(value)``: the same run-time type and value (NaN equals NaN, a decimal's scale aside)."""
        tag = TAG_OF_TYPE[tv.type]
        value = values.from_typed(tv)
        if tag == "null":
            return var.has("null")
        if tag == "binary":
            return _F
        if tag == "string":
            return z3.And(var.has(tag), var.s == z3.StringVal(value) if _plain_text(value) else self.fresh_bool())
        if tag == "bool":
            return z3.And(var.has(tag), var.b == bool(value))
        if tag in INTEGER_TAGS:
            return z3.And(var.has(tag), var.i == int(value))
        if tag in BINARY_FLOAT_TAGS:
            return z3.And(var.has(tag), _float_equals(var, float(value)))
        if tag == "decimal":
            return z3.And(var.has(tag), var.r == _real(value))
        if tag == "uri":  # Uri.Equals also accepts a string that parses to the same Uri
            return self.fresh_bool()
        return z3.And(var.has(tag), self.fresh_bool())

    def predicate(self, node: ast.Predicate) -> Tri:
        cached = self._atoms.get(node)
        if cached is not None:
            return cached
        out = self._predicate(node)
        if not _calls_newid(node):  # newid() differs at every call: never the same atom twice
            self._atoms[node] = out
        return out

    def _predicate(self, node: ast.Predicate) -> Tri:
        if isinstance(node, ast.And):
            return _and(self.predicate(node.left), self.predicate(node.right))
        if isinstance(node, ast.Or):
            return _or(self.predicate(node.left), self.predicate(node.right))
        if isinstance(node, ast.Not):
            return self.predicate(node.operand).negated()
        if not _reads_message(node):
            return _constant_outcome(node)
        if isinstance(node, ast.IsNull):
            var = self.var(node.prop)
            null = z3.Or(var.has("null"), self.missing(node.prop))
            return Tri(null, z3.Not(null), _F).negated() if node.negated else Tri(null, z3.Not(null), _F)
        if isinstance(node, ast.Exists):
            present = z3.Not(self.missing(node.prop))
            return Tri(present, z3.Not(present), _F)
        if isinstance(node, ast.Comparison):
            pair = _property_and_literal(node.left, node.right)
            if pair is not None:
                return self._comparison(node.op, *pair)
            flipped = _property_and_literal(node.right, node.left)
            if flipped is not None:
                return self._comparison(_FLIPPED[node.op], *flipped)
            return self.fresh(self._any_missing(node.left, node.right))
        if isinstance(node, ast.In):
            if isinstance(node.value, ast.Property) and all(isinstance(i, ast.Literal) for i in node.items):
                outcome = FALSE
                for item in node.items:
                    assert isinstance(item, ast.Literal)
                    outcome = _or(outcome, self._comparison("=", node.value, item))
                return outcome.negated() if node.negated else outcome
            return self.fresh(self._any_missing(node.value))
        if isinstance(node, ast.Like):
            if isinstance(node.value, ast.Property) and isinstance(node.pattern, ast.Literal) and (
                node.escape is None or isinstance(node.escape, ast.Literal)
            ):
                outcome = self._like(node.value, node.pattern, node.escape)
                return outcome.negated() if node.negated else outcome
            parts = [node.value, node.pattern] + ([node.escape] if node.escape is not None else [])
            return self.fresh(self._any_missing(*parts))
        raise TypeError(f"not a predicate: {node!r}")

    def _any_missing(self, *exprs: ast.Expr) -> Any:
        """Whether a user property the expressions read is missing, when that makes them UNKNOWN
        (properties, literals and operators only: ``property()`` and ``newid()`` opt out)."""
        props: list[ast.Property] = []
        stack: list[ast.Node] = list(exprs)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Function):
                return _F
            if isinstance(node, ast.Property):
                props.append(node)
            stack.extend(ast.children(node))
        return z3.Or(_F, *(self.missing(p) for p in props))

    def _comparison(self, op: str, prop: ast.Property, literal: ast.Literal) -> Tri:
        """``prop OP literal``, case by case over the property's possible tags."""
        var = self.var(prop)
        constant = literal_value(literal)
        t: list[Any] = []
        f: list[Any] = []
        e: list[Any] = []
        for tag in var.tags:
            if tag == MISSING_TAG:
                continue
            outcome = self._compare_tag(op, tag, var, constant)
            guard = var.has(tag)
            if outcome is None:
                e.append(guard)
            elif isinstance(outcome, bool):
                (t if outcome else f).append(guard)
            else:
                t.append(z3.And(guard, outcome))
                f.append(z3.And(guard, z3.Not(outcome)))
        return Tri(z3.Or(_F, *t), z3.Or(_F, *f), z3.Or(_F, *e))

    def _compare_tag(self, op: str, tag: str, var: _Var, constant: Any) -> Any:
        """A present value of ``tag`` OP ``constant``: a bool, a solver term, or None (an error)."""
        sample = REPRESENTATIVE[tag]
        kind_a, kind_b = values.kind_of(sample), values.kind_of(constant)
        if kind_a == kind_b == values.NUMBER:
            return self._compare_numbers(op, tag, var, constant)
        same_kind = kind_a == kind_b or (kind_a in values.INSTANTS and kind_b in values.INSTANTS)
        if same_kind and values.NULL not in (kind_a, kind_b):
            try:
                values.compare(op, sample, constant)
            except SqlEvalError:
                return None  # the operator is not defined for the kind, whatever the values
            if kind_a == values.STRING:
                return _COMPARE[op](var.s, z3.StringVal(constant)) if _plain_text(constant) else self.fresh_bool()
            if kind_a == values.BOOL:
                return _COMPARE[op](var.b, z3.BoolVal(constant))
            return self.fresh_bool()
        try:  # different kinds: the kinds alone decide
            return values.compare(op, sample, constant)
        except SqlEvalError:
            return None

    def _compare_numbers(self, op: str, tag: str, var: _Var, constant: Any) -> Any:
        """C# numeric promotion: both sides in the promoted type, the literal converted exactly here."""
        target = values.promote(tag, values.NUMERIC_TAGS[constant.__class__])
        if target is None:
            return None
        converted = values.as_number(constant, target)
        if isinstance(converted, float) and not math.isfinite(converted):
            return self.fresh_bool()
        compare = _COMPARE[op]
        if tag in INTEGER_TAGS:
            if target in _EXACT_IN:
                limit = _EXACT_IN[target]
                exact = compare(z3.ToReal(var.i), _real(converted))
                return z3.If(z3.And(var.i >= -limit, var.i <= limit), exact, self.fresh_bool())
            if target == "decimal":
                return compare(z3.ToReal(var.i), _real(converted))
            return compare(var.i, z3.IntVal(int(converted)))
        if tag in BINARY_FLOAT_TAGS:
            special = {kind: bool(compare(value, float(converted))) for kind, value in
                       ((NAN, math.nan), (PLUS_INF, math.inf), (MINUS_INF, -math.inf))}
            return z3.If(
                var.fk == FINITE, compare(var.r, _real(converted)),
                z3.If(var.fk == NAN, special[NAN], z3.If(var.fk == PLUS_INF, special[PLUS_INF], special[MINUS_INF])),
            )
        return compare(var.r, _real(converted))  # decimal

    def _like(self, prop: ast.Property, pattern: ast.Literal, escape: ast.Literal | None) -> Tri:
        """A constant pattern: null is matched as the empty string; other values by a free atom
        per (property, pattern), the same for every LIKE of that pair in the message."""
        var = self.var(prop)
        pattern_text = values.to_string(literal_value(pattern))
        escape_text = "" if escape is None else values.to_string(literal_value(escape))
        on_null = values.like_regex(pattern_text, escape_text).match("") is not None
        key = ("like", prop.scope, name_key(prop.name), pattern_text, escape_text)
        atom = self._atoms.get(key)
        if atom is None:
            atom = self._atoms[key] = Tri(self.fresh_bool(), _F, _F)
        present = z3.Not(z3.Or(var.has("null"), self.missing(prop)))
        null = var.has("null")
        matched = z3.Or(z3.And(present, atom.t), z3.And(null, on_null))
        unmatched = z3.Or(z3.And(present, z3.Not(atom.t)), z3.And(null, not on_null))
        return Tri(matched, unmatched, _F)


def _real(value: Any) -> Any:
    """An exact solver rational of a finite int, float or Decimal."""
    fraction = Fraction(value)
    return z3.RealVal(f"{fraction.numerator}/{fraction.denominator}")


def _plain_text(text: str) -> bool:
    """Text the solver's string literals hold as is (no escape sequences, no astral characters)."""
    return "\\" not in text and all(" " <= ch <= "\uffff" for ch in text)


def _float_equals(var: _Var, value: float) -> Any:
    if math.isnan(value):
        return var.fk == NAN
    if math.isinf(value):
        return var.fk == (PLUS_INF if value > 0 else MINUS_INF)
    return z3.And(var.fk == FINITE, var.r == _real(value))


def _property_and_literal(left: ast.Expr, right: ast.Expr) -> tuple[ast.Property, ast.Literal] | None:
    if isinstance(left, ast.Property) and isinstance(right, ast.Literal):
        return left, right
    return None


def _walk(node: ast.Node) -> Iterable[ast.Node]:
    stack: list[ast.Node] = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(ast.children(current))


def _calls_newid(node: ast.Node) -> bool:
    return any(isinstance(n, ast.Function) and n.name == "newid" for n in _walk(node))


def _reads_message(node: ast.Node) -> bool:
    return any(isinstance(n, (ast.Property, ast.Function)) for n in _walk(node))


def _constant_outcome(node: ast.Predicate) -> Tri:
    """A predicate over literals only, evaluated once by the Python evaluator."""
    outcome = CompiledFilter(node).outcome(MessageView({}, {}))
    return _constant(outcome.result, outcome.error is not None)


# ------------------------------------------------------------------------------------------------
# What a filter reads, and its conjuncts: the cheap facts most questions are settled by
# ------------------------------------------------------------------------------------------------

Key = tuple[str, str]
_NO_PIN = object()


def _key(prop: ast.Property) -> Key:
    return (prop.scope, prop.name if prop.scope == "sys" else name_key(prop.name))


@dataclass(frozen=True)
class _Atom:
    """A conjunct about one property: a SQL predicate over it, or a correlation field's typed equality.

    ``pin`` is the one run-time value the atom is TRUE for, when there is one (``p = 'text'``, a
    correlation field); ``compare`` is ``(op, literal)`` for a comparison with a number."""

    key: Key
    node: ast.Predicate | None = None
    typed: TypedValue | None = None
    pin: Any = _NO_PIN
    compare: tuple[str, Any] | None = None
    items: tuple[Any, ...] | None = None

    def true_for(self, value: Any) -> bool:
        """Whether the atom is TRUE for a message whose property is ``value`` (MISSING: absent)."""
        if self.typed is not None:
            return value is not values.MISSING and values.object_equals(values.from_typed(self.typed), value)
        assert self.node is not None
        scope, name = self.key
        if scope == "sys":
            view = MessageView({} if value is None else {name: value}, {})
        else:
            view = MessageView({}, {} if value is values.MISSING else {name: value})
        return _compiled(self.node).outcome(view).matched


class Facts:
    """What the questions about one filter need, each part computed once, when first needed: the
    properties it reads, the outcomes it can have (over-approximated, from its atoms alone), whether
    its atoms read disjoint properties, the atoms the encoding leaves free, whether it reads by
    computed name (``property(expr)``); and later the properties it cannot be TRUE without, its
    conjuncts when it is a conjunction of atoms, its witnesses."""

    def __init__(self, flt: Filter, tree: ast.Predicate | None, summary: _Summary, atoms: tuple[_Atom, ...] | None = None):
        self.filter = flt
        self.tree = tree
        self.reads = summary.reads
        self.outcomes = summary.outcomes
        self.independent = summary.independent
        self.opaque = summary.opaque
        self.dynamic = summary.dynamic
        self.is_true = isinstance(flt, TrueFilter)
        self._atoms = atoms
        self._witnesses: list[MessageView] = []
        self._search: Iterator[MessageView] | None = None
        self._matcher: Callable[[MessageView], bool] | None = None

    @classmethod
    def of(cls, flt: Filter) -> "Facts | None":
        """None for a filter the service refuses (invalid SQL, an empty correlation filter)."""
        if isinstance(flt, (TrueFilter, FalseFilter)):
            outcome = frozenset({"T" if isinstance(flt, TrueFilter) else "F"})
            return cls(flt, None, _Summary(outcome, frozenset(), True, frozenset(), False), ())
        if isinstance(flt, CorrelationFilter):
            if flt.is_empty():
                return None
            atoms = tuple(_correlation_atoms(flt))
            keys = [atom.key for atom in atoms]
            possible = frozenset({"T", "F"} if all(_may_equal(a) for a in atoms) else {"F"})
            return cls(flt, None, _Summary(possible, frozenset(keys), len(set(keys)) == len(keys), frozenset(), False), atoms)
        try:
            tree = parse_filter(flt.expression)
        except SqlError:
            return None
        return cls(flt, tree, _summary(tree))

    @functools.cached_property
    def required(self) -> frozenset[Key]:
        """User properties without which the filter cannot be TRUE (a syntactic under-estimate)."""
        if self.tree is not None:
            return frozenset(_required(self.tree))
        return frozenset(a.key for a in self._atoms or () if a.key[0] == "user")

    @functools.cached_property
    def conjuncts(self) -> tuple[_Atom, ...] | None:
        """The filter as a conjunction of modelled atoms, or None."""
        return _conjuncts(self.tree) if self.tree is not None else self._atoms

    @functools.cached_property
    def pins(self) -> dict[Key, Any]:
        """The one value each pinned property must have for the filter to be TRUE."""
        return {a.key: a.pin for a in self.conjuncts or () if a.pin is not _NO_PIN}

    @functools.cached_property
    def exact_pins(self) -> dict[Key, tuple[type, Any]]:
        """A correlation filter's fields as ``(type, value)``: .NET ``Equals`` makes each TRUE for
        that exact typed value alone, so two filters' fields can be compared by hashing."""
        if self.tree is not None or not self._atoms:
            return {}
        return {a.key: (a.pin.__class__, a.pin) for a in self._atoms if a.pin is not _NO_PIN and a.pin == a.pin}

    def matches(self, view: MessageView) -> bool:
        """Whether the filter delivers the message (the Python evaluator decides)."""
        if self._matcher is None:
            self._matcher = _matcher(self.filter, self._atoms)
        return self._matcher(view)

    def first_witness(self) -> MessageView | None:
        if self._witnesses:
            return self._witnesses[0]
        if self._search is None and self.tree is None and self._atoms and len(self.pins) == len(self._atoms):
            view = _view(self.pins)  # a correlation filter's own values: what the search would find first
            if view is not None and self.matches(view):
                self._witnesses.append(view)
                return view
        return next(iter(self.witnesses()), None)

    def witnesses(self) -> Iterable[MessageView]:
        """Messages the filter matches, found lazily by the search and remembered."""
        yield from self._witnesses
        if self._search is None:
            self._search = iter(_search(self.filter))
        for view in self._search:
            if any(view.sys == seen.sys and view.user == seen.user for seen in self._witnesses):
                continue  # first_witness's shortcut found it already
            self._witnesses.append(view)
            yield view


def _may_equal(atom: _Atom) -> bool:
    return atom.typed is None or atom.typed.type is not ValueType.BINARY


def _correlation_atoms(flt: CorrelationFilter) -> Iterable[_Atom]:
    for field_name, expected in flt.system_fields().items():
        typed = TypedValue.of_checked(ValueType.STRING, expected)
        yield _Atom(("sys", CORRELATION_SYS_NAMES[field_name]), pin=expected, typed=typed)
    for name, tv in flt.properties:
        pinned = tv.type not in (ValueType.DECIMAL, ValueType.URI, ValueType.BINARY)
        yield _Atom(("user", name_key(name)), typed=tv, pin=values.from_typed(tv) if pinned else _NO_PIN)


def _is_atom(node: ast.Node) -> bool:
    return isinstance(node, (ast.Comparison, ast.In, ast.Like, ast.IsNull, ast.Exists))


def _atom_key(node: ast.Node) -> Key | None:
    """The property an atom the encoding models reads (None: an atom it leaves free, or a constant)."""
    if isinstance(node, (ast.IsNull, ast.Exists)):
        return _key(node.prop)
    if isinstance(node, ast.Comparison):
        pair = _property_and_literal(node.left, node.right) or _property_and_literal(node.right, node.left)
        return _key(pair[0]) if pair else None
    if isinstance(node, ast.In) and isinstance(node.value, ast.Property):
        return _key(node.value) if all(isinstance(i, ast.Literal) for i in node.items) else None
    if isinstance(node, ast.Like) and isinstance(node.value, ast.Property):
        constant = isinstance(node.pattern, ast.Literal) and (node.escape is None or isinstance(node.escape, ast.Literal))
        return _key(node.value) if constant else None
    return None


def _conjuncts(tree: ast.Predicate) -> tuple[_Atom, ...] | None:
    """The filter as a conjunction of modelled atoms (constant TRUE conjuncts dropped), or None."""
    out: list[_Atom] = []
    for node in ast.conjuncts(tree):
        if not _is_atom(node):
            return None
        if not _reads_message(node):
            if _constant_outcome(node) is not TRUE:
                return None
            continue
        key = _atom_key(node)
        if key is None:
            return None
        out.append(_sql_atom(key, node))
    return tuple(out)


def _equality_atom(key: Key, constant: Any) -> _Atom:
    """``p = constant``: a string, a bool or null pins the value (nothing else equals them without an
    error); a number is a comparison."""
    if constant is None or constant.__class__ in (str, bool):
        return _Atom(key, pin=constant)
    if values.kind_of(constant) == values.NUMBER:
        return _Atom(key, compare=("=", constant))
    return _Atom(key)


def _sql_atom(key: Key, node: ast.Predicate) -> _Atom:
    if isinstance(node, ast.Comparison) and node.op == "=":
        literal = node.right if isinstance(node.right, ast.Literal) else node.left
        assert isinstance(literal, ast.Literal)
        constant = literal_value(literal)
        if constant is None or constant.__class__ in (str, bool):
            return _Atom(key, node, pin=constant)
    if isinstance(node, ast.Comparison):
        flipped = isinstance(node.left, ast.Literal)
        literal = node.left if flipped else node.right
        assert isinstance(literal, ast.Literal)
        constant = literal_value(literal)
        if values.kind_of(constant) == values.NUMBER:
            return _Atom(key, node, compare=(_FLIPPED[node.op] if flipped else node.op, constant))
    if isinstance(node, ast.In) and not node.negated:
        return _Atom(key, node, items=tuple(literal_value(i) for i in node.items if isinstance(i, ast.Literal)))
    return _Atom(key, node)


_AND4 = {(a, b): a if a in "FE" else (b if a == "T" else ("E" if b == "E" else ("F" if b == "F" else "U")))
         for a in "TFUE" for b in "TFUE"}
_OR4 = {(a, b): a if a in "TE" else (b if a == "F" else ("E" if b == "E" else ("T" if b == "T" else "U")))
        for a in "TFUE" for b in "TFUE"}
_NOT4 = {"T": "F", "F": "T", "U": "U", "E": "E"}


@dataclass(frozen=True)
class _Summary:
    """What one pass over a filter finds: the outcomes it can have (over-approximated from its
    atoms' own possible outcomes), the properties it reads, whether no two of its atoms read the
    same property, the atoms the encoding leaves free, and whether it reads by computed name."""

    outcomes: frozenset[str]
    reads: frozenset[Key]
    independent: bool
    opaque: frozenset[ast.Predicate]
    dynamic: bool


def _summary(node: ast.Predicate) -> _Summary:
    if isinstance(node, (ast.And, ast.Or)):
        left, right = _summary(node.left), _summary(node.right)
        table = _AND4 if isinstance(node, ast.And) else _OR4
        return _Summary(
            frozenset(table[a, b] for a in left.outcomes for b in right.outcomes),
            left.reads | right.reads,
            left.independent and right.independent and not left.reads & right.reads,
            left.opaque | right.opaque,
            left.dynamic or right.dynamic,
        )
    if isinstance(node, ast.Not):
        inner = _summary(node.operand)
        return _Summary(frozenset(_NOT4[o] for o in inner.outcomes), inner.reads, inner.independent, inner.opaque, inner.dynamic)
    nodes = list(_walk(node))
    functions = [n for n in nodes if isinstance(n, ast.Function)]
    reads = frozenset(_key(n) for n in nodes if isinstance(n, ast.Property))
    dynamic = any(f.name == "property" for f in functions)
    if not reads and not functions:
        constant = _constant_outcome(node)
        label = "E" if constant is ERROR else ("T" if constant is TRUE else ("F" if constant is FALSE else "U"))
        return _Summary(frozenset(label), reads, True, frozenset(), False)
    key = _atom_key(node)
    if key is None:
        return _Summary(frozenset("TFUE"), reads, len(reads) <= 1 and not functions, frozenset({node}), dynamic)
    return _Summary(_atom_outcomes(node, key), reads, True, frozenset(), False)


_OUTCOMES: dict[tuple[Any, ...], frozenset[str]] = {}


def _atom_outcomes(node: ast.Predicate, key: Key) -> frozenset[str]:
    """The outcomes a modelled atom can have, from the property's possible types; they depend on
    the literals' classes, not their values, so each shape is worked out once."""
    if isinstance(node, ast.Exists):
        return frozenset("T") if key[0] == "sys" else frozenset("TF")
    if isinstance(node, (ast.IsNull, ast.Like)):
        return frozenset("TFU") if isinstance(node, ast.Like) and key[0] == "user" else frozenset("TF")
    tags = _tags_of(key)
    if isinstance(node, ast.Comparison):
        flipped = isinstance(node.left, ast.Literal)
        literal = node.left if flipped else node.right
        assert isinstance(literal, ast.Literal)
        constants = [literal_value(literal)]
        op, negated = _FLIPPED[node.op] if flipped else node.op, False
    else:
        assert isinstance(node, ast.In)
        constants = [literal_value(i) for i in node.items if isinstance(i, ast.Literal)]
        op, negated = "=", node.negated
    shape = (type(node), op, negated, tags, tuple(c.__class__ for c in constants))
    found = _OUTCOMES.get(shape)
    if found is None:
        found = _OUTCOMES[shape] = _outcomes_of(op, negated, tags, constants, isinstance(node, ast.In))
    return found


def _outcomes_of(op: str, negated: bool, tags: tuple[str, ...], constants: list[Any], is_in: bool) -> frozenset[str]:
    found = {"U"} if MISSING_TAG in tags else set()
    for constant in constants:
        for tag in tags:
            if tag == MISSING_TAG:
                continue
            sample = REPRESENTATIVE[tag]
            kind_a, kind_b = values.kind_of(sample), values.kind_of(constant)
            value_dependent = kind_a == kind_b != values.NULL or (kind_a in values.INSTANTS and kind_b in values.INSTANTS)
            try:
                result = values.compare(op, sample, constant)
            except SqlEvalError:
                found.add("E")
                continue
            found |= {"T", "F"} if value_dependent else {"T" if result else "F"}
    if is_in:
        found.add("F")
        if negated:
            found = {_NOT4[o] for o in found}
    return frozenset(found)


def _tags_of(key: Key) -> tuple[str, ...]:
    scope, name = key
    if scope == "sys":
        return ("null", TAG_OF_TYPE[SYSTEM_PROPERTIES[name]]) if name in SYSTEM_PROPERTIES else TAGS[1:]
    return TAGS


def _required(node: ast.Predicate) -> set[Key]:
    """User properties without which the predicate cannot be TRUE (a syntactic under-estimate)."""
    if isinstance(node, ast.And):
        return _required(node.left) | _required(node.right)
    if isinstance(node, ast.Or):
        return _required(node.left) & _required(node.right)
    if isinstance(node, (ast.Comparison, ast.In, ast.Like)):  # a missing operand makes them UNKNOWN, negated too
        operands = [node.left, node.right] if isinstance(node, ast.Comparison) else [node.value]
        return {_key(p) for p in operands if isinstance(p, ast.Property) and p.scope == "user"}
    if isinstance(node, ast.Exists):
        return {_key(node.prop)} if node.prop.scope == "user" else set()
    return set()


# ------------------------------------------------------------------------------------------------
# Witnesses: messages found by a quick search, checked by the evaluator
# ------------------------------------------------------------------------------------------------

_ABSENT = object()  # a candidate that leaves a property out of the message


def _candidates(flt: Filter) -> dict[Key, list[Any]]:
    """Per property the filter reads: run-time values worth trying (the literals it is compared
    with, their neighbours, a plain value, absent and null)."""
    out: dict[Key, list[Any]] = {}
    if isinstance(flt, CorrelationFilter):
        for atom in _correlation_atoms(flt):
            assert atom.typed is not None
            out.setdefault(atom.key, []).append(values.from_typed(atom.typed))
    elif isinstance(flt, SqlFilter):
        for node in _walk(parse_filter(flt.expression)):
            if not _is_atom(node):
                continue
            literals = [literal_value(n) for n in _walk(node) if isinstance(n, ast.Literal)]
            if isinstance(node, ast.Like) and isinstance(node.pattern, ast.Literal):
                text = values.to_string(literal_value(node.pattern))
                literals = [text.replace("%", "").replace("_", "x"), *literals]
            for prop in (n for n in _walk(node) if isinstance(n, ast.Property)):
                bucket = out.setdefault(_key(prop), [])
                for value in literals:
                    bucket.extend(_neighbours(value))
    for key, bucket in out.items():
        tail = [None] if key[0] == "sys" else [_ABSENT, None]
        out[key] = _unique([*bucket, *([] if bucket else [1]), *tail])
    return out


def _neighbours(value: Any) -> list[Any]:
    if value.__class__ in (int, values.Int32):
        return [v for v in (value, value + 1, value - 1) if -(2**63) <= v < 2**63] + [float(value) + 0.5]
    if value.__class__ is float and math.isfinite(value):
        return [value, value + 1, value - 1, float(math.floor(value) + 1)]
    if value.__class__ is str:
        return [value, value + "x"]
    return [value]


def _unique(found: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in found:
        if not any(value is seen or (type(value) is type(seen) and value == seen) for seen in out):
            out.append(value)
    return out


def _search(flt: Filter) -> Iterable[MessageView]:
    """Messages ``flt`` matches among at most :data:`SEARCH_LIMIT` candidate messages."""
    check = _matcher(flt)
    candidates = _candidates(flt)
    keys = list(candidates)
    for combo in itertools.islice(itertools.product(*(candidates[k] for k in keys)), SEARCH_LIMIT):
        view = _view(dict(zip(keys, combo)))
        if view is not None and check(view):
            yield view


def find_witness(flt: Filter) -> MessageView | None:
    """A message ``flt`` matches, from a bounded search over the values it names (None: none found)."""
    return next(iter(_search(flt)), None)


def _view(assignment: dict[Key, Any]) -> MessageView | None:
    sys: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for (scope, name), value in assignment.items():
        if value is _ABSENT:
            continue
        if scope == "sys":
            if value is None or name not in SYSTEM_PROPERTIES:
                continue
            if runtime_tag(value) != TAG_OF_TYPE[SYSTEM_PROPERTIES[name]]:
                return None  # no message carries that type in that system property
            sys[name] = value
        else:
            user[name] = value
    return MessageView(sys, user)


def _matcher(flt: Filter, atoms: tuple[_Atom, ...] | None = None) -> Callable[[MessageView], bool]:
    """Whether ``flt`` delivers a message view (the filter is one Facts.of accepted; ``atoms``: a
    correlation filter's, when already built)."""
    if isinstance(flt, TrueFilter):
        return lambda view: True
    if isinstance(flt, FalseFilter):
        return lambda view: False
    if isinstance(flt, CorrelationFilter):
        atoms = atoms or tuple(_correlation_atoms(flt))
        return lambda view: all(
            a.true_for(view.sys.get(a.key[1]) if a.key[0] == "sys" else view.user.get(a.key[1], values.MISSING))
            for a in atoms
        )
    compiled = _compiled(parse_filter(flt.expression))

    def match(view: MessageView) -> bool:
        try:
            return compiled(view) is True
        except SqlEvalError:
            return False

    return match


# ------------------------------------------------------------------------------------------------
# Implication between atoms: the common redundancies without the solver
# ------------------------------------------------------------------------------------------------


def _implies(b: _Atom, a: _Atom) -> bool:
    """Proven: whenever atom ``b`` is TRUE, atom ``a`` is (both about one property)."""
    if b.key != a.key:
        return False
    if b.pin is not _NO_PIN:
        return a.true_for(b.pin)
    if (b.node is not None and b.node == a.node) or (b.typed is not None and b.typed == a.typed and b.node is None):
        return True
    if b.items is not None:  # TRUE only where the value equals one of the items
        return all(_implies(_equality_atom(b.key, item), a) for item in b.items)
    if b.compare is not None and a.compare is not None and b.compare[1].__class__ is a.compare[1].__class__:
        return _numbers_imply(b.key, b.compare, a.compare)
    return False


def _numbers_imply(key: Key, b: tuple[str, Any], a: tuple[str, Any]) -> bool:
    """``p OP1 c1`` ⇒ ``p OP2 c2`` for literals of one class: per possible type, both literals
    convert to the same promoted type and the property's value converts by the same monotone
    function, so an inclusion of the two sets of extended reals suffices (NaN only satisfies ``<>``)."""
    (op1, c1), (op2, c2) = b, a
    for tag in _tags_of(key):
        if tag == MISSING_TAG:
            continue
        sample = REPRESENTATIVE[tag]
        if tag in values.NUMERIC_TAG_SET:
            target = values.promote(tag, values.NUMERIC_TAGS[c1.__class__])
            if target is None:
                continue  # b is an evaluation error for this type, never TRUE
            k1, k2 = values.as_number(c1, target), values.as_number(c2, target)
            if not (_finite(k1) and _finite(k2) and _interval_implies(op1, Fraction(k1), op2, Fraction(k2))):
                return False
            continue
        if _is_true(op1, sample, c1) and not _is_true(op2, sample, c2):
            return False
    return True


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _is_true(op: str, sample: Any, constant: Any) -> bool:
    try:
        return values.compare(op, sample, constant) is True
    except SqlEvalError:
        return False


def _interval_implies(op1: str, k1: Fraction, op2: str, k2: Fraction) -> bool:
    """{x : x OP1 k1} ⊆ {x : x OP2 k2} over the extended reals, where NaN satisfies ``<>`` alone."""
    if op1 == "=":
        return bool(_COMPARE[op2](k1, k2))
    if op1 == "<>":
        return op2 == "<>" and k1 == k2
    if op2 == "<>":
        return not _COMPARE[op1](k2, k1)  # k2 lies outside the first set
    if op2 == "=":
        return False
    upward = op1 in (">", ">=")
    if upward != (op2 in (">", ">=")):
        return False
    strict = op2 in (">", "<") and op1 in (">=", "<=")
    if upward:
        return k1 > k2 if strict else k1 >= k2
    return k1 < k2 if strict else k1 <= k2


def _conjunction_covers(cover: Facts, covered: Facts) -> bool:
    """Proven without the solver: every conjunct of ``cover`` follows from one of ``covered``."""
    if cover.conjuncts is None or covered.conjuncts is None:
        return False
    return all(any(_implies(b, a) for b in covered.conjuncts) for a in cover.conjuncts)


# ------------------------------------------------------------------------------------------------
# The questions
# ------------------------------------------------------------------------------------------------


class _Prover:
    """One solver for the filters of one subscription: each encoded once, questions asked incrementally."""

    def __init__(self) -> None:
        self.encoding = Encoding()
        self.solver = z3.Solver()
        self.solver.set("timeout", SOLVER_TIMEOUT_MS)
        self._added = 0
        self._terms: dict[int, Any] = {}

    def matched(self, facts: Facts) -> Any:
        key = id(facts)
        if key not in self._terms:
            self._terms[key] = self.encoding.matched(facts.filter)
        return self._terms[key]

    def unsat(self, *terms: Any) -> bool:
        constraints = self.encoding.constraints
        self.solver.add(*constraints[self._added:])
        self._added = len(constraints)
        self.solver.push()
        try:
            self.solver.add(*terms)
            return self.solver.check() == z3.unsat
        except z3.Z3Exception:
            return False
        finally:
            self.solver.pop()


def _unsatisfiable(facts: Facts, prover: _Prover) -> bool:
    if "T" not in facts.outcomes:
        return True  # not even the over-approximation can be TRUE
    if facts.independent:
        return False  # atoms over distinct properties take their outcomes independently
    if next(iter(facts.witnesses()), None) is not None:
        return False
    return prover.unsat(prover.matched(facts))


#: Witnesses of the covered filter tried on the cover before the solver is asked.
WITNESSES_TRIED = 8


def _covers(cover: Facts, covered: Facts, prover: _Prover) -> bool:
    """Cheapest first: a true cover; a property the cover needs and the covered filter never
    reads; a witness of the covered filter the cover does not match; a proof from the conjuncts;
    then the solver."""
    if isinstance(cover.filter, TrueFilter):
        return True
    if not covered.dynamic and not cover.required <= covered.reads:
        return False  # a message of the covered filter without that property is not one of the cover's
    first = covered.first_witness()
    if first is not None and not cover.matches(first):
        return False
    if _conjunction_covers(cover, covered):
        return True
    if cover.conjuncts is None and cover.tree is not None and isinstance(cover.tree, ast.And):
        top = ast.conjuncts(cover.tree)
        if any(n in cover.opaque and n not in covered.opaque for n in top):
            return False  # a free atom of the cover alone: the solver could never prove it
    for tried, witness in enumerate(covered.witnesses()):
        if not cover.matches(witness):
            return False
        if tried >= WITNESSES_TRIED:
            break
    return prover.unsat(prover.matched(covered), z3.Not(prover.matched(cover)))


def unsatisfiable(flt: Filter) -> bool:
    """Proven: no message is delivered by ``flt`` (False also when not proven or the filter is invalid)."""
    facts = Facts.of(flt)
    return facts is not None and _unsatisfiable(facts, _Prover())


def covers(cover: Filter, covered: Filter) -> bool:
    """Proven: every message ``covered`` delivers, ``cover`` delivers too."""
    a, b = Facts.of(cover), Facts.of(covered)
    return a is not None and b is not None and _covers(a, b, _Prover())


@dataclass(frozen=True)
class StaticFinding:
    """``unsatisfiable``: ``rule`` delivers nothing; ``redundant-rule``: ``covered_by`` delivers
    everything ``rule`` does (neither has an action)."""

    code: str
    rule: Rule
    covered_by: Rule | None = None


def is_plain_false(flt: Filter) -> bool:
    """A filter written to match nothing (``filter: false``, ``1=0``): deliberate, not a finding."""
    if isinstance(flt, FalseFilter):
        return True
    if not isinstance(flt, SqlFilter):
        return False
    try:
        tree = parse_filter(flt.expression)
    except SqlError:
        return False
    return not _reads_message(tree) and _constant_outcome(tree) is FALSE


def analyse_rules(rules: Sequence[Rule]) -> list[StaticFinding]:
    """The static findings of one subscription's rules, in rule order.

    A rule is redundant when one other action-less rule, itself not reported redundant, covers it:
    the rules reported can all be removed together without changing what the subscription
    receives (evaluation errors deliver nothing, with or without the rule). The covering rule is
    looked for among the rules that read no property the covered rule does not read (a true
    filter reads none): the shapes people write, checked without a quadratic cost in the solver.
    """
    prover = _Prover()
    facts = [Facts.of(rule.filter) for rule in rules]
    found: dict[int, StaticFinding] = {}
    for index, (rule, fact) in enumerate(zip(rules, facts)):
        if fact is not None and not is_plain_false(rule.filter) and _unsatisfiable(fact, prover):
            found[index] = StaticFinding("unsatisfiable", rule)
    plain = [i for i, fact in enumerate(facts) if fact is not None and not rules[i].has_action and i not in found]
    pinned: _PinIndex | None = None
    by_reads: dict[frozenset[Key], list[int]] = {}
    for i in plain:
        by_reads.setdefault(facts[i].reads, []).append(i)  # type: ignore[union-attr]
    redundant: set[int] = set()
    trues = [i for i in plain if facts[i].is_true]  # type: ignore[union-attr]
    for b in plain:
        covered = facts[b]
        assert covered is not None
        if is_plain_false(rules[b].filter):
            continue
        cover_index = next((a for a in trues if a != b and a not in redundant), None)
        if cover_index is None:
            pinned = pinned or _PinIndex(plain, facts)
            cover_index = _first_cover(b, covered, facts, by_reads, redundant | pinned.excluded(covered), prover)
        if cover_index is not None:
            redundant.add(b)
            found[b] = StaticFinding("redundant-rule", rules[b], rules[cover_index])
    return [found[i] for i in sorted(found)]


class _PinIndex:
    """The correlation filters of a subscription by the exact value of each field they set.

    A correlation filter whose field ``k`` is ``v`` cannot cover a filter that is TRUE only where
    ``k`` is some other value: indexing them settles those pairs by hashing, where asking
    :func:`_covers` pair by pair grows with the square of the rules that read the same fields."""

    def __init__(self, indices: Sequence[int], facts: Sequence[Facts | None]) -> None:
        self.setting: dict[Key, set[int]] = {}
        self.by_value: dict[Key, dict[tuple[type, Any], set[int]]] = {}
        for i in indices:
            for key, value in facts[i].exact_pins.items():  # type: ignore[union-attr]
                self.setting.setdefault(key, set()).add(i)
                self.by_value.setdefault(key, {}).setdefault(value, set()).add(i)

    def excluded(self, covered: Facts) -> set[int]:
        """The indexed filters that set a field ``covered`` pins to another value (never its covers)."""
        out: set[int] = set()
        for key, pin in covered.pins.items():
            if key in self.setting:
                try:
                    same = self.by_value[key].get((pin.__class__, pin), set())
                except TypeError:  # an unhashable value: no shortcut
                    continue
                out |= self.setting[key] - same
        return out


def _first_cover(
    b: int, covered: Facts, facts: Sequence[Facts | None], by_reads: dict[frozenset[Key], list[int]], skip: set[int],
    prover: _Prover,
) -> int | None:
    """The first rule, in order, that covers rule ``b``, among those reading no property it does not
    (and not in ``skip``: reported redundant themselves, or known not to cover it)."""
    candidates = sorted(i for reads, group in by_reads.items() if reads <= covered.reads for i in group)
    for a in candidates:
        if a != b and a not in skip and _covers(facts[a], covered, prover):  # type: ignore[arg-type]
            return a
    return None
