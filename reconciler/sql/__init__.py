"""The Service Bus SQL language: one grammar and AST, with a canonical printer, a faithful
evaluator, rule actions and routing. No Spark and no I/O here: the Spark translation
(:mod:`reconciler.traffic.spark`) walks the same AST and compiles it to the traffic sample's layout.

Semantics: ``docs/sql-language.md``; vectors: ``tests/data/sql_vectors.yaml``.
"""

from reconciler.sql.actions import CompiledAction
from reconciler.sql.canonical import canonical, canonical_action, canonical_filter, filter_key
from reconciler.sql.errors import SqlError, SqlEvalError
from reconciler.sql.evaluator import CompiledFilter, MessageView, Outcome
from reconciler.sql.parser import parse_action, parse_filter
from reconciler.sql.routing import (
    RouteResult,
    compiled_action,
    compiled_filter,
    correlation_matches,
    matches,
    route_rules,
    run_action,
)

__all__ = [
    "CompiledAction",
    "CompiledFilter",
    "MessageView",
    "Outcome",
    "RouteResult",
    "SqlError",
    "SqlEvalError",
    "canonical",
    "canonical_action",
    "canonical_filter",
    "compiled_action",
    "compiled_filter",
    "correlation_matches",
    "filter_key",
    "matches",
    "parse_action",
    "parse_filter",
    "route_rules",
    "run_action",
]
