"""Parse Service Bus SQL filters and rule actions into the AST, rejecting what the broker rejects.

The grammar lives in ``grammar.lark``: lark builds the LALR(1) table once, ``lalr`` runs it with a
fast scanner, and the reduce callbacks below build AST nodes directly (no parse tree). Every
rejection the broker makes at rule creation is a :class:`SqlError` with a message, 1-based
line/column and the offending token: lexical and syntax errors, reserved words, unknown ``sys.``
names, bad scopes, unknown functions or arity, literal overflow, over-long text, ``IS NULL`` on a
non-property, a value used as a predicate, more than 32 action statements, unsupplied
``@parameters`` and ``SET`` of a read-only system property.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import unicodedata
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

import lark
from lark import Lark, Transformer

from reconciler import limits
from reconciler.model import (
    INT64_MAX,
    INT64_MIN,
    SETTABLE_SYSTEM_PROPERTIES,
    TypedValue,
    ValueType,
    system_property_name,
)
from reconciler.names import name_key, same_name
from reconciler.sql import ast
from reconciler.sql.errors import SqlError
from reconciler.sql.lalr import Driver, RuleError, Scanner, Tok, UnexpectedChar, UnexpectedTok, end_position

#: Deeper nesting is rejected (the reference engine already rejects LINQ trees deeper than 32).
#: Nesting is what parentheses, NOT, unary minus, functions and operators of different precedence
#: build; the left operand of a chain (``1 + 1 + 1``, ``a = 1 OR b = 2 OR …``) continues it at
#: the same depth, so a flat chain that fills the 1,024 characters is accepted.
MAX_DEPTH = 256

RESERVED_WORDS = frozenset(
    "BEGIN END BREAK CONTINUE GOTO IF ELSE WHILE TRY CATCH AS BETWEEN COALESCE CONVERT DECLARE NULLIF".split()
)
_RESERVED_KEYS = frozenset(map(name_key, RESERVED_WORDS))
#: Microsoft's regular identifier: ``[[:IsLetter:]][_[:IsLetter:][:IsDigit:]]*``, .NET's IsLetter being
#: the categories below and IsDigit Nd. Python's ``\w`` also takes Nl and No ('²', 'Ⅻ'); the lexer's
#: pattern does, so ``_check_identifier`` narrows it.
_LETTERS = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo"})
_FUNCTION_ARITY = {"newid": ("newid", 0), "property": ("property", 1), "p": ("property", 1)}
_OVERFLOW_VALUE = INT64_MAX + 1  # only legal directly after a unary minus
_OVERFLOW_TEXT = str(_OVERFLOW_VALUE)

_TERMINAL_NAMES = {
    "IDENT": "a name",
    "BRACKET_ID": "a [delimited] name",
    "QUOTED_ID": 'a "delimited" name',
    "STRING": "a string",
    "INTEGER": "a number",
    "DOUBLE": "a number",
    "PARAM": "a @parameter",
    "EQ": "'='",
    "NEQ": "'<>'",
    "LE": "'<='",
    "GE": "'>='",
    "LT": "'<'",
    "GT": "'>'",
    "PLUS": "'+'",
    "MINUS": "'-'",
    "STAR": "'*'",
    "SLASH": "'/'",
    "PERCENT": "'%'",
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "DOT": "'.'",
    "SEMI": "';'",
    "$END": "end of text",
}


class _ParamRef:
    """Placeholder for ``@name`` until parameters are substituted (never escapes the parser)."""

    __slots__ = ("column", "line", "name", "text")

    def __init__(self, token: Tok):
        self.text = token.value
        self.name = name_key(self.text[1:])
        self.line, self.column = token.line, token.column


def _error_at(message: str, token: Tok) -> SqlError:
    return SqlError(message, token.line, token.column, token.value)


def identifier_problem(text: str) -> str | None:
    """Why ``text`` is not a regular identifier for the service, or None when it is one."""
    for index, char in enumerate(text):
        category = unicodedata.category(char)
        if category in _LETTERS or (index and (category == "Nd" or char == "_")):
            continue
        what = "start with a letter" if index == 0 else "continue with letters, decimal digits and _"
        return f"{char!r} (U+{ord(char):04X}) is not allowed there: a name must {what}"
    return None


def _check_identifier(token: Tok) -> None:
    """Scanner callback: a regular identifier is Microsoft's, and not a reserved T-SQL word."""
    value = token.value
    problem = identifier_problem(value)
    if problem is not None:
        raise _error_at(f"'{value}' is not a regular identifier: {problem}; write [{value}] to use it as is", token)
    if name_key(value) in _RESERVED_KEYS:
        raise _error_at(f"'{value}' is a reserved word; write [{value}] to use it as a property name", token)


