"""The two error kinds of the SQL language: rejected at rule creation, or failed on one message."""

from __future__ import annotations

from reconciler.errors import ErrorCode, SbrulesError


class SqlError(SbrulesError):
    """Text the broker would reject when the rule is created (syntax, names, literals, limits).

    ``line`` and ``column`` are 1-based and point at ``token``, the offending text (``None`` at
    end of input); ``str()`` is the message alone so callers can add their own location.
    """

    code = ErrorCode.RULES_INVALID

    def __init__(self, message: str, line: int = 1, column: int = 1, token: str | None = None):
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.token = token

    def render(self, text: str) -> str:
        """The message, the offending line of ``text`` and carets under the offending token."""
        lines = text.split("\n")
        source = lines[self.line - 1] if 0 < self.line <= len(lines) else ""
        indent = "".join(c if c == "\t" else " " for c in source[: self.column - 1])
        width = len(self.token) if self.token and "\n" not in self.token else 1
        caret = indent + "^" * max(1, min(width, len(source) - len(indent) or 1))
        return f"{self.message} (line {self.line}, column {self.column})\n  {source}\n  {caret}"


class SqlEvalError(SbrulesError):
    """A filter or action failed on one message (type mismatch, overflow, division by zero...).

    The broker treats this as a filter evaluation exception: the message does not match that rule
    and, by default, is dead-lettered by the subscription.
    """

    code = ErrorCode.INPUT
