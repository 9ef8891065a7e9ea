"""LIKE as the broker matches it: a pattern over UTF-16 code units, with an optional escape character."""


from __future__ import annotations

import functools
import re
from typing import Any

from reconciler.sql.values import to_string


def utf16_units(text: str) -> str:
    """``text`` with astral characters split into surrogate pairs (one char per UTF-16 unit)."""
    if text.isascii() or max(text) <= "\uffff":
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if code > 0xFFFF:
            code -= 0x10000
            out.append(chr(0xD800 + (code >> 10)))
            out.append(chr(0xDC00 + (code & 0x3FF)))
        else:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def like_regex(pattern: str, escape: str) -> re.Pattern[str]:
    """The .NET regex the reference engine builds for LIKE (``%``/``_`` wildcards, optional escape)."""
    escape_char = escape[0] if escape else None
    parts = []
    escaping = False
    for ch in utf16_units(pattern):
        if not escaping and ch == escape_char:
            escaping = True
            continue
        if not escaping and ch == "%":
            parts.append(".*")
        elif not escaping and ch == "_":
            parts.append(".")
        else:
            parts.append(re.escape(ch))
        escaping = False
    return re.compile("".join(parts) + "$")


def like(value: Any, pattern: Any, escape: Any) -> bool:
    """LIKE on present values: every operand is converted with Convert.ToString first."""
    regex = like_regex(to_string(pattern), "" if escape is None else to_string(escape))
    return regex.match(utf16_units(to_string(value))) is not None
