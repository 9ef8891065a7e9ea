"""Which parts of the rules the test cases exercise (``sbrules test --coverage``).

The branches of a rule are the conditions of its SQL filter (each comparison, LIKE, IN, IS NULL
and EXISTS; each IN item on its own), the fields of its correlation filter, its true filter, and
each SET/REMOVE statement of its action. A condition is covered when, in some case, it decided
the rule's outcome with the rule TRUE, and in some case it decided it with the rule not TRUE
(FALSE, UNKNOWN or an error). What decided an outcome follows the evaluation: an AND that is TRUE
was decided by all its operands, an AND that is not by its first FALSE operand (else its first
one that is not TRUE); an OR that is TRUE by its first TRUE operand, an OR that is not by all its
operands; NOT by its operand. An IN item is covered when the IN decided TRUE by matching that item
and, in some case, decided not TRUE. A correlation field is covered when the filter matched and,
in some case, that field was the first not to match. A true filter is covered once it matched, a
statement once its action ran. This is MC/DC's masking form, as short-circuit evaluation shows it.

A direction no message can produce (a condition that is always TRUE once the conditions before it
are, an IN item the rest of the filter rules out, a filter that never matches) is not asked for:
where a SQL condition or IN item is left uncovered, the static prover
(``reconciler.sql.static.deciding``) is asked, within :data:`PROOF_BUDGET_SECONDS` for the run, for
each direction it lacks, and a direction proven impossible is excluded and listed as such.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from reconciler.model import CorrelationFilter, DesiredState, Message, Origin, Rule, SqlFilter, SqlRuleAction, TrueFilter
from reconciler.ruletests.run import CaseResult
from reconciler.sql import MessageView, ast, canonical, compiled_action, compiled_filter
from reconciler.sql.errors import SqlError, SqlEvalError
from reconciler.sql.evaluator import compile_predicate
from reconciler.sql.router import TopicRouter, requirement, topic_router
from reconciler.sql.routing import RuleCheck, rule_check

#: Seconds a run may spend proving uncovered directions impossible (past it, they stay counted).
PROOF_BUDGET_SECONDS = 5.0

#: leaves of a filter that decide; ``ast.In`` also has its items as branches
_LEAVES = (ast.Comparison, ast.Like, ast.In, ast.IsNull, ast.Exists)


@dataclass
class Branch:
    """One branch of one rule, and the outcomes it decided."""

    topic: str
    subscription: str
    rule: str
    kind: str  # condition / in-item / correlation-field / true-filter / statement
    text: str
    origin: Origin | None
    #: the outcomes that must be seen: {True, False}, or {True} (true filters, statements)
    needed: frozenset[bool] = frozenset({True, False})
    seen: set[bool] = field(default_factory=set)
    #: the needed outcomes the static prover showed no message can make it decide (not counted)
    impossible: set[bool] = field(default_factory=set)
    #: what marks it: the condition's node and, for an IN item, the item's index
    node: ast.Predicate | None = None
    item: int | None = None

    @property
    def counted(self) -> frozenset[bool]:
        """The outcomes it must decide to be covered."""
        return self.needed - self.impossible

    @property
    def covered(self) -> bool:
        return self.counted <= self.seen


class _RuleBranches:
    """A rule's branches, keyed by what marks them (AST node identity, item index, field index)."""

    def __init__(self, topic: str, sub: str, rule: Rule) -> None:
        self.rule = rule
        self.branches: list[Branch] = []
        self.by_key: dict[Any, Branch] = {}
        self.node: ast.Predicate | None = None
        self.statements = 0
        #: a correlation filter made ready, and its fields, each as a filter of its own (to find the
        #: first not to match)
        self.check: RuleCheck | None = None
        self.fields: list[RuleCheck] = []
        origin = rule.filter_origin or rule.origin

        def add(
            key: Any, kind: str, text: str, needed: frozenset[bool] = frozenset({True, False}),
            node: ast.Predicate | None = None, item: int | None = None,
        ) -> None:
            branch = Branch(topic, sub, rule.name, kind, text, origin, needed, node=node, item=item)
            self.branches.append(branch)
            self.by_key[key] = branch

        flt = rule.filter
        if isinstance(flt, SqlFilter):
            try:
                self.node = compiled_filter(flt.expression).node
            except SqlError:
                self.node = None
            for leaf in _leaves(self.node) if self.node is not None else ():
                add(id(leaf), "condition", canonical(leaf), node=leaf)  # type: ignore[arg-type]
                if isinstance(leaf, ast.In):
                    for i, item in enumerate(leaf.items):
                        add((id(leaf), i), "in-item", f"{canonical(leaf.value)} IN (… {canonical(item)} …)", node=leaf, item=i)
        elif isinstance(flt, CorrelationFilter):
            for i, (name, value) in enumerate(_correlation_fields(flt)):
                add(("field", i), "correlation-field", f"{name} = {value}")
            singles = [CorrelationFilter(**{name: value}) for name, value in flt.system_fields().items()]  # type: ignore[arg-type]
            singles += [CorrelationFilter(properties=(prop,)) for prop in flt.properties]
            self.check, self.fields = rule_check(flt), [rule_check(single) for single in singles]
        elif isinstance(flt, TrueFilter):
            add("true", "true-filter", "true filter", frozenset({True}))
        if isinstance(rule.action, SqlRuleAction):
            try:
                statements = compiled_action(rule.action.expression).node.statements
            except SqlError:
                statements = ()
            for i, statement in enumerate(statements):
                add(("statement", i), "statement", canonical(statement), frozenset({True}))
            self.statements = len(statements)
        #: whether the router indexes the rule (it skips it for a message without what it requires),
        #: and whether a skip has been marked
        self.indexed = requirement(rule) is not None
        self.skip_marked = False
        #: how many branches are not covered yet: once none is, cases need not be run through the rule
        self.uncovered = sum(not b.covered for b in self.branches)

    def mark(self, key: Any, outcome: bool) -> None:
        branch = self.by_key.get(key)
        if branch is not None and outcome not in branch.seen:
            branch.seen.add(outcome)
            if branch.covered:
                self.uncovered -= 1


