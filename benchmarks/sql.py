"""Benchmark the SQL language: parse rate, compiled evaluation rate, and a naive tree-walking
interpreter of the same AST as the baseline. Prints one JSON document.

Run: .venv/bin/python benchmarks/sql.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import uuid
from typing import Any, Callable

from reconciler.model import Message
from reconciler.sql import arithmetic, ast, canonical, like, values
from reconciler.sql.errors import SqlEvalError
from reconciler.sql.evaluator import CompiledFilter, MessageView, literal_value
from reconciler.sql.parser import parse_filter, parse_filter_uncached
from reconciler.sql.values import MISSING

#: Typical filters: 3 to 6 predicates, the shapes real rule files use.
FILTERS = [
    "color = 'blue' AND quantity > 10 AND sys.Label LIKE 'order%'",
    "sys.To IN ('Store5', 'Store6', 'Store7') OR StoreId = 'Store8' OR region = 'eu'",
    "region = 'eu' AND (priority >= 3 OR vip = TRUE) AND NOT EXISTS(test)",
    "amount * 2 > 1000 AND currency <> 'USD' AND sys.ContentType = 'application/json' AND customer IS NOT NULL",
    "tenant = 'contoso' AND env IN ('prod', 'staging') AND severity >= 2 AND source NOT LIKE 'test%' AND retries < 5",
    "sys.Label = 'invoice' AND amount >= 100.5 AND amount < 10000 AND country = 'DE' AND channel <> 'fax' AND paid = FALSE",
]

MESSAGES = [
    Message.from_json(
        {
            "sys": {"Label": "order-17", "To": "Store6", "ContentType": "application/json", "MessageId": "m1"},
            "user": {"color": "blue", "quantity": 12, "region": "eu", "priority": 1, "vip": True, "amount": 750,
                     "currency": "EUR", "customer": "c-1", "tenant": "contoso", "env": "prod", "severity": 3,
                     "source": "web", "retries": 0, "country": "DE", "channel": "mail", "paid": False},
        }
    ),
    Message.from_json(
        {
            "sys": {"Label": "invoice", "To": "Store9", "MessageId": "m2"},
            "user": {"color": "red", "quantity": 3, "region": "us", "priority": 5, "amount": 150.0, "currency": "USD",
                     "tenant": "fabrikam", "env": "dev", "severity": 1, "source": "test-suite", "retries": 7,
                     "country": "DE", "channel": "web", "paid": False, "test": 1},
        }
    ),
    Message.from_json({"sys": {"Label": "ping"}, "user": {"StoreId": "Store8"}}),
]


# ---------------------------------------------------------------------------------------------
# Baseline: a naive tree-walking interpreter of the same AST (same semantics, no compilation)
# ---------------------------------------------------------------------------------------------


def naive_value(node: ast.Expr, view: MessageView) -> Any:
    if isinstance(node, ast.Literal):
        return literal_value(node)
    if isinstance(node, ast.Property):
        if node.scope == "sys":
            return view.sys.get(node.name)
        return view.user.get(node.name.lower(), MISSING)
    if isinstance(node, ast.Binary):
        a, b = naive_value(node.left, view), naive_value(node.right, view)
        if a is MISSING or b is MISSING:
            return MISSING
        return arithmetic.ARITHMETIC[node.op](a, b)
    if isinstance(node, ast.Unary):
        a = naive_value(node.operand, view)
        return MISSING if a is MISSING else arithmetic.negate(a)
    if isinstance(node, ast.Function):
        if node.name == "newid":
            return uuid.uuid4()
        name = naive_value(node.args[0], view)
        if not isinstance(name, str):
            raise SqlEvalError("property() needs a string name")
        return view.user.get(name.lower(), MISSING)
    raise TypeError(node)


def naive_predicate(node: ast.Predicate, view: MessageView) -> bool | None:
    if isinstance(node, ast.And):
        a = naive_predicate(node.left, view)
        if a is False:
            return False
        b = naive_predicate(node.right, view)
        return b if a is True or b is False else None
    if isinstance(node, ast.Or):
        a = naive_predicate(node.left, view)
        if a is True:
            return True
        b = naive_predicate(node.right, view)
        return b if a is False or b is True else None
    if isinstance(node, ast.Not):
        r = naive_predicate(node.operand, view)
        return None if r is None else not r
    if isinstance(node, ast.Comparison):
        a, b = naive_value(node.left, view), naive_value(node.right, view)
        if a is MISSING or b is MISSING:
            return None
        return values.compare(node.op, a, b)
    if isinstance(node, ast.Like):
        v, p = naive_value(node.value, view), naive_value(node.pattern, view)
        e = naive_value(node.escape, view) if node.escape is not None else None
        if MISSING in (v, p, e):
            return None
        r = like.like(v, p, e)
        return not r if node.negated else r
    if isinstance(node, ast.In):
        v = naive_value(node.value, view)
        items = [naive_value(i, view) for i in node.items]
        if v is MISSING:
            return None
        r = False
        for item in items:
            if item is MISSING:
                raise SqlEvalError("IN with a missing item")
            if values.equals(v, item):
                r = True
                break
        return not r if node.negated else r
    if isinstance(node, ast.IsNull):
        if node.prop.scope == "sys":
            r = view.sys.get(node.prop.name) is None
        else:
            r = view.user.get(node.prop.name.lower()) is None
        return not r if node.negated else r
    if isinstance(node, ast.Exists):
        return node.prop.scope == "sys" or node.prop.name.lower() in view.user
    raise TypeError(node)


# ---------------------------------------------------------------------------------------------


def rate(fn: Callable[[], int], seconds: float) -> float:
    """Operations per CPU second of this process: call ``fn`` (returning how many operations it did)
    for ``seconds`` of CPU time. CPU time, not wall time, because the machine is shared: it measures
    what one core does while this process runs on it."""
    fn()  # warm up
    count, start = 0, time.process_time()
    while (elapsed := time.process_time() - start) < seconds:
        count += fn()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="CPU seconds per figure")
    args = parser.parse_args()

    trees = [parse_filter(text) for text in FILTERS]
    compiled = [CompiledFilter(tree) for tree in trees]
    views = [MessageView.from_message(m) for m in MESSAGES]
    pairs = [(c, t, v) for c, t in zip(compiled, trees) for v in views]
    for fn, tree, view in pairs:  # the baseline must agree with the compiled evaluator
        assert fn(view) == naive_predicate(tree, view), f"compiled and naive differ for {canonical(tree)}"

    def parse_batch() -> int:
        for text in FILTERS:
            parse_filter_uncached(text)
        return len(FILTERS)

    def cached_parse_batch() -> int:
        for text in FILTERS:
            parse_filter(text)
        return len(FILTERS)

    def compiled_batch() -> int:
        for _ in range(50):
            for fn, _tree, view in pairs:
                fn(view)
        return 50 * len(pairs)

    def naive_batch() -> int:
        for _ in range(50):
            for _fn, tree, view in pairs:
                naive_predicate(tree, view)
        return 50 * len(pairs)

    def with_view_batch() -> int:
        for message in MESSAGES:
            view = MessageView.from_message(message)
            for fn in compiled:
                fn(view)
        return len(MESSAGES) * len(compiled)

    parse_rate = rate(parse_batch, args.seconds)
    compiled_rate = rate(compiled_batch, args.seconds)
    naive_rate = rate(naive_batch, args.seconds)
    report = {
        "python": platform.python_version(),
        "timing": "process CPU time, one thread",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "filters": len(FILTERS),
        "messages": len(MESSAGES),
        "parse_filters_per_s": round(parse_rate),
        "parse_filters_per_s_cached": round(rate(cached_parse_batch, args.seconds)),
        "parse_target_per_s": 5000,
        "compiled_evaluations_per_s": round(compiled_rate),
        "compiled_evaluations_per_s_including_message_view": round(rate(with_view_batch, args.seconds)),
        "evaluation_target_per_s": 300000,
        "naive_tree_walk_evaluations_per_s": round(naive_rate),
        "compiled_vs_naive_ratio": round(compiled_rate / naive_rate, 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
