"""What a filter reads, its conjuncts and witness messages: the cheap facts most questions are settled by."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Iterable, Iterator

from reconciler.model import (
    CORRELATION_SYS_NAMES,
    SYSTEM_PROPERTIES,
    CorrelationFilter,
    FalseFilter,
    Filter,
    SqlFilter,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.names import name_key
from reconciler.sql import ast, values
from reconciler.sql.errors import SqlError, SqlEvalError
from reconciler.sql.evaluator import MessageView
from reconciler.sql.parser import parse_filter
from reconciler.sql.static.encoding import (
    ERROR,
    FALSE,
    TRUE,
    _constant_outcome,
    _property_and_literal,
    _reads_message,
    _walk,
)
from reconciler.sql.static.tags import (
    _COMPARE,
    _FLIPPED,
    MISSING_TAG,
    REPRESENTATIVE,
    TAG_OF_TYPE,
    TAGS,
    _compiled,
    literal_value,
    runtime_tag,
)

#: Candidate messages the witness search evaluates before asking the solver.
SEARCH_LIMIT = 96


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
    for view in candidate_messages(flt):
        if check(view):
            yield view


def candidate_messages(flt: Filter) -> Iterable[MessageView]:
    """At most :data:`SEARCH_LIMIT` messages worth trying on ``flt``, matched or not: the values of
    the properties it reads combined (the literals it names, their neighbours, absent, null)."""
    candidates = _candidates(flt)
    keys = list(candidates)
    for combo in itertools.islice(itertools.product(*(candidates[k] for k in keys)), SEARCH_LIMIT):
        view = _view(dict(zip(keys, combo)))
        if view is not None:
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