def _leaves(node: ast.Node) -> list[ast.Node]:
    if isinstance(node, _LEAVES):
        return [node]
    out: list[ast.Node] = []
    for child in ast.children(node):
        out += _leaves(child)
    return out


def _correlation_fields(flt: CorrelationFilter) -> list[tuple[str, str]]:
    return [(name, repr(value)) for name, value in flt.system_fields().items()] + [
        (f"properties.{name}", value.describe()) for name, value in flt.properties
    ]


class Coverage:
    """Branches of every declared rule, marked by the cases run through their topics."""

    def __init__(self, state: DesiredState) -> None:
        self.rules: dict[tuple[str, int, int], _RuleBranches] = {}
        self._routers: dict[str, TopicRouter] = {}
        self._predicates: dict[int, Callable[[MessageView], Any]] = {}
        #: the operands of each AND and OR, by its id
        self._operands: dict[int, list[ast.Predicate]] = {}
        #: each IN item as an IN of its own, by (the IN's id, the item's index)
        self._items: dict[tuple[int, int], Callable[[MessageView], Any]] = {}
        self._state = state
        self._candidate_counts: dict[str, dict[tuple[int, int], int]] = defaultdict(lambda: defaultdict(int))
        self._cases: dict[str, int] = defaultdict(int)
        for topic in state.topics:  # a topic no case reaches has every branch uncovered
            self._router(topic.name)

    def _router(self, topic_name: str) -> TopicRouter | None:
        if topic_name not in self._routers:
            topic = self._state.topic(topic_name)
            if topic is None:
                return None
            router = self._routers[topic_name] = topic_router(topic)
            for s, (sub, rules) in enumerate(router.subscriptions):
                for r, rule in enumerate(rules):
                    self.rules[(topic.name, s, r)] = _RuleBranches(topic.declared or topic.name, sub, rule)
        return self._routers[topic_name]

    def record(self, topic_name: str, message: Message) -> None:
        """Mark what routing ``message`` through topic ``topic_name`` (its namespace name) decided."""
        router = self._router(topic_name)
        if router is None:
            return
        view = MessageView.from_message(message)
        self._cases[topic_name] += 1
        counts = self._candidate_counts[topic_name]
        for s, chosen in router.candidates(view).items():
            for r in chosen:
                branches = self.rules[(topic_name, s, r)]
                if counts[(s, r)] < self._cases[topic_name] - 1:  # an earlier case skipped the rule
                    _mark_skipped(branches)
                counts[(s, r)] += 1
                if branches.uncovered:
                    self._record_rule(branches, message, view)

    def _record_rule(self, branches: _RuleBranches, message: Message, view: MessageView) -> None:
        flt = branches.rule.filter
        matched = False
        if isinstance(flt, SqlFilter) and branches.node is not None:
            outcome = self._run(branches.node, view)
            matched = outcome is True
            for key in self._deciding(branches.node, view, outcome):
                branches.mark(key, matched)
        elif branches.check is not None:
            matched = branches.check(view, message).matched
            if matched:
                for i in range(len(branches.fields)):
                    branches.mark(("field", i), True)
            else:
                first = next((i for i, single in enumerate(branches.fields) if not single(view, message).matched), 0)
                branches.mark(("field", first), False)
        elif isinstance(flt, TrueFilter):
            matched = True
            branches.mark("true", True)
        if matched:
            for i in range(branches.statements):
                branches.mark(("statement", i), True)

    def _run(self, node: ast.Node, view: MessageView) -> bool | str | None:
        fn = self._predicates.get(id(node))
        if fn is None:
            fn = self._predicates[id(node)] = compile_predicate(node)  # type: ignore[arg-type]
        try:
            result: bool | None = fn(view)
        except SqlEvalError:
            return "error"
        return result

    def _deciding(self, node: ast.Node, view: MessageView, outcome: bool | str | None) -> list[Any]:
        if isinstance(node, ast.Not):
            return self._deciding(node.operand, view, self._run(node.operand, view))
        if isinstance(node, ast.And | ast.Or):
            operands = self._operands.get(id(node))
            if operands is None:
                operands = self._operands[id(node)] = ast.conjuncts(node) if isinstance(node, ast.And) else ast.disjuncts(node)
            results = [self._run(o, view) for o in operands]
            all_decide = (outcome is True) == isinstance(node, ast.And)
            if all_decide:
                return [k for o, res in zip(operands, results) for k in self._deciding(o, view, res)]
            wanted = isinstance(node, ast.Or)
            index = next((i for i, res in enumerate(results) if res is wanted), None)
            if index is None:
                index = next(i for i, res in enumerate(results) if res is not (not wanted))
            return self._deciding(operands[index], view, results[index])
        keys: list[Any] = [id(node)]
        if isinstance(node, ast.In):
            if outcome is True:
                keys += [(id(node), i) for i, item in enumerate(node.items) if self._item_matches(node, i, view)]
            else:
                keys += [(id(node), i) for i in range(len(node.items))]
        return keys

    def _item_matches(self, node: ast.In, index: int, view: MessageView) -> bool:
        key = (id(node), index)
        fn = self._items.get(key)
        if fn is None:
            fn = self._items[key] = compile_predicate(ast.In(node.value, (node.items[index],), node.negated))
        try:
            return fn(view) is True
        except SqlEvalError:
            return False

    def finish(self) -> list[Branch]:
        """Every branch, after marking what the router's index decided for each rule it skipped."""
        for topic_name, router in self._routers.items():
            counts = self._candidate_counts[topic_name]
            for s, (_sub, rules) in enumerate(router.subscriptions):
                for r in range(len(rules)):
                    if counts.get((s, r), 0) < self._cases[topic_name]:
                        _mark_skipped(self.rules[(topic_name, s, r)])
        deadline = time.monotonic() + PROOF_BUDGET_SECONDS
        for branches in self.rules.values():
            if branches.node is not None and time.monotonic() < deadline:
                self._exclude_impossible(branches, deadline)
        return [b for rule in self.rules.values() for b in rule.branches]

    def _exclude_impossible(self, branches: _RuleBranches, deadline: float) -> None:
        """Each outcome an uncovered condition or IN item lacks that the prover shows no message
        can make it decide, until ``deadline``. The static search's candidate messages go first:
        one that makes it decide that outcome shows it possible without the solver."""
        from reconciler.sql.static.deciding import Decisions
        from reconciler.sql.static.facts import candidate_messages

        node = branches.node
        lacking = [(b, outcome) for b in branches.branches if b.node is not None for outcome in b.needed - b.seen]
        if node is None or not lacking:
            return
        wanted = {(id(b.node) if b.item is None else (id(b.node), b.item), outcome): (b, outcome) for b, outcome in lacking}
        for view in candidate_messages(branches.rule.filter):
            outcome = self._run(node, view)
            for key in self._deciding(node, view, outcome):
                wanted.pop((key, outcome is True), None)
            if not wanted:
                return
        decisions: Decisions | None = None
        for branch, outcome in wanted.values():
            if time.monotonic() >= deadline:
                return
            decisions = decisions or Decisions(node)
            item = branch.item if outcome else None  # an item decides "not TRUE" whenever its IN does
            if not decisions.possible(branch.node, outcome, item):  # type: ignore[arg-type]
                branch.impossible.add(outcome)


