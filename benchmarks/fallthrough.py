"""How far a fall-through subscription reaches and what its filter costs; prints JSON.

capacity:   how many other rules of typical shapes fit before the generated filter passes the
            service's 1,024-character limit (a SQL equality on one property, a correlation filter
            on a subject and one string property).
generate:   milliseconds to generate the filter for the largest set that fits.
evaluate:   messages per second through the generated filter with the Python evaluator, against
            the plain (wrong on absent properties) ``NOT (f1 OR f2 ...)`` of the same rules.

    python benchmarks/fallthrough.py [--messages 20000]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Callable

from reconciler.limits import dotnet_length
from reconciler.model import CorrelationFilter, Message, Rule, SqlFilter, TypedValue, ValueType
from reconciler.sql.evaluator import MessageView
from reconciler.sql.fallthrough import NotExpressible, fallthrough_filter
from reconciler.sql.routing import compiled_filter


def sql_rule(i: int) -> Rule:
    return Rule(f"r{i}", SqlFilter(f"region = 'r{i}'"))


def correlation_rule(i: int) -> Rule:
    return Rule(f"c{i}", CorrelationFilter(subject=f"s{i}", properties=(("kind", TypedValue(ValueType.STRING, f"k{i}")),)))


def capacity(make: Callable[[int], Rule]) -> int:
    n = 0
    while True:
        try:
            fallthrough_filter([make(i) for i in range(n + 1)])
        except NotExpressible:
            return n
        n += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000)
    args = parser.parse_args()
    sql_n, corr_n = capacity(sql_rule), capacity(correlation_rule)
    rules = [sql_rule(i) for i in range(sql_n)]
    start = time.perf_counter()
    text = fallthrough_filter(rules)
    generate_ms = (time.perf_counter() - start) * 1000
    plain = "NOT (" + " OR ".join(r.filter.expression for r in rules if isinstance(r.filter, SqlFilter)) + ")"
    views = [
        MessageView.from_message(Message.from_json({"user": {"region": f"r{i % (2 * sql_n)}"} if i % 3 else {}}))
        for i in range(args.messages)
    ]
    rates = {}
    for name, filter_text in (("generated", text), ("plain_not", plain)):
        compiled = compiled_filter(filter_text)
        start = time.perf_counter()
        for view in views:
            compiled(view)
        rates[name] = round(len(views) / (time.perf_counter() - start))
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "capacity": {"sql_equality_rules": sql_n, "correlation_subject_and_property_rules": corr_n},
                "generate_ms": round(generate_ms, 2),
                "generated_length": dotnet_length(text),
                "evaluate_messages_per_second": rates,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
