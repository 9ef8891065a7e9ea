"""A fast scanner and LALR(1) driver over the tables lark builds from ``grammar.lark``.

Lark analyses the grammar and owns the parse table and the reduce callbacks (our transformer);
its general-purpose lexer and parser loop cost more than the whole rest of a parse, so this module
runs the same table with one combined regular expression and a tight shift/reduce loop. The
terminal definitions still come from the ``.lark`` file, so there is one grammar.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Any, Callable, Iterable, Iterator, cast

from lark import Lark
from lark.lexer import PatternStr
from lark.parse_tree_builder import ExpandSingleChild


class Tok:
    """A token: terminal name, text and 1-based position."""

    __slots__ = ("column", "line", "type", "value")

    def __init__(self, type_: str, value: str, line: int, column: int):
        self.type, self.value, self.line, self.column = type_, value, line, column

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Tok({self.type}, {self.value!r}, {self.line}:{self.column})"


class UnexpectedChar(Exception):
    """No terminal matches at ``pos`` (converted to a SqlError by the parser)."""

    def __init__(self, pos: int, line: int, column: int):
        super().__init__(pos)
        self.pos, self.line, self.column = pos, line, column


class UnexpectedTok(Exception):
    """The parse table has no action for ``token`` in the current state."""

    def __init__(self, token: Tok, expected: set[str]):
        super().__init__(token.value)
        self.token, self.expected = token, expected


class RuleError(Exception):
    """Raised by a reduce callback; the driver fills in ``token``, the first token of child
    ``child`` of the rule being reduced, so the error can point at it."""

    def __init__(self, message: str, child: int = 0):
        super().__init__(message)
        self.message, self.child = message, child
        self.token: Tok | None = None


class Scanner:
    """Turns text into Tok objects using the terminals of a lark grammar.

    Case-insensitive string terminals that look like identifiers are keywords: the identifier
    terminal matches them and a dictionary re-types the token. ``identifier_check`` runs on every
    remaining identifier (reserved words).
    """

    def __init__(self, lark: Lark, identifier: str, identifier_check: Callable[[Tok], None]):
        ignore = set(lark.lexer_conf.ignore)
        ident_re = re.compile(next(t for t in lark.terminals if t.name == identifier).pattern.to_regexp())
        self.keywords: dict[str, str] = {}
        alternatives = []
        whitespace = []
        for term in lark.terminals:
            pattern = term.pattern
            if term.name in ignore:
                whitespace.append(pattern.to_regexp())
                continue
            if isinstance(pattern, PatternStr) and "i" in pattern.flags and ident_re.fullmatch(pattern.value):
                self.keywords[pattern.value.upper()] = term.name
                continue
            alternatives.append(term)
        alternatives.sort(key=lambda t: (-t.priority, -min(t.pattern.max_width, 1000)))
        body = "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in alternatives)
        skip = "(?>(?:" + "|".join(whitespace) + ")*)"  # atomic: no backtracking into whitespace
        self._regex = re.compile(skip + "(?:" + body + ")")
        self._skip = re.compile(skip)
        self.identifier = identifier
        self.identifier_check = identifier_check

    def scan(self, text: str) -> Iterator[Tok]:
        match = self._regex.match
        keywords = self.keywords
        ident = self.identifier
        check = self.identifier_check
        multiline = "\n" in text
        pos, end = 0, len(text)
        line, line_start = 1, 0
        while pos < end:
            m = match(text, pos)
            if m is None:
                skipped = self._skip.match(text, pos)
                start = skipped.end() if skipped else pos
                if start == end:
                    return
                if multiline:
                    line += text.count("\n", pos, start)
                    line_start = text.rfind("\n", 0, start) + 1
                raise UnexpectedChar(start, line, start - line_start + 1)
            kind = cast(str, m.lastgroup)  # every alternative of the pattern is a named group
            start = m.start(kind)
            if multiline and text.count("\n", pos, start):
                line += text.count("\n", pos, start)
                line_start = text.rfind("\n", 0, start) + 1
            value = m.group(kind)
            if kind == ident and value.isascii():  # the service's ignore-case maps nothing else onto ASCII (names.py)
                keyword = keywords.get(value.upper())
                if keyword is not None:
                    kind = keyword
            tok = Tok(kind, value, line, start - line_start + 1)
            if kind == ident:
                check(tok)
            yield tok
            pos = m.end()
            if multiline and "\n" in value:
                line += value.count("\n")
                line_start = text.rfind("\n", 0, pos) + 1


_SHIFT, _REDUCE, _UNIT = "shift", "reduce", "unit"


class Driver:
    """Runs lark's LALR(1) table for one start symbol with lark's reduce callbacks."""

    def __init__(self, lark: Lark, start: str):
        parse_table = lark.parser.parser.parser.parse_table
        callbacks = lark._callbacks
        self.start_state = parse_table.start_states[start]
        self.end_state = parse_table.end_states[start]
        self.table: dict[int, dict[str, tuple[str, Any]]] = {}
        for state, actions in parse_table.states.items():
            row = {}
            for symbol, (action, arg) in actions.items():
                # Plain str keys: lark's names are Token objects whose __eq__ is slow Python code.
                if action.name == "Shift":
                    row[str(symbol)] = (_SHIFT, arg)
                elif len(arg.expansion) == 1 and isinstance(callbacks[arg], ExpandSingleChild):
                    # `?rule: child` passes the child through: only the state changes.
                    row[str(symbol)] = (_UNIT, str(arg.origin.name))
                else:
                    row[str(symbol)] = (_REDUCE, (len(arg.expansion), str(arg.origin.name), callbacks[arg]))
            self.table[state] = row
        self._units: dict[tuple[int, int, str], int] = {}

    def _unit_chain(self, below: int, origin: str, kind: str) -> int:
        """The state after a run of pass-through reductions under lookahead ``kind``: they only
        replace the top of the state stack, so the result depends on (below, top, kind) alone."""
        table = self.table
        state = table[below][origin][1]
        while True:
            entry = table[state].get(kind)
            if entry is None or entry[0] is not _UNIT or state == self.end_state:
                return state
            state = table[below][entry[1]][1]

    def parse(self, tokens: Iterable[Tok], end_position: tuple[int, int]) -> Any:
        table = self.table
        end_state = self.end_state
        states = [self.start_state]
        values: list[Any] = []
        firsts: list[Tok] = []  # the first token of each value on the stack, for error positions
        end_token = Tok("$END", "", *end_position)
        units = self._units
        for token in chain(tokens, (end_token,)):
            kind = token.type
            while True:
                row = table[states[-1]]
                entry = row.get(kind)
                if entry is None:
                    raise UnexpectedTok(token, {s for s in row if s.isupper()})
                action, arg = entry
                if action is _SHIFT:
                    states.append(arg)
                    values.append(token)
                    firsts.append(token)
                    break
                if action is _UNIT:
                    key = (states[-2], states[-1], kind)
                    state = units.get(key)
                    if state is None:
                        state = units[key] = self._unit_chain(states[-2], arg, kind)
                    if state == end_state and token is end_token:
                        return values[-1]
                    states[-1] = state
                    continue
                size, origin, callback = arg
                if size:
                    children = values[-size:]
                    child_firsts = firsts[-size:]
                    del states[-size:]
                    del values[-size:]
                    del firsts[-size:]
                else:
                    children, child_firsts = [], [token]
                try:
                    value = callback(children)
                except RuleError as exc:
                    exc.token = child_firsts[min(exc.child, len(child_firsts) - 1)]
                    raise
                state = table[states[-1]][origin][1]
                if state == end_state and token is end_token:
                    return value
                states.append(state)
                values.append(value)
                firsts.append(child_firsts[0])
        raise AssertionError("the parse table accepted no input")  # pragma: no cover - $END always decides


def end_position(text: str) -> tuple[int, int]:
    """Line and column just past the end of ``text``."""
    return text.count("\n") + 1, len(text) - (text.rfind("\n") + 1) + 1


__all__ = ["Driver", "RuleError", "Scanner", "Tok", "UnexpectedChar", "UnexpectedTok", "end_position"]
