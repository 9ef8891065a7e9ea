"""Filters of one message as solver terms: four-valued outcomes, one variable set per property (z3)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable

import z3

from reconciler.model import (
    CORRELATION_SYS_NAMES,
    SYSTEM_PROPERTIES,
    CorrelationFilter,
    FalseFilter,
    Filter,
    SqlFilter,
    TrueFilter,
    TypedValue,
)
from reconciler.names import name_key
from reconciler.sql import ast, values
from reconciler.sql.backend import Backend, Unsupported
from reconciler.sql.errors import SqlEvalError
from reconciler.sql.evaluator import CompiledFilter, MessageView
from reconciler.sql.like import like_regex
from reconciler.sql.parser import parse_filter
from reconciler.sql.static.tags import (
    _COMPARE,
    _EXACT_IN,
    _FLIPPED,
    _INTEGER_RANGE,
    _TAG_NUMBER,
    BINARY_FLOAT_TAGS,
    FINITE,
    INTEGER_TAGS,
    MINUS_INF,
    MISSING_TAG,
    NAN,
    PLUS_INF,
    REPRESENTATIVE,
    TAG_OF_TYPE,
    TAGS,
    literal_value,
)


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
        if node.__class__ not in (ast.And, ast.Or, ast.Not) and not _reads_message(node):
            return _constant_outcome(node)
        return _ENCODE[type(node)](self, node)

    def _conjunction(self, node: ast.And) -> Tri:
        return _and(self.predicate(node.left), self.predicate(node.right))

    def _disjunction(self, node: ast.Or) -> Tri:
        return _or(self.predicate(node.left), self.predicate(node.right))

    def _negation(self, node: ast.Not) -> Tri:
        return self.predicate(node.operand).negated()

    def _is_null(self, node: ast.IsNull) -> Tri:
        var = self.var(node.prop)
        null = z3.Or(var.has("null"), self.missing(node.prop))
        return Tri(null, z3.Not(null), _F).negated() if node.negated else Tri(null, z3.Not(null), _F)

    def _exists(self, node: ast.Exists) -> Tri:
        present = z3.Not(self.missing(node.prop))
        return Tri(present, z3.Not(present), _F)

    def _compare(self, node: ast.Comparison) -> Tri:
        pair = _property_and_literal(node.left, node.right)
        if pair is not None:
            return self._comparison(node.op, *pair)
        flipped = _property_and_literal(node.right, node.left)
        if flipped is not None:
            return self._comparison(_FLIPPED[node.op], *flipped)
        return self.fresh(self._any_missing(node.left, node.right))

    def _in(self, node: ast.In) -> Tri:
        if isinstance(node.value, ast.Property) and all(isinstance(i, ast.Literal) for i in node.items):
            outcome = FALSE
            for item in node.items:
                assert isinstance(item, ast.Literal)
                outcome = _or(outcome, self._comparison("=", node.value, item))
            return outcome.negated() if node.negated else outcome
        return self.fresh(self._any_missing(node.value))

    def _match(self, node: ast.Like) -> Tri:
        if isinstance(node.value, ast.Property) and isinstance(node.pattern, ast.Literal) and (
            node.escape is None or isinstance(node.escape, ast.Literal)
        ):
            outcome = self._like(node.value, node.pattern, node.escape)
            return outcome.negated() if node.negated else outcome
        parts = [node.value, node.pattern] + ([node.escape] if node.escape is not None else [])
        return self.fresh(self._any_missing(*parts))

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
        on_null = like_regex(pattern_text, escape_text).match("") is not None
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


_OPERAND = Unsupported(
    "an expression is encoded as the operand of the comparison, IN or LIKE that reads it: a property "
    "against literals exactly, anything else (arithmetic, property(), newid()) as a free atom"
)
_STATEMENT = Unsupported("actions: the proofs are about filters")
#: The static prover's back end: a predicate's four outcomes as solver terms (handlers take the encoding).
_ENCODE: Backend[Tri] = Backend("static prover", {
    ast.Literal: _OPERAND,
    ast.Property: _OPERAND,
    ast.Function: _OPERAND,
    ast.Unary: _OPERAND,
    ast.Binary: _OPERAND,
    ast.Comparison: Encoding._compare,
    ast.Like: Encoding._match,
    ast.In: Encoding._in,
    ast.IsNull: Encoding._is_null,
    ast.Exists: Encoding._exists,
    ast.And: Encoding._conjunction,
    ast.Or: Encoding._disjunction,
    ast.Not: Encoding._negation,
    ast.Set: _STATEMENT,
    ast.Remove: _STATEMENT,
    ast.Action: _STATEMENT,
})
