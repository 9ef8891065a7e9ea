"""Names compared as Service Bus compares them: one key function for every entity, rule and property name.

The service keeps names in dictionaries keyed with .NET's ``StringComparer.OrdinalIgnoreCase``: two
names are equal when they have the same length and each character's invariant *simple* upper-case
mapping is the same (one character to one character). Python's ``lower()`` and ``casefold()`` use the
*full* Unicode mappings instead ('ß' folds to 'ss', the Kelvin sign K lowers to 'k', 'µ' and 'μ'
lower apart but upper together), so they merge names the service keeps apart and split names it
merges. docs/names.md has the evidence for each rule below.
"""

from __future__ import annotations

import fnmatch
import functools
import sys
from typing import Iterable

#: .NET's ordinal casing table leaves these two as they are, although Unicode upper-cases them to
#: ASCII 'I' and 'S' (it "disables Turkish-I behavior on ordinal operations").
_KEPT = frozenset({"\u0131", "\u017f"})


@functools.cache
def simple_upper(char: str) -> str:
    """The one-character upper-case mapping ordinal ignore-case comparison uses for ``char``.

    Python exposes only the full mapping (``str.upper``). Where that is one character it is also the
    simple mapping; where it is longer, Unicode's simple mapping is the titlecase letter when that is
    one character (the Greek letters with ypogegrammeni) and otherwise none (the character itself).
    tests/names checks this against every code point.
    """
    if char in _KEPT:
        return char
    upper = char.upper()
    if len(upper) == 1:
        return upper
    title = char.title()
    return title if len(title) == 1 else char


def name_key(name: str) -> str:
    """The key under which the service files ``name``: equal keys, the same entity, rule or property.

    The key is opaque. ASCII letters appear lower-cased, every other character as its simple upper-case
    mapping: no character outside ASCII maps into it (see ``simple_upper``'s two exceptions), so this
    is the same equivalence, and ASCII names keep the keys sbrules always gave them (fingerprints in
    saved plans and the emulator's state file stay valid).
    """
    if name.isascii():
        return name.lower()
    return "".join(ch.lower() if ch.isascii() else simple_upper(ch) for ch in name)


@functools.cache
def key_translation() -> tuple[str, str]:
    """:func:`name_key` as a one-to-one character translation (from, to): for an engine that cannot
    call Python per row, such as Spark's ``translate`` on a property name computed in a filter.
    Every mapping is one character to one character, so translating the name gives its key."""
    fold = simple_upper.__wrapped__  # uncached: a million characters
    source, target = [], []
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue  # surrogates: never a character of a decoded name
        char = chr(code)
        key = char.lower() if char.isascii() else fold(char)
        if key != char:
            source.append(char)
            target.append(key)
    return "".join(source), "".join(target)


def same_name(a: str, b: str) -> bool:
    """Whether the service takes ``a`` and ``b`` for the same name."""
    return a == b or name_key(a) == name_key(b)


def matches(name: str, pattern: str) -> bool:
    """Whether ``name`` matches the glob ``pattern`` (``*``, ``?``, ``[...]``) as the service compares
    names: both are folded by :func:`name_key`, then matched with :func:`fnmatch.fnmatchcase`."""
    return fnmatch.fnmatchcase(name_key(name), name_key(pattern))


def owned(name: str, owns: Iterable[str] | None) -> bool:
    """Whether sbrules owns the rule ``name`` where ``owns`` are the patterns declared (None: the
    complete set, every rule is owned)."""
    return owns is None or any(matches(name, pattern) for pattern in owns)


def shown_topic(declared: str, actual: str | None = None) -> str:
    """A topic as the rule files declare it, with the namespace's name beside it where an
    environment renames it: every command shows a renamed topic this one way."""
    return declared if actual is None or actual == declared else f"{declared} ({actual} in the namespace)"


def shown_path(declared: str, subscription: str, actual: str | None = None) -> str:
    """``topic/subscription`` as declared, with the namespace's topic name beside it when renamed."""
    path = f"{declared}/{subscription}"
    return path if actual is None or actual == declared else f"{path} ({actual} in the namespace)"
