"""The contract of the SQL AST's back ends: every node class has an entry in every back end's table,
a handler or an explicit "unsupported" with its reason; and, per node class, the back ends that
share the evaluator's semantics agree with it on generated filters and messages."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from reconciler.model import Rule, SqlFilter
from reconciler.sql import ast, canonical, parse_filter
from reconciler.sql.backend import BACKENDS, NODE_TYPES, Backend, Unsupported
from reconciler.sql.errors import SqlError
from reconciler.sql.evaluator import CompiledFilter, MessageView
from reconciler.sql.fallthrough import NotExpressible, is_false, is_true
from reconciler.sql.static import unsatisfiable

from .strategies import messages, predicates

#: Where each back end lives, and the name it registers.
BACK_ENDS = {
    "reconciler.sql.canonical": ["canonical printer"],
    "reconciler.sql.evaluator": ["evaluator"],
    "reconciler.sql.static.encoding": ["static prover"],
    "reconciler.sql.fallthrough": ["fall-through generator (TRUE)", "fall-through generator (FALSE)"],
    "reconciler.traffic.spark.translate": ["Spark translator"],
}
PURE = {module: names for module, names in BACK_ENDS.items() if not module.startswith("reconciler.traffic")}


def _node_classes() -> set[type]:
    return {
        value for value in vars(ast).values()
        if isinstance(value, type) and value.__module__ == ast.__name__ and dataclasses.is_dataclass(value)
    }


def _check_tables(modules: dict[str, list[str]]) -> None:
    for module, names in modules.items():
        importlib.import_module(module)
        for name in names:
            backend = BACKENDS[name]
            assert set(backend) == set(NODE_TYPES), name
            for cls, entry in backend.unsupported.items():
                assert entry.reason.strip(), f"{name}: {cls.__name__} unsupported without a reason"


@pytest.mark.unit
def test_the_contract_names_every_node_class_of_the_ast():
    assert set(NODE_TYPES) == _node_classes()


@pytest.mark.unit
def test_every_pure_back_end_covers_every_node_class():
    _check_tables(PURE)


def test_the_spark_translator_covers_every_node_class():
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    _check_tables(BACK_ENDS)


@pytest.mark.unit
def test_a_table_that_forgets_a_node_class_fails_when_it_is_built():
    table = {cls: (lambda node: "x") for cls in NODE_TYPES if cls is not ast.Like}
    with pytest.raises(TypeError, match=r"no entry for \['Like'\]"):
        Backend("incomplete", table)
    with pytest.raises(TypeError, match="non-nodes"):
        Backend("stray", {**table, ast.Like: lambda node: "x", int: lambda node: "x"})


@pytest.mark.unit
def test_an_unsupported_node_says_why_when_it_is_met():
    backend = Backend("partial", {cls: Unsupported("not here: elsewhere") for cls in NODE_TYPES})
    with pytest.raises(TypeError, match="partial does not express Exists nodes: not here: elsewhere"):
        backend(ast.Exists(ast.Property("user", "a")))
    BACKENDS.pop("partial")


# -- per node class, against the evaluator ---------------------------------------------------------

PREDICATE_AND_EXPRESSION_CLASSES = [cls for cls in NODE_TYPES if cls not in (ast.Set, ast.Remove, ast.Action)]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _contains(tree: ast.Node, cls: type) -> bool:
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.__class__ is cls:
            return True
        stack.extend(ast.children(node))
    return False


def _outcome(tree: ast.Predicate, view: MessageView) -> tuple[bool | None, bool]:
    """(result, failed): TRUE/FALSE/None (UNKNOWN), and whether evaluation raised."""
    outcome = CompiledFilter(tree).outcome(view)
    return outcome.result, outcome.error is not None


@pytest.mark.slow
@pytest.mark.parametrize("cls", PREDICATE_AND_EXPRESSION_CLASSES, ids=lambda cls: cls.__name__)
def test_printer_prover_and_fall_through_agree_with_the_evaluator_on_filters_with_each_node_class(cls):
    """The printed filter evaluates as the tree does; a filter the prover calls unsatisfiable is
    never TRUE; the fall-through's is-TRUE and is-FALSE predicates are TRUE exactly where the
    filter is TRUE, respectively FALSE (when it evaluates)."""

    @SETTINGS
    @given(tree=predicates, batch=st.lists(messages, min_size=1, max_size=4))
    def check(tree: ast.Predicate, batch) -> None:
        assume(_contains(tree, cls))
        try:
            printed = parse_filter(canonical(tree))
        except SqlError:
            assume(False)  # a generated tree outside the language's limits
        rule = Rule("r", SqlFilter(canonical(tree)))
        never = unsatisfiable(rule.filter)
        try:
            when_true, when_false = is_true(printed, rule), is_false(printed, rule)
        except NotExpressible:
            when_true = when_false = None
        for message in batch:
            view = MessageView.from_message(message)
            result, failed = _outcome(tree, view)
            assert _outcome(printed, view) == (result, failed), canonical(tree)
            assert not (never and result is True and not failed), canonical(tree)
            if failed or when_true is None or when_false is None:
                continue
            assert _outcome(when_true, view)[0] is (result is True), canonical(tree)
            assert _outcome(when_false, view)[0] is (result is False), canonical(tree)

    check()
