"""The questions: is a filter unsatisfiable, does one rule cover another; the findings of a subscription."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import z3

from reconciler.model import (
    FalseFilter,
    Filter,
    Rule,
    SqlFilter,
    TrueFilter,
)
from reconciler.sql import ast
from reconciler.sql.errors import SqlError
from reconciler.sql.parser import parse_filter
from reconciler.sql.static.encoding import FALSE, Encoding, _constant_outcome, _reads_message
from reconciler.sql.static.facts import Facts, Key, _conjunction_covers

#: Milliseconds the solver may spend on one question; "unknown" proves nothing.
SOLVER_TIMEOUT_MS = 2000



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
