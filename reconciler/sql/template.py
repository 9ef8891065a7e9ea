"""``${name}`` references in SQL text, replaced by typed values without changing the expression's shape.

A value is never spliced into SQL as raw text. The text is scanned with the grammar's own
definitions of the three delimited tokens (string literals, ``[names]`` and ``"names"``), so each
reference is known to stand either between tokens or inside one of them:

* between tokens, it becomes exactly one literal token (printed as the canonical printer prints
  literals: a string quoted with ``''`` escapes, a number, ``TRUE``/``FALSE``, ``NULL``), padded
  with spaces so it cannot fuse with a neighbour, and a negative number is parenthesised;
* inside a string literal or a delimited name, its text is escaped for that delimiter, so the
  token still ends where it ended.

``x' OR 1=1 --`` therefore arrives as the string literal ``'x'' OR 1=1 --'``.
``$${`` stands for a literal ``${``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from reconciler.model import TypedValue, ValueType
from reconciler.sql.ast import Literal
from reconciler.sql.canonical import literal_text
from reconciler.sql.parser import terminal_pattern

#: A variable name: a letter or ``_``, then letters, digits, ``_`` or ``-``.
NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
#: ``$${`` (an escaped ``${``), a reference ``${name}``, or a ``${`` that is not one.
REFERENCE = re.compile(r"\$\$\{|\$\{(?P<name>" + NAME + r")\}|\$\{")

_DELIMITED = {
    "'": terminal_pattern("STRING"),
    "[": terminal_pattern("BRACKET_ID"),
    '"': terminal_pattern("QUOTED_ID"),
}
_TOKEN_OR_REFERENCE = re.compile(
    "|".join(f"(?P<{name}>{pattern})" for name, pattern in zip(("string", "bracket", "quoted"), _DELIMITED.values()))
    + "|(?P<ref>" + REFERENCE.pattern + ")"
)
#: Characters that a literal token must not touch: they would fuse with it into another token.
_FUSES = re.compile(r"[\w'\"\[\].@$]")


@dataclass(frozen=True)
class Problem:
    """A reference that cannot be substituted: its offset in the text, and why."""

    offset: int
    length: int
    message: str
    name: str | None = None


@dataclass(frozen=True)
class Substituted:
    text: str
    used: frozenset[str]
    problems: tuple[Problem, ...]


Lookup = Callable[[str], TypedValue | None]


def value_text(value: TypedValue) -> str | None:
    """The text of a string or number inside other text (a name, a string literal); None otherwise."""
    if value.type is ValueType.STRING:
        return str(value.value)
    if value.type in (ValueType.LONG, ValueType.INT):
        return str(value.value)
    if value.type is ValueType.DOUBLE:
        return repr(value.value)
    return None


def substitute_text(text: str, lookup: Lookup, escape: Callable[[str], str] = lambda s: s) -> Substituted:
    """Replace references in plain text (a name, or the inside of a delimited token) by their text."""
    used: set[str] = set()
    problems: list[Problem] = []

    def replace(match: re.Match[str]) -> str:
        return _inside(match, 0, lookup, escape, used, problems)

    return Substituted(REFERENCE.sub(replace, text), frozenset(used), tuple(problems))


def substitute_sql(text: str, lookup: Lookup) -> Substituted:
    """Replace references in a SQL filter or action: between tokens by one literal token each,
    inside string literals and delimited names by escaped text."""
    if "$" not in text:
        return Substituted(text, frozenset(), ())
    used: set[str] = set()
    problems: list[Problem] = []
    out: list[str] = []
    pos = 0
    for match in _TOKEN_OR_REFERENCE.finditer(text):
        out.append(text[pos : match.start()])
        pos = match.end()
        kind = match.lastgroup
        if kind == "ref":
            out.append(_between(match, text, lookup, used, problems))
            continue
        token = match.group()
        if "${" not in token:
            out.append(token)
            continue
        quote, close = token[0], token[-1]
        body = token[1:-1]
        def replace(
            inner: re.Match[str], start: int = match.start() + 1, escape: Callable[[str], str] = _escaper(close)
        ) -> str:
            return _inside(inner, start, lookup, escape, used, problems)

        out.append(quote + REFERENCE.sub(replace, body) + close)
    out.append(text[pos:])
    return Substituted("".join(out), frozenset(used), tuple(problems))


def _escaper(close: str) -> Callable[[str], str]:
    return lambda s: s.replace(close, close + close)


def _inside(
    match: re.Match[str], base: int, lookup: Lookup, escape: Callable[[str], str], used: set[str], problems: list[Problem]
) -> str:
    found = _resolve(match, base, lookup, used, problems)
    if found is None:
        return match.group() if match.group() != "$${" else "${"
    text = value_text(found)
    if text is None:
        problems.append(
            Problem(base + match.start(), len(match.group()),
                    f"variable {match['name']!r} is a {found.type.value}: only a string or a number can stand inside text",
                    match["name"])
        )
        return match.group()
    return escape(text)


def _between(match: re.Match[str], text: str, lookup: Lookup, used: set[str], problems: list[Problem]) -> str:
    found = _resolve(match, 0, lookup, used, problems)
    if found is None:
        return "${" if match.group() == "$${" else match.group()
    try:
        literal = literal_text(Literal(found.type, found.value))
    except ValueError:
        problems.append(
            Problem(match.start(), len(match.group()),
                    f"variable {match['name']!r} is a {found.type.value}, which SQL has no literal for: "
                    "give it as a string, or use it in a correlation filter", match["name"])
        )
        return match.group()
    if literal.startswith("-"):
        literal = f"({literal})"
    before = text[match.start() - 1] if match.start() else " "
    after = text[match.end()] if match.end() < len(text) else " "
    return (" " if _FUSES.match(before) else "") + literal + (" " if _FUSES.match(after) else "")


def _resolve(match: re.Match[str], base: int, lookup: Lookup, used: set[str], problems: list[Problem]) -> TypedValue | None:
    """The value of a reference; None (and a problem, unless it is ``$${``) when there is none."""
    whole = match.group()
    if whole == "$${":
        return None
    name = match["name"]
    if name is None:
        message = "'${' starts no variable reference: write ${name}, or $${ for a literal '${'"
        problems.append(Problem(base + match.start(), 2, message))
        return None
    used.add(name)
    value = lookup(name)
    if value is None:
        problems.append(Problem(base + match.start(), len(whole), f"undefined variable {name!r}", name))
    return value
