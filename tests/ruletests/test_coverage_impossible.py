"""Coverage does not ask for what no message can do: a condition's direction the static prover
shows impossible is excluded, listed, and never one a message actually produces."""

from __future__ import annotations

import itertools

import pytest

from reconciler.model import DesiredState, Message, Origin, Rule, SqlFilter, Subscription, Topic
from reconciler.ruletests import coverage
from reconciler.ruletests.cases import Case, Expectation
from reconciler.ruletests.run import run_cases
from reconciler.sql import MessageView, ast, canonical, compiled_filter
from reconciler.sql.static.deciding import Decisions

pytestmark = pytest.mark.unit


def _conditions(text: str) -> tuple[ast.Predicate, list[ast.Predicate]]:
    tree = compiled_filter(text).node
    return tree, coverage._leaves(tree)  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("text", "never"),
    [
        ("a > 5 AND a > 3", {"a > 3": {False}}),  # once a > 5, a > 3 is TRUE: it never stops the match
        ("1 = 1 AND a = 2", {"1 = 1": {False}}),  # a constant
        ("x = 1 OR x = 1", {"x = 1#2": {True}}),  # the first is always the TRUE that decides
        ("a = 1 AND a = 2", {"a = 1": {True}, "a = 2": {True}}),  # never matches
        ("a = 1 AND b = 2", {}),
        ("a IN ('x', 'y') AND NOT a = 'y'", {}),
    ],
)
def test_the_prover_names_the_directions_no_message_can_produce(text, never):
    tree, leaves = _conditions(text)
    decisions = Decisions(tree)
    seen_names: dict[str, int] = {}
    found = {}
    for leaf in leaves:
        name = canonical(leaf)
        seen_names[name] = seen_names.get(name, 0) + 1
        label = name if seen_names[name] == 1 else f"{name}#{seen_names[name]}"
        impossible = {outcome for outcome in (True, False) if not decisions.possible(leaf, outcome)}
        if impossible:
            found[label] = impossible
    assert found == never


def test_an_in_item_the_rest_of_the_filter_rules_out_is_never_asked_to_match():
    tree, (in_node, _equal) = _conditions("a IN ('x', 'y') AND a = 'x'")
    decisions = Decisions(tree)
    assert decisions.possible(in_node, True, 0) and not decisions.possible(in_node, True, 1)


FILTERS = [
    "a > 5 AND a > 3", "x = 1 OR x = 1", "a IN ('x', 'y') AND a = 'x'", "NOT (a = 1 OR b = 2) AND c IS NULL",
    "a = 1 AND (b = 2 OR a <> 1)", "a LIKE 'x%' AND a = 'xy'", "(a > 1 OR b > 1) AND a < 0",
]
VALUES = [None, "absent", 0, 1, 4, 6, "x", "xy"]


@pytest.mark.parametrize("text", FILTERS)
def test_no_message_ever_produces_a_direction_the_prover_excludes(text):
    """Soundness: every combination of interesting values, run through coverage's own masking rule."""
    tree, leaves = _conditions(text)
    decisions = Decisions(tree)
    excluded = {(id(leaf), outcome) for leaf in leaves for outcome in (True, False) if not decisions.possible(leaf, outcome)}
    measured = coverage.Coverage(DesiredState(()))
    names = sorted({n.name for n in _walk(tree) if isinstance(n, ast.Property)})
    for combo in itertools.product(VALUES, repeat=len(names)):
        user = {name: value for name, value in zip(names, combo) if value != "absent"}
        view = MessageView.from_plain(user=user)
        outcome = measured._run(tree, view)
        for key in measured._deciding(tree, view, outcome):
            assert (key, outcome is True) not in excluded, (text, user)


def _walk(node: ast.Node):
    yield node
    for child in ast.children(node):
        yield from _walk(child)


def _state(*rules: Rule) -> DesiredState:
    return DesiredState((Topic("orders", (Subscription("billing", rules),)),))


def test_excluded_directions_are_not_counted_and_are_listed():
    state = _state(Rule("r", SqlFilter("a > 5 AND a > 3")))
    cases = [
        Case(name, "orders", Message.from_json({"user": user}), Expectation(unrouted=None), Origin("t.test.yaml", n, 1))
        for n, (name, user) in enumerate([("big", {"a": 10}), ("small", {"a": 1})], start=1)
    ]
    branches = coverage.measure(run_cases(cases, state), state, str)
    assert coverage.percent(branches) == 100.0
    doc = coverage.to_json(branches)
    assert doc["uncovered"] == [] and [(e["branch"], e["never"]) for e in doc["excluded"]] == [("a > 3", ["not true"])]
    assert "condition `a > 3` can never decide not TRUE (proven; not counted)" in coverage.render_text(branches)
    assert 'lines-covered="3" lines-valid="3"' in coverage.render_cobertura(branches)