def _mark_skipped(branches: _RuleBranches) -> None:
    """A case the router did not give the rule to: its indexed condition (a SQL filter's first
    conjunct, a correlation field) decided it FALSE."""
    if branches.skip_marked or not branches.indexed:
        return
    branches.skip_marked = True
    if branches.node is not None:
        first = ast.conjuncts(branches.node)[0]
        branches.mark(id(first), False)
        for i in range(len(getattr(first, "items", ()))):
            branches.mark((id(first), i), False)
    else:
        branches.mark(("field", 0), False)


def measure(results: Sequence[CaseResult], state: DesiredState, actual_topic: Callable[[str], str]) -> list[Branch]:
    """The branches of every declared rule, marked by the cases that ran."""
    coverage = Coverage(state)
    for result in results:
        if result.status != "skipped":
            coverage.record(actual_topic(result.case.topic), result.case.message)
    return coverage.finish()


def percent(branches: Sequence[Branch]) -> float:
    return 100.0 if not branches else 100.0 * sum(b.covered for b in branches) / len(branches)


def to_json(branches: Sequence[Branch]) -> dict[str, Any]:
    return {
        "percent": round(percent(branches), 2),
        "branches": len(branches),
        "covered": sum(b.covered for b in branches),
        "uncovered": [
            {
                "topic": b.topic, "subscription": b.subscription, "rule": b.rule, "kind": b.kind, "branch": b.text,
                "file": b.origin.file if b.origin else None, "line": b.origin.line if b.origin else None,
                "seen": sorted(_outcome_word(s) for s in b.seen),
            }
            for b in branches if not b.covered
        ],
        "excluded": [
            {
                "topic": b.topic, "subscription": b.subscription, "rule": b.rule, "kind": b.kind, "branch": b.text,
                "file": b.origin.file if b.origin else None, "line": b.origin.line if b.origin else None,
                "never": sorted(_outcome_word(n) for n in b.impossible),
            }
            for b in branches if b.impossible
        ],
    }


