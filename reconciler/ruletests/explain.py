"""Why a rule decided what it did for one message: the sub-expression that was TRUE, FALSE or
UNKNOWN (or failed), and what the message held for the properties it reads.

Walks the filter as the evaluator runs it: an AND is decided by its first FALSE operand (else its
first UNKNOWN, else all are TRUE), an OR by its first TRUE operand (else its first UNKNOWN, else
all are FALSE), and the walk descends into that operand until it reaches a comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.model import CORRELATION_SYS_NAMES, CorrelationFilter, FalseFilter, Message, Rule, SqlFilter, TrueFilter
from reconciler.names import name_key
from reconciler.sql import ast, canonical, compiled_filter
from reconciler.sql.errors import SqlError, SqlEvalError
from reconciler.sql.evaluator import MessageView, compile_predicate
from reconciler.sql.routing import correlation_matches
from reconciler.sql.values import MISSING

LABELS = {True: "TRUE", False: "FALSE", None: "UNKNOWN"}


@dataclass(frozen=True)
class Decision:
    """The part of a filter that decided its result on one message."""

    expression: str
    result: str  # TRUE / FALSE / UNKNOWN / ERROR
    reason: str

    def __str__(self) -> str:
        return f"`{self.expression}` was {self.result}" + (f": {self.reason}" if self.reason else "")


def decide(rule: Rule, message: Message, view: MessageView | None = None) -> Decision:
    """The deciding part of ``rule``'s filter on ``message``."""
    view = view or MessageView.from_message(message)
    flt = rule.filter
    if isinstance(flt, SqlFilter):
        try:
            node = compiled_filter(flt.expression).node
        except SqlError as exc:
            return Decision(flt.expression, "ERROR", f"invalid filter: {exc}")
        return _sql(node, view)
    if isinstance(flt, CorrelationFilter):
        return _correlation(flt, message)
    if isinstance(flt, TrueFilter):
        return Decision("true filter", "TRUE", "")
    if isinstance(flt, FalseFilter):
        return Decision("false filter", "FALSE", "")
    raise TypeError(f"not a filter: {flt!r}")


def _run(node: ast.Predicate, view: MessageView) -> tuple[str, str]:
    try:
        return LABELS[compile_predicate(node)(view)], ""
    except SqlEvalError as exc:
        return "ERROR", str(exc)


def _sql(node: ast.Predicate, view: MessageView) -> Decision:
    result, error = _run(node, view)
    if isinstance(node, ast.And | ast.Or):
        operands = ast.conjuncts(node) if isinstance(node, ast.And) else ast.disjuncts(node)
        short = "FALSE" if isinstance(node, ast.And) else "TRUE"
        for wanted in (short, "ERROR", "UNKNOWN") if result != "ERROR" else ("ERROR",):
            for operand in operands:
                if _run(operand, view)[0] == wanted:
                    return _sql(operand, view)
        return Decision(canonical(node), result, "every operand was " + result)
    return Decision(canonical(node), result, error or _values(node, view))


def _values(node: ast.Node, view: MessageView) -> str:
    """What the message holds for each property ``node`` reads: ``amount`` absent, ``currency`` = 'USD'."""
    shown: list[str] = []
    stack: list[ast.Node] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Property):
            text = canonical(current)
            value = view.sys.get(current.name) if current.scope == "sys" else view.user.get(name_key(current.name), MISSING)
            described = "absent" if value is MISSING or (current.scope == "sys" and value is None) else f"= {value!r}"
            entry = f"`{text}` {described}"
            if entry not in shown:
                shown.append(entry)
        stack.extend(reversed(ast.children(current)))
    return ", ".join(shown)


def _correlation(flt: CorrelationFilter, message: Message) -> Decision:
    matched = correlation_matches(flt, message)
    if matched:
        return Decision("correlation", "TRUE", "every field matched")
    if flt.is_empty():
        return Decision("correlation", "FALSE", "it has no fields")
    for field_name, expected in flt.system_fields().items():
        actual = message.sys.get(CORRELATION_SYS_NAMES[field_name])
        if actual is None or actual.value != expected:
            held = "none" if actual is None else repr(actual.value)
            return Decision(f"correlation {field_name} = {expected!r}", "FALSE", f"the message has {held}")
    for name, value in flt.properties:
        single = CorrelationFilter(properties=((name, value),))
        if not correlation_matches(single, message):
            actual_value = message.user_property(name)
            held = "no such property" if actual_value is None else actual_value.describe()
            return Decision(f"correlation property {name} = {value.describe()}", "FALSE", f"the message has {held}")
    return Decision("correlation", "FALSE", "")
