"""Located findings about rule files (errors, warnings, notes) and their three renderings.

The rule-file loader (rulefiles/) and the offline checks (lint.py) both report through this one
type, so that `sbrules validate` prints every finding the same way: text with a caret under SQL,
stable JSON, or GitHub Actions annotations.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from reconciler.model import Origin

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class SqlContext:
    """The SQL text a finding is about, and the 1-based line/column inside that text."""

    text: str
    line: int
    column: int


@dataclass(frozen=True)
class Diagnostic:
    severity: str
    code: str
    message: str
    origin: Origin | None = None
    sql: SqlContext | None = None
    related: tuple[Origin, ...] = field(default=())

    def location(self) -> str:
        return str(self.origin) if self.origin else "<input>"


def sort_key(diag: Diagnostic) -> tuple[str, int, int, int, str]:
    origin = diag.origin
    return (
        origin.file if origin else "",
        origin.line if origin else 0,
        origin.column if origin else 0,
        SEVERITIES.index(diag.severity),
        diag.code,
    )


def counts(diags: Iterable[Diagnostic]) -> dict[str, int]:
    out = {"error": 0, "warning": 0, "info": 0}
    for diag in diags:
        out[diag.severity] += 1
    return out


#: Warnings of one code shown one by one before the rest are counted in one line.
WARNINGS_SHOWN = 5


def fold_notes(diags: Sequence[Diagnostic]) -> list[Diagnostic]:
    """``diags`` as a person reads them when there are many: the notes (info) of each code that
    occurs more than once folded into one, at the place of the first, with the count and the first
    one's message; of each warning code the first :data:`WARNINGS_SHOWN` as they are and the rest
    counted in one line after them. A large project has a note for nearly every rule (100,000 rules
    made 41,000) and the static proofs a warning for every rule a true filter covers. Errors are
    never folded."""
    notes = Counter(d.code for d in diags if d.severity == "info")
    warnings = Counter(d.code for d in diags if d.severity == "warning")
    out: list[Diagnostic] = []
    folded: set[str] = set()
    shown: Counter[str] = Counter()
    for diag in diags:
        if diag.severity == "info" and notes[diag.code] > 1:
            if diag.code not in folded:
                folded.add(diag.code)
                message = f"{notes[diag.code]:,} notes like this first one (--verbose lists them): {diag.message}"
                out.append(replace(diag, message=message, related=(), sql=None))
        elif diag.severity == "warning" and warnings[diag.code] > WARNINGS_SHOWN + 1:
            shown[diag.code] += 1
            if shown[diag.code] <= WARNINGS_SHOWN:
                out.append(diag)
            elif shown[diag.code] == WARNINGS_SHOWN + 1:
                rest = warnings[diag.code] - WARNINGS_SHOWN
                message = f"{rest:,} more warnings of this code, the next one here (--verbose lists them): {diag.message}"
                out.append(replace(diag, message=message, related=(), sql=None))
        else:
            out.append(diag)
    return out


def _caret_block(sql: SqlContext) -> list[str]:
    lines = sql.text.splitlines() or [""]
    index = min(max(sql.line, 1), len(lines)) - 1
    text = lines[index].expandtabs(1)
    return [f"    {text}", "    " + " " * max(sql.column - 1, 0) + "^"]


def render_text(diags: Sequence[Diagnostic]) -> str:
    """``file:line:col: severity[code]: message`` with the SQL and a caret under the column."""
    out: list[str] = []
    for diag in diags:
        out.append(f"{diag.location()}: {diag.severity}[{diag.code}]: {diag.message}")
        for other in diag.related:
            out.append(f"    also at {other}")
        if diag.sql is not None:
            out.extend(_caret_block(diag.sql))
    return "\n".join(out)


def to_json(diag: Diagnostic) -> dict[str, Any]:
    origin = diag.origin
    return {
        "severity": diag.severity,
        "code": diag.code,
        "message": diag.message,
        "file": origin.file if origin else None,
        "line": origin.line if origin else None,
        "column": origin.column if origin else None,
        "related": [{"file": o.file, "line": o.line, "column": o.column} for o in diag.related],
        "sql": (
            {"text": diag.sql.text, "line": diag.sql.line, "column": diag.sql.column} if diag.sql else None
        ),
    }


def to_document(
    diags: Sequence[Diagnostic], summary: Mapping[str, Any], counted: Sequence[Diagnostic] | None = None
) -> dict[str, Any]:
    """The ``validate --format json`` document (schemas/validate.schema.json), without ``traffic``:
    ``diags`` as shown (folded, as text folds them, unless --verbose), the summary counting
    ``counted`` (every finding; by default ``diags``)."""
    tally = counts(diags if counted is None else counted)
    return {
        "format_version": 1,
        "valid": tally["error"] == 0,
        "summary": {**summary, "errors": tally["error"], "warnings": tally["warning"], "info": tally["info"]},
        "diagnostics": [to_json(d) for d in diags],
    }


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def render_github(diags: Sequence[Diagnostic]) -> str:
    """GitHub Actions workflow commands: ``::error file=…,line=…,col=…::message``."""
    level = {"error": "error", "warning": "warning", "info": "notice"}
    out = []
    for diag in diags:
        props = []
        if diag.origin:
            props = [
                f"file={_gh_escape(diag.origin.file, True)}",
                f"line={diag.origin.line}",
                f"col={diag.origin.column}",
            ]
        head = f"::{level[diag.severity]} " + ",".join(props) if props else f"::{level[diag.severity]}"
        out.append(f"{head}::{_gh_escape(f'[{diag.code}] {diag.message}')}")
    return "\n".join(out)


def render_markdown(diags: Sequence[Diagnostic]) -> str:
    if not diags:
        return "All rule files are valid."
    icon = {"error": "❌", "warning": "⚠️", "info": "ℹ️"}
    rows = ["| | location | finding |", "|---|---|---|"]
    for diag in diags:
        message = diag.message.replace("|", "\\|")
        rows.append(f"| {icon[diag.severity]} | `{diag.location()}` | {message} |")
    return "\n".join(rows)