def _unquote(token: Tok) -> str:
    text = token.value
    if token.type == "BRACKET_ID":
        return text[1:-1].replace("]]", "]")
    if token.type == "QUOTED_ID":
        return text[1:-1].replace('""', '"')
    return text


def _is_overflow(node: Any) -> bool:
    return node.__class__ is ast.Literal and node.type is ValueType.LONG and node.value == _OVERFLOW_VALUE


class _Builder(Transformer):
    """Inline transformer: builds AST nodes as the LALR parser reduces (stateless, thread-safe)."""

    # ---- top level -----------------------------------------------------------------------------
    def filter(self, c):
        return c[0]

    def action(self, c):
        return ast.Action(tuple(c))

    def statement(self, c):
        return c[0]

    def set_stmt(self, c):
        prop = c[1]
        if prop.scope == "sys" and prop.name not in SETTABLE_SYSTEM_PROPERTIES:
            raise RuleError(f"sys.{prop.name} is read-only and cannot be SET", child=1)
        return ast.Set(prop, c[3])

    def remove_stmt(self, c):
        return ast.Remove(c[1])

    # ---- predicates ----------------------------------------------------------------------------
    def or_(self, c):
        return ast.Or(c[0], c[2])

    def and_(self, c):
        return ast.And(c[0], c[2])

    def not_(self, c):
        return ast.Not(c[1])

    def paren_pred(self, c):
        return c[1]

    def exists(self, c):
        return ast.Exists(c[2])

    def is_null(self, c):
        return ast.IsNull(c[0])

    def is_not_null(self, c):
        return ast.IsNull(c[0], True)

    def bad_is_null(self, c):
        raise _error_at("IS [NOT] NULL applies only to a bare property (x, user.x, sys.X or [x])", c[1])

    def bare_value(self, c):
        raise RuleError(
            "a value is not a condition: compare it (for example flag = TRUE); the always-true filter is 1=1"
        )

    def comp_op(self, c):
        return c[0]

    def comparison(self, c):
        op = c[1]
        return ast.Comparison("<>" if op.type == "NEQ" else op.value, c[0], c[2])

    def like(self, c):
        negated = c[1].__class__ is Tok and c[1].type == "NOT"
        rest = c[2:] if negated else c[1:]
        escape = rest[3] if len(rest) > 2 else None
        return ast.Like(c[0], rest[1], escape, negated)

    def in_(self, c):
        negated = c[1].__class__ is Tok and c[1].type == "NOT"
        items = c[4] if negated else c[3]
        return ast.In(c[0], items, negated)

    # ---- expressions ---------------------------------------------------------------------------
    def binary(self, c):
        return ast.Binary(c[1].value, c[0], c[2])

    def neg(self, c):
        operand = c[1]
        if operand.__class__ is ast.Literal and operand.parameter is None:
            if operand.type is ValueType.LONG and operand.value != INT64_MIN:
                return ast.Literal(ValueType.LONG, -operand.value)
            if operand.type is ValueType.DOUBLE:
                return ast.Literal(ValueType.DOUBLE, -operand.value)
        return ast.Unary("-", operand)

    def pos(self, c):
        return c[1]

    def param(self, c):
        return _ParamRef(c[0])

    def call(self, c):
        name_token = c[0]
        args = c[2] if len(c) == 4 else ()
        known = _FUNCTION_ARITY.get(name_key(name_token.value))
        if known is None:
            raise _error_at(
                f"unknown function {name_token.value}(); the only functions are newid(), property() and p()",
                name_token,
            )
        name, arity = known
        if len(args) != arity:
            raise _error_at(
                f"{name_token.value}() takes {arity} argument{'s' if arity != 1 else ''}, got {len(args)}",
                name_token,
            )
        return ast.Function(name, tuple(args))

    def paren_expr(self, c):
        if _is_overflow(c[1]):
            raise _error_at(f"integer literal {_OVERFLOW_TEXT} is out of range for Int64", c[0])
        return c[1]

    def expr_list(self, c):
        return tuple(c[0::2])

    def integer(self, c):
        value = int(c[0].value)
        if value > _OVERFLOW_VALUE:
            raise _error_at(f"integer literal {c[0].value} is out of range for Int64", c[0])
        return ast.Literal(ValueType.LONG, value)

    def double(self, c):
        value = float(c[0].value)
        if value == float("inf"):
            raise _error_at(f"number {c[0].value} is out of range for Double", c[0])
        return ast.Literal(ValueType.DOUBLE, value)

    def string(self, c):
        return ast.Literal(ValueType.STRING, c[0].value[1:-1].replace("''", "'"))

    def true(self, c):
        return ast.Literal(ValueType.BOOL, True)

    def false(self, c):
        return ast.Literal(ValueType.BOOL, False)

    def null(self, c):
        return ast.Literal(ValueType.NULL, None)

    def property(self, c):
        if len(c) == 1:
            return ast.Property("user", _unquote(c[0]))
        scope_token, name_token = c[0], c[2]
        scope = name_key(_unquote(scope_token))
        name = _unquote(name_token)
        if scope == "user":
            return ast.Property("user", name)
        if scope != "sys":
            raise _error_at(
                f"unknown scope '{_unquote(scope_token)}': a property is x, user.x or sys.X", scope_token
            )
        canonical = system_property_name(name)
        if canonical is None or same_name(name, "subject"):
            hint = " (the filter language calls it sys.Label)" if same_name(name, "subject") else ""
            raise _error_at(f"unknown system property sys.{name}{hint}", name_token)
        return ast.Property("sys", canonical)


