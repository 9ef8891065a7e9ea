"""names.name_key against a reference built from Unicode data, over every code point where Python's case
rules and the service's disagree (the table is generated here, not written by hand)."""

from __future__ import annotations

import functools
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.names import key_translation, name_key, same_name, simple_upper

DATA = Path(__file__).parent / "data" / "multi_char_upper.tsv"
#: .NET's ordinal casing table keeps these (dotnet/runtime, pal_casing.c: InitOrdinalCasingPage).
NET_KEEPS = {"\u0131", "\u017f"}


def _multi_char_simple_upper() -> dict[str, str]:
    table = {}
    for line in DATA.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        code, simple, _name = line.split("\t")
        table[chr(int(code, 16))] = chr(int(code, 16)) if simple == "-" else chr(int(simple, 16))
    return table


MULTI = _multi_char_simple_upper()


def reference_upper(char: str) -> str:
    """The service's per-character mapping, from the data file where Python's mapping is not simple."""
    if char in NET_KEEPS:
        return char
    if char in MULTI:
        return MULTI[char]
    upper = char.upper()
    assert len(upper) == 1, f"U+{ord(char):04X} maps to {upper!r}, which the data file does not list"
    return upper


def reference_key(name: str) -> str:
    return "".join(map(reference_upper, name))


@functools.cache
def assigned() -> list[str]:
    return [
        chr(cp) for cp in range(sys.maxunicode + 1)
        if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn"
    ]


@functools.cache
def disagreements() -> list[tuple[str, str, str]]:
    """(a, b, how) for every pair of names on which lower()/casefold() and the service's comparison differ."""
    out = []
    for fold, how in ((str.lower, "lower"), (str.casefold, "casefold")):
        by_fold: dict[str, list[str]] = {}
        by_service: dict[str, list[str]] = {}
        for char in assigned():
            by_fold.setdefault(fold(char), []).append(char)
            by_service.setdefault(reference_key(char), []).append(char)
            folded = fold(char)
            if len(folded) > 1:  # 'ß' and 'ss': equal folded, never equal for the service (lengths differ)
                out.append((char, folded, f"{how} merges"))
        for group in by_fold.values():
            out += [(group[0], other, f"{how} merges") for other in group[1:] if reference_key(other) != reference_key(group[0])]
        for group in by_service.values():
            out += [(group[0], other, f"{how} splits") for other in group[1:] if fold(other) != fold(group[0])]
    return out


@pytest.mark.slow
def test_simple_upper_is_one_character_and_matches_the_reference_for_every_code_point():
    for char in assigned():
        assert simple_upper(char) == reference_upper(char), f"U+{ord(char):04X}"


@pytest.mark.slow
def test_every_disagreement_of_python_and_the_service_is_decided_as_the_service_decides():
    table = disagreements()
    assert len(table) > 100
    for a, b, how in table:
        assert same_name(a, b) == (reference_key(a) == reference_key(b)), (hex(ord(a[0])), b, how)
        assert same_name("rule-" + a, "rule-" + b) is same_name(a, b)
    hows = {how for _, _, how in table}
    assert hows == {"lower merges", "lower splits", "casefold merges"}, hows


@pytest.mark.unit
@pytest.mark.parametrize(
    ("a", "b", "service_equal"),
    [
        ("orders", "ORDERS", True),
        ("\u212a", "k", False),  # KELVIN SIGN: lower() gives 'k'; it upper-cases to itself
        ("\u00b5", "\u03bc", True),  # MICRO SIGN and GREEK SMALL MU: both upper-case to GREEK CAPITAL MU
        ("\u00df", "ss", False),  # casefold('ß') == 'ss'
        ("\u0131", "i", False),  # DOTLESS I: .NET keeps it
        ("\u017f", "s", False),  # LONG S: .NET keeps it
        ("\ufb01", "fi", False),  # the ligature casefolds to two letters
        ("\u1f80", "\u1f88", True),  # a simple mapping that is the titlecase letter
        ("\u01c5", "\u01c6", True),  # Dž and dž upper-case to DŽ
    ],
)
def test_named_pairs(a, b, service_equal):
    assert same_name(a, b) is service_equal
    assert (name_key(a) == name_key(b)) is service_equal


@pytest.mark.slow
@given(st.data())
def test_the_key_is_the_reference_equivalence(data):
    """Names respelled character by character with Python's case functions: equal keys exactly when the reference says so."""
    name = data.draw(st.text(max_size=12))
    respell = [str.upper, str.lower, str.casefold, str.title, str]
    other = "".join(data.draw(st.sampled_from(respell))(char) for char in name)
    assert (name_key(name) == name_key(other)) == (reference_key(name) == reference_key(other))


@pytest.mark.unit
def test_ascii_names_keep_their_lower_case_keys():
    assert name_key("Orders-EU_1.x") == "orders-eu_1.x"


@pytest.mark.slow
def test_the_translation_table_gives_every_characters_key():
    """Spark folds a computed property name with ``translate``: character by character, the key."""
    source, target = key_translation()
    table = dict(zip(source, target))
    assert len(source) == len(target) == len(table)
    for code in range(sys.maxunicode + 1):
        if not 0xD800 <= code <= 0xDFFF:
            char = chr(code)
            assert table.get(char, char) == name_key(char), hex(code)
