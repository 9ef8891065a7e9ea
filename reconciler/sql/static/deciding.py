"""Whether a condition of a SQL filter can ever decide the filter's outcome one way: the directions
``sbrules test --coverage`` asks the cases for (``reconciler.ruletests.coverage``, docs/testing.md
"Coverage"), proven impossible with the solver encoding so that coverage does not count them.

What decides follows coverage's masking rule, written here as solver terms over each operand's own
outcome: an AND that is TRUE is decided by all its operands, one that is not by its first FALSE
operand (else its first that is not TRUE); an OR that is not TRUE by all its operands, one that is
TRUE by its first TRUE operand (else its first that is not FALSE); NOT by its operand. The encoding
admits more messages than exist (free atoms), so "impossible" is sound; a question the solver
does not settle within its time is "possible".
"""

from __future__ import annotations

from typing import Any, Iterator

import z3

from reconciler.sql import ast
from reconciler.sql.static.encoding import Encoding

#: Milliseconds the solver may spend on one direction of one condition.
DECISION_TIMEOUT_MS = 250


class Decisions:
    """One filter's conditions, asked one direction at a time."""

    def __init__(self, tree: ast.Predicate, timeout_ms: int = DECISION_TIMEOUT_MS):
        self.tree = tree
        self.encoding = Encoding()
        self.matched = self.encoding.predicate(tree).t
        self.solver = z3.Solver()
        self.solver.set("timeout", timeout_ms)

    def possible(self, leaf: ast.Predicate, matched: bool, item: int | None = None) -> bool:
        """False when proven that no message makes ``leaf`` (a condition of the filter, by identity)
        decide the filter with it matched (``matched``) or not; with ``item``, ``leaf`` an IN and
        that item the one it matched (the TRUE direction of an IN item)."""
        decides = self._decides(self.tree, leaf)
        if decides is None:
            return True
        terms = [decides, self.matched if matched else z3.Not(self.matched)]
        if item is not None and isinstance(leaf, ast.In):
            terms.append(self.encoding.predicate(ast.In(leaf.value, (leaf.items[item],), leaf.negated)).t)
        self.solver.push()
        try:
            self.solver.add(*self.encoding.constraints, *terms)
            return self.solver.check() != z3.unsat
        except z3.Z3Exception:
            return True
        finally:
            self.solver.pop()

    def _decides(self, node: ast.Predicate, leaf: ast.Predicate) -> Any | None:
        """The term: ``leaf`` is among what decides ``node``'s outcome; None when not inside it."""
        if node is leaf:
            return z3.BoolVal(True)
        if isinstance(node, ast.Not):
            return self._decides(node.operand, leaf)
        if not isinstance(node, ast.And | ast.Or):
            return None
        operands = ast.conjuncts(node) if isinstance(node, ast.And) else ast.disjuncts(node)
        k = next((i for i, operand in enumerate(operands) if _inside(operand, leaf)), None)
        if k is None:
            return None
        inner = self._decides(operands[k], leaf)
        if inner is None:
            return None
        outcomes = [self.encoding.predicate(o) for o in operands]
        whole = self.encoding.predicate(node).t
        before = outcomes[:k]
        if isinstance(node, ast.And):
            first_false = z3.And(outcomes[k].f, *[z3.Not(o.f) for o in before])
            none_false = z3.And(*[z3.Not(o.f) for o in outcomes])
            first_not_true = z3.And(z3.Not(outcomes[k].t), *[o.t for o in before])
            return z3.And(inner, z3.Or(whole, first_false, z3.And(none_false, first_not_true)))
        first_true = z3.And(outcomes[k].t, *[z3.Not(o.t) for o in before])
        none_true = z3.And(*[z3.Not(o.t) for o in outcomes])
        first_not_false = z3.And(z3.Not(outcomes[k].f), *[o.f for o in before])
        return z3.And(inner, z3.Or(z3.Not(whole), first_true, z3.And(none_true, first_not_false)))


def _inside(node: ast.Node, leaf: ast.Node) -> bool:
    return any(n is leaf for n in _walk(node))


def _walk(node: ast.Node) -> Iterator[ast.Node]:
    yield node
    for child in ast.children(node):
        yield from _walk(child)