_GRAMMAR = resources.files("reconciler.sql").joinpath("grammar.lark").read_text(encoding="utf-8")


def _table_cache() -> str | bool:
    """Where lark keeps the grammar's LALR tables between runs: building them is 130–190 ms of
    every command's start-up, loading them 12 ms. A file of this user's own cache directory, not
    lark's default in the shared temp directory (the cache is a pickle; lark checks it against the
    grammar's hash); nothing is cached when ``SBRULES_NO_CACHE`` is set or there is no home."""
    if os.environ.get("SBRULES_NO_CACHE"):
        return False
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sbrules"
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
    except (OSError, RuntimeError):
        return False
    return str(base / f"sql-grammar-lark{lark.__version__}-py{sys.version_info[0]}{sys.version_info[1]}.pickle")


_LARK = Lark(
    _GRAMMAR,
    parser="lalr",
    lexer="basic",
    start=["filter", "action"],
    transformer=_Builder(),
    maybe_placeholders=False,
    cache=_table_cache(),
)
_SCANNER = Scanner(_LARK, "IDENT", _check_identifier)
#: Keywords (from the grammar): case-insensitive, usable as names only when delimited.
KEYWORDS = frozenset(_SCANNER.keywords)
_DRIVERS = {start: Driver(_LARK, start) for start in ("filter", "action")}


def terminal_pattern(name: str) -> str:
    """The regular expression of one of the grammar's terminals (e.g. ``STRING``)."""
    return next(t.pattern.to_regexp() for t in _LARK.terminals if t.name == name)


def _describe_token(token: Tok) -> str:
    if token.type == "$END":
        return "end of text"
    if token.type in KEYWORDS:
        return f"keyword {token.value.upper()}"
    return repr(token.value)


def _expected(names: set[str]) -> str:
    words = sorted({_TERMINAL_NAMES.get(n, n) for n in names})
    if len(words) > 6:
        return ""
    return "; expected " + ", ".join(words)