def _outcome_word(outcome: bool) -> str:
    return "true" if outcome else "not true"


def render_text(branches: Sequence[Branch]) -> str:
    lines = [f"coverage: {percent(branches):.1f}% of {len(branches)} branches"]
    for b in branches:
        if not b.covered:
            missing = " and ".join("TRUE" if n else "not TRUE" for n in sorted(b.counted - b.seen, reverse=True))
            lines.append(f"  {_where(b)}: {b.topic}/{b.subscription} rule {b.rule}: {b.kind} `{b.text}` never decided {missing}")
    for b in branches:
        if b.impossible:
            never = " or ".join("TRUE" if n else "not TRUE" for n in sorted(b.impossible, reverse=True))
            lines.append(
                f"  {_where(b)}: {b.topic}/{b.subscription} rule {b.rule}: {b.kind} `{b.text}` can never decide {never} "
                "(proven; not counted)"
            )
    return "\n".join(lines)


def _where(b: Branch) -> str:
    return f"{b.origin.file}:{b.origin.line}" if b.origin else "<input>"


def render_cobertura(branches: Sequence[Branch]) -> str:
    """Cobertura XML: each rule file a class, each rule's line a line whose condition coverage
    counts the outcomes its branches must decide and did."""
    by_file: dict[str, dict[int, list[Branch]]] = defaultdict(lambda: defaultdict(list))
    for b in branches:
        if b.origin is not None:
            by_file[b.origin.file][b.origin.line].append(b)
    total = sum(len(b.counted) for b in branches)
    done = sum(len(b.counted & b.seen) for b in branches)
    rate = f"{done / total if total else 1:.4f}"
    root = ET.Element("coverage", {
        "line-rate": rate, "branch-rate": rate, "lines-covered": str(done), "lines-valid": str(total),
        "branches-covered": str(done), "branches-valid": str(total), "complexity": "0", "version": "sbrules",
        "timestamp": "0",
    })
    ET.SubElement(ET.SubElement(root, "sources"), "source").text = "."
    classes = ET.SubElement(ET.SubElement(ET.SubElement(root, "packages"), "package", name="rules"), "classes")
    for file, lines in sorted(by_file.items()):
        cls = ET.SubElement(classes, "class", name=file, filename=file, complexity="0")
        ET.SubElement(cls, "methods")
        lines_el = ET.SubElement(cls, "lines")
        for number, listed in sorted(lines.items()):
            want = sum(len(b.counted) for b in listed)
            got = sum(len(b.counted & b.seen) for b in listed)
            attributes = {"number": str(number), "hits": str(got), "branch": "true",
                          "condition-coverage": f"{round(100 * got / want) if want else 100}% ({got}/{want})"}
            ET.SubElement(lines_el, "line", attributes)
        cls.set("line-rate", f"{sum(1 for ls in lines.values() if all(b.covered for b in ls)) / len(lines):.4f}")
        cls.set("branch-rate", cls.get("line-rate", "0"))
    ET.indent(root)
    return '<?xml version="1.0" ?>\n' + ET.tostring(root, encoding="unicode")
