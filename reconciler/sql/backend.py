"""The contract every back end of the SQL AST keeps: one handler per node class, from one table.

The canonical printer, the evaluator, the static prover, the fall-through generator and the Spark
translator each walk the same tree (:mod:`reconciler.sql.ast`). Each builds one :class:`Backend`:
a table from every node class to its handler, or to an explicit :class:`Unsupported` that says what
the back end does instead. A table that misses a class, or names a class the AST does not have,
fails when its module is imported, so a node added to the grammar cannot be forgotten by a back
end until some filter happens to use it (sqlglot's generators keep their ``TRANSFORMS`` the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

from reconciler.sql import ast

R = TypeVar("R")

#: Every node class of the AST, in grammar order.
NODE_TYPES: tuple[type, ...] = tuple(ast.CHILD_FIELDS)


@dataclass(frozen=True)
class Unsupported:
    """A node class a back end does not express by itself, and why (or what handles it instead)."""

    reason: str


class Backend(dict[type, Callable[..., R]]):
    """One back end's handler per node class. ``backend[type(node)](node, *args)`` is the dispatch
    (a dict lookup, so a recursive walk costs one frame per level, as an ``isinstance`` chain did);
    ``backend(node, *args)`` is the same for entry points. An :class:`Unsupported` entry becomes a
    handler that raises TypeError with its reason."""

    def __init__(self, name: str, table: Mapping[type, Callable[..., R] | Unsupported]) -> None:
        missing = [cls.__name__ for cls in NODE_TYPES if cls not in table]
        unknown = [getattr(cls, "__name__", repr(cls)) for cls in table if cls not in NODE_TYPES]
        if missing or unknown:
            raise TypeError(f"the {name} has no entry for {missing} and entries for non-nodes {unknown}")
        super().__init__(
            (cls, _refusal(name, cls, entry) if isinstance(entry, Unsupported) else entry) for cls, entry in table.items()
        )
        self.name = name
        self.unsupported = {cls: entry for cls, entry in table.items() if isinstance(entry, Unsupported)}
        BACKENDS[name] = self

    def __call__(self, node: Any, *args: Any) -> R:
        return self[node.__class__](node, *args)

    def __repr__(self) -> str:
        return f"<Backend {self.name}: {len(NODE_TYPES) - len(self.unsupported)} of {len(NODE_TYPES)} node classes>"


def _refusal(name: str, cls: type, entry: Unsupported) -> Callable[..., Any]:
    def refuse(node: Any, *args: Any) -> Any:
        raise TypeError(f"the {name} does not express {cls.__name__} nodes: {entry.reason}")

    return refuse


#: Every back end built so far, by name (the contract test imports them all and reads this).
BACKENDS: dict[str, Backend[Any]] = {}
