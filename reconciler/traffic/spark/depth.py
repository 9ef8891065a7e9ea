"""Keeping Spark expressions shallow enough for Spark Connect.

Spark Connect sends a plan as nested protobuf messages, two levels per expression node (an
``Expression`` and the function, alias or cast it holds). Its Python client copies every argument
list through protobuf's decoder, which refuses messages nested more than 100 levels deep
(``Exceeded upb_DecodeOptions_MaxDepth``), so one top-level column of a query may nest at most
about fifty nodes. A local or standalone session has no such limit.

Chains that grow with the work are therefore built as balanced trees, log2(n) deep instead of n:
a report's outcome masks (one term per filter) and the operands of an n-ary AND or OR. What a user
nests by hand (``a + (b + (c + …))``) cannot be regrouped without changing the result; a filter
whose columns nest deeper than a Spark Connect plan can carry is evaluated by the Python UDF
instead, whose plan is one call (:func:`nesting` measures it).

Any session has a second bound: each operator over a computed operand binds it in a lambda
(``algebra.let``), and Spark's analyzer resolves nested lambdas one layer at a time, in a fixed
number of passes (``spark.sql.analyzer.maxIterations``, 100). Filters whose operators nest deeper
than :data:`MAX_OPERATOR_NESTING` are evaluated by the Python UDF in every session
(:func:`operator_nesting` counts them on the filter's syntax tree, before anything is built).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

from reconciler.sql import ast

T = TypeVar("T")

#: Expression nodes one top-level column of a Spark Connect query may nest, measured with
#: pyspark 4's client (49 nodes pass, 50 fail), less one for leaves that carry deeper messages.
CONNECT_MAX_NESTING = 48

#: Operators a natively translated filter may nest (:func:`operator_nesting`). Measured on local
#: Spark 4 with ``q + q + … > 100``: translated for every property type, 14 terms resolve (in
#: 36 s) and 15 exceed the analyzer's passes; for a property known to hold long and string values,
#: 24 terms resolve (in 15 s) and 28 do not. Twelve keeps a margin and the analysis in seconds.
MAX_OPERATOR_NESTING = 12

#: The nodes that are operators over values (each binds a computed operand in Spark).
_OPERATORS = (ast.Binary, ast.Unary, ast.Function, ast.Comparison, ast.In, ast.Like)


def balanced(combine: Callable[[T, T], T], items: Iterable[T]) -> T:
    """``combine`` over ``items`` as a balanced tree (left to right order kept): for an associative
    operator the same value as a left-deep chain, nested ceil(log2(n)) deep instead of n - 1."""
    level = list(items)
    if not level:
        raise ValueError("balanced() of nothing")
    while len(level) > 1:
        paired = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = paired + level[len(level) - len(level) % 2 :]
    return level[0]


def nesting(column: Any) -> int:
    """Expression nodes on the longest root-to-leaf path of a Spark Connect column.

    Translated filters share subexpressions (a property's value is one object mentioned by many
    operators), so the walk remembers each node's depth instead of expanding the tree.
    """
    depth: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(column._expr, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in depth:
            continue
        children = node.children
        if expanded or not children:
            depth[id(node)] = 1 + max((depth[id(c)] for c in children), default=0)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in depth)
    return depth[id(column._expr)]


def operator_nesting(node: ast.Node) -> int:
    """Operators on the longest root-to-leaf path of a filter's syntax tree.

    Unlike the parser's depth limit, each link of a flat chain (``a + b + c``) counts: the
    translation applies the links one over the other. AND, OR and NOT do not count (they are
    balanced, and bind nothing)."""
    deepest = 0
    stack = [(node, 0)]
    while stack:
        current, above = stack.pop()
        here = above + isinstance(current, _OPERATORS)
        deepest = max(deepest, here)
        stack.extend((child, here) for child in ast.children(current))
    return deepest