def _convert_scan_error(exc: UnexpectedChar, text: str) -> SqlError:
    char = text[exc.pos]
    if char == "'":
        message = "unterminated string literal (a quote inside a string is written '')"
    elif char == "[":
        message = "unterminated [delimited identifier] (a ] inside is written ]])"
    elif char == '"':
        message = 'unterminated "delimited identifier" (a " inside is written "")'
    elif char == "@":
        message = "a @parameter name starts with a letter"
    elif char == "_":
        message = "a name cannot start with '_'; write [_name] to use such a property"
    elif char.isspace() or not char.isprintable():
        message = f"character U+{ord(char):04X} is not allowed; only space, tab and line breaks separate tokens"
    else:
        message = f"unexpected character {char!r}"
    return SqlError(message, exc.line, exc.column, char)


def _convert_parse_error(exc: UnexpectedTok) -> SqlError:
    token = exc.token
    message = f"unexpected {_describe_token(token)}{_expected(exc.expected)}"
    if token.type in KEYWORDS and ({"IDENT", "BRACKET_ID"} & exc.expected):
        message += f" ('{token.value}' is a keyword; write [{token.value}] to use it as a property name)"
    return SqlError(message, token.line, token.column, token.value or None)


def _check_length(text: str, what: str) -> None:
    if not text.strip(" \t\n\r\x0b"):
        raise SqlError(f"empty {what}", 1, 1, None)
    too_long = limits.sql_text_problem(text, what)
    if too_long:
        limit = limits.SQL_TEXT.value
        line = text.count("\n", 0, limit) + 1
        column = limit - (text.rfind("\n", 0, limit) + 1) + 1
        raise SqlError(too_long, line, column, None)


def _parse(text: str, start: str, parameters: Mapping[str, TypedValue] | None) -> Any:
    if not isinstance(text, str):
        raise SqlError(f"expected text, got {type(text).__name__}")
    what = "filter" if start == "filter" else "action"
    _check_length(text, what)
    try:
        node = _DRIVERS[start].parse(_SCANNER.scan(text), end_position(text))
    except RuleError as exc:
        token = exc.token
        if token is None:  # the driver always fills it in; an error at the start otherwise
            raise _dash_hint(SqlError(exc.message), text) from None
        raise _dash_hint(SqlError(exc.message, token.line, token.column, token.value or None), text) from None
    except UnexpectedChar as exc:
        raise _dash_hint(_convert_scan_error(exc, text), text) from None
    except UnexpectedTok as exc:
        raise _dash_hint(_convert_parse_error(exc), text) from None
    if start == "action" and len(node.statements) > limits.ACTION_STATEMENTS.value:
        _too_many_statements(text, len(node.statements))
    if len(text) >= MAX_DEPTH:
        _check_depth(node)
    if "@" in text:
        node = _substitute(node, _normalise_parameters(parameters))
    if _OVERFLOW_TEXT in text:
        _check_overflow(node, text)
    return node


def dash_comment(text: str) -> int | None:
    """The offset of a ``--`` outside string literals and [bracketed] names, or None: text a person
    meant as a comment, which Service Bus SQL reads as minus twice."""
    quote: str | None = None
    index = 0
    while index < len(text):
        char = text[index]
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "'[":
            quote = "'" if char == "'" else "]"
        elif text.startswith("--", index):
            return index
        index += 1
    return None


def _dash_hint(error: SqlError, text: str) -> SqlError:
    """A syntax error in text with a ``--`` says that ``--`` is not a comment (the likely cause)."""
    if "--" not in text or dash_comment(text) is None:
        return error
    message = f"{error.message} ('--' is not a comment in Service Bus SQL: it is minus twice)"
    return SqlError(message, error.line, error.column, error.token)


def _too_many_statements(text: str, count: int) -> None:
    starts = [t for t in _SCANNER.scan(text) if t.type in ("SET", "REMOVE")]
    first_extra = starts[limits.ACTION_STATEMENTS.value]
    raise SqlError(
        f"an action may have at most {limits.ACTION_STATEMENTS.value} statements (this one has {count})",
        first_extra.line,
        first_extra.column,
        first_extra.value,
    )


