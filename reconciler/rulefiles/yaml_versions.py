"""Plain YAML scalars that different YAML versions and tools read as different types.

sbrules reads YAML 1.1 (PyYAML), where ``yes``/``no``/``on``/``off`` are booleans, ``1:30`` is
the sexagesimal integer 90, ``010`` is octal 8 and ``1e3`` (no dot, no exponent sign) is a string.
YAML 1.2, which most other tools (editors, linters, Go and JavaScript parsers) follow, reads those
as the strings ``yes`` and ``1:30``, the integer 10 and the double 1000.0; and the YAML 1.1 spec
itself makes ``y``/``n`` booleans, which PyYAML keeps as strings. In a correlation property the
type decides whether a message matches, so such a scalar must be pinned with a typed map.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution).
_CORE_NULL = re.compile(r"null|Null|NULL|~|")
_CORE_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
_CORE_INT10 = re.compile(r"[-+]?[0-9]+")
_CORE_INT8 = re.compile(r"0o[0-7]+")
_CORE_INT16 = re.compile(r"0x[0-9a-fA-F]+")
_CORE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_CORE_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
_CORE_NAN = re.compile(r"\.(nan|NaN|NAN)")
#: Booleans of the YAML 1.1 spec that PyYAML leaves as strings.
_SPEC_ONLY_BOOL = {"y": True, "Y": True, "n": False, "N": False}


def core_schema_value(text: str) -> Any:
    """What a YAML 1.2 core-schema parser makes of the plain scalar ``text``."""
    if _CORE_NULL.fullmatch(text):
        return None
    if _CORE_BOOL.fullmatch(text):
        return text.lower() == "true"
    if _CORE_INT10.fullmatch(text):
        return int(text)
    if _CORE_INT8.fullmatch(text):
        return int(text[2:], 8)
    if _CORE_INT16.fullmatch(text):
        return int(text[2:], 16)
    if _CORE_FLOAT.fullmatch(text):
        return float(text)
    if _CORE_INF.fullmatch(text):
        return -math.inf if text.startswith("-") else math.inf
    if _CORE_NAN.fullmatch(text):
        return math.nan
    return text


@dataclass(frozen=True)
class Ambiguity:
    """A plain scalar read as ``value`` here, and as ``other`` by ``other_reader``."""

    text: str
    value: Any
    other: Any
    other_reader: str


@lru_cache(maxsize=4096)
def ambiguity(text: str, value: Any) -> Ambiguity | None:
    """How the plain scalar ``text``, which sbrules read as ``value``, reads elsewhere; None if it
    reads the same everywhere. Cached: rule files repeat the same plain values over thousands of
    rules, and ``value`` is what YAML 1.1 makes of ``text``, so equal keys are the same scalar."""
    if text in _SPEC_ONLY_BOOL and value == text:
        return Ambiguity(text, value, _SPEC_ONLY_BOOL[text], "the YAML 1.1 spec (and tools that follow it)")
    other = core_schema_value(text)
    if _same(value, other):
        return None
    return Ambiguity(text, value, other, "YAML 1.2 (most other tools)")


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def describe(value: Any) -> str:
    """A scalar as its rule-file type: ``the bool true``, ``the long 90``, ``the string 'yes'``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the bool {str(value).lower()}"
    if isinstance(value, int):
        return f"the long {value}"
    if isinstance(value, float):
        return f"the double {value!r}"
    return f"the string {value!r}"


def typed_form(value: Any) -> str:
    """The one-key map that pins ``value``'s type in a rule file."""
    if isinstance(value, bool):
        return f"{{bool: {str(value).lower()}}}"
    if isinstance(value, int):
        return f"{{long: {value}}}"
    if isinstance(value, float):
        return f"{{double: {value!r}}}"
    return "{string: '" + str(value).replace("'", "''") + "'}"


def explain(unclear: Ambiguity) -> str:
    """What a warning says after naming the value: how it is written, the type each reader makes
    of it, and the typed maps that pin one or the other."""
    return (
        f"written {unclear.text}, which sbrules (YAML 1.1) reads as {describe(unclear.value)} and "
        f"{unclear.other_reader} as {describe(unclear.other)}; correlation matching is type-strict: write "
        f"{typed_form(unclear.value)} or {typed_form(unclear.other)} to pin it"
    )
