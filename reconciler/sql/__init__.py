"""The Service Bus SQL language: one grammar and AST, with a canonical printer, a faithful
evaluator, rule actions and routing. No Spark and no I/O here: the Spark translation
(:mod:`reconciler.traffic.spark`) walks the same AST and compiles it to the traffic sample's layout.

Semantics: ``docs/sql-language.md``; vectors: ``tests/data/sql_vectors.yaml``.

The names below are imported when first used: a command that only needs the value semantics
(``reconciler.sql.values``, as the traffic sampler does) does not load the grammar and parser,
about a tenth of a second of its start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Each public name → the module that defines it.
_HOMES = {
    "CompiledAction": "actions",
    **dict.fromkeys(("canonical", "canonical_action", "canonical_filter", "filter_key"), "canonical"),
    **dict.fromkeys(("SqlError", "SqlEvalError"), "errors"),
    **dict.fromkeys(("CompiledFilter", "MessageView", "Outcome"), "evaluator"),
    **dict.fromkeys(("parse_action", "parse_filter"), "parser"),
    **dict.fromkeys(
        ("RouteResult", "compiled_action", "compiled_filter", "correlation_matches", "matches", "route_rules",
         "run_action"),
        "routing",
    ),
}

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
assert set(__all__) == set(_HOMES), "every public name has a home"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