def _check_depth(node: Any) -> None:
    stack = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SqlError(f"expression is nested more than {MAX_DEPTH} levels deep", 1, 1, None)
        if isinstance(current, _ParamRef):
            continue
        for child in ast.children(current):
            stack.append((child, depth if _continues_chain(current, child) else depth + 1))


def _continues_chain(parent: Any, child: Any) -> bool:
    """Whether ``child`` is the left operand of a chain of the same kind (arithmetic, AND, OR)."""
    if child is not getattr(parent, "left", None):
        return False
    if isinstance(parent, ast.Binary):
        return isinstance(child, ast.Binary)
    return isinstance(parent, (ast.And, ast.Or)) and type(child) is type(parent)


def _normalise_parameters(parameters: Mapping[str, Any] | None) -> dict[str, TypedValue]:
    out: dict[str, TypedValue] = {}
    for key, value in (parameters or {}).items():
        name = name_key(str(key).lstrip("@"))
        out[name] = value if isinstance(value, TypedValue) else TypedValue.infer(value)
    return out


def _rebuild(node: Any, fn: Callable[[Any], Any]) -> Any:
    """A copy of ``node`` with ``fn`` applied bottom-up to every node (depth already bounded)."""
    if isinstance(node, _ParamRef):
        return fn(node)
    changes = {}
    for name in ast.CHILD_FIELDS[type(node)]:
        value = getattr(node, name)
        if isinstance(value, tuple):
            changes[name] = tuple(_rebuild(v, fn) for v in value)
        elif value is not None:
            changes[name] = _rebuild(value, fn)
    return fn(dataclasses.replace(node, **changes) if changes else node)


def _substitute(node: Any, parameters: dict[str, TypedValue]) -> Any:
    def replace(current: Any) -> Any:
        if isinstance(current, _ParamRef):
            value = parameters.get(current.name)
            if value is None:
                raise SqlError(
                    f"parameter {current.text} is not supplied", current.line, current.column, current.text
                )
            return ast.Literal(value.type, value.value, current.name)
        return current

    return _rebuild(node, replace)


def _check_overflow(node: Any, text: str) -> None:
    stack = [node]
    while stack:
        current = stack.pop()
        if _is_overflow(current):
            match = re.search(r"(?<![0-9.])0*" + _OVERFLOW_TEXT + r"(?![0-9])", text)
            start = match.start() if match else 0
            line = text.count("\n", 0, start) + 1
            column = start - (text.rfind("\n", 0, start) + 1) + 1
            raise SqlError(f"integer literal {_OVERFLOW_TEXT} is out of range for Int64", line, column, _OVERFLOW_TEXT)
        stack.extend(ast.children(current))


@functools.lru_cache(maxsize=4096)
def _parse_filter_cached(text: str) -> ast.Predicate:
    return _parse(text, "filter", None)


@functools.lru_cache(maxsize=4096)
def _parse_action_cached(text: str) -> ast.Action:
    return _parse(text, "action", None)


def parse_filter(text: str, parameters: Mapping[str, TypedValue] | None = None) -> ast.Predicate:
    """The predicate AST of a SQL filter; raises SqlError for anything the broker would reject."""
    if parameters:
        return _parse(text, "filter", parameters)
    return _parse_filter_cached(text)


def parse_action(text: str, parameters: Mapping[str, TypedValue] | None = None) -> ast.Action:
    """The AST of a SQL rule action (1..32 SET/REMOVE statements); raises SqlError."""
    if parameters:
        return _parse(text, "action", parameters)
    return _parse_action_cached(text)


def parse_filter_uncached(text: str, parameters: Mapping[str, TypedValue] | None = None) -> ast.Predicate:
    """parse_filter without the result cache (benchmarks measure the parser itself)."""
    return _parse(text, "filter", parameters)


__all__ = [
    "KEYWORDS",
    "RESERVED_WORDS",
    "SETTABLE_SYSTEM_PROPERTIES",
    "parse_action",
    "parse_filter",
    "parse_filter_uncached",
    "terminal_pattern",
]
