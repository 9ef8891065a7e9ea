"""Property names, identifiers and keywords in the SQL language, as the service reads them."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from reconciler.sql import MessageView, SqlError, canonical_filter, parse_filter
from reconciler.sql.evaluator import CompiledFilter
from reconciler.sql.parser import identifier_problem

LETTERS = {"Lu", "Ll", "Lt", "Lm", "Lo"}


def _matches(expression: str, **user: object) -> str:
    return CompiledFilter(parse_filter(expression)).outcome(MessageView.from_plain(user=user)).label


@pytest.mark.unit
@pytest.mark.parametrize(
    ("expression", "key", "matched"),
    [
        ("\u00b5 = 1", "\u03bc", "true"),  # µ and μ are one property name
        ("\u212a = 1", "k", "unknown"),  # the Kelvin sign is not k: the property is missing
        ("[\u00df] = 1", "ss", "unknown"),
        ("Amount = 1", "AMOUNT", "true"),
    ],
)
def test_user_property_lookup_compares_names_as_the_service_does(expression, key, matched):
    assert _matches(expression, **{key: 1}) == matched


@pytest.mark.slow
def test_regular_identifiers_are_microsofts_over_every_code_point():
    """``[[:IsLetter:]][_[:IsLetter:][:IsDigit:]]*``: checked for every assigned code point, first and later."""
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        char = chr(cp)
        category = unicodedata.category(char)
        assert (identifier_problem(char) is None) == (category in LETTERS), hex(cp)
        assert (identifier_problem("a" + char) is None) == (category in LETTERS or category == "Nd" or char == "_"), hex(cp)


@pytest.mark.unit
@pytest.mark.parametrize("expression", ["a\u00b2 = 1", "\u216b = 1", "x\u2160 = 1"])
def test_a_number_that_is_not_a_decimal_digit_ends_an_identifier(expression):
    with pytest.raises(SqlError, match="not a regular identifier"):
        parse_filter(expression)


@pytest.mark.unit
def test_brackets_take_any_name_and_canonical_forms_bracket_what_is_not_an_identifier():
    assert canonical_filter("[a\u00b2] = 1") == "[a\u00b2] = 1"
    assert canonical_filter("\u00e41_b = 2") == "\u00e41_b = 2"


@pytest.mark.unit
@pytest.mark.parametrize("text", ["ex\u0131sts(a)", "a \u0131s null", "a li\u212ae 'x'", "\u017felect = 1"])
def test_keywords_are_ascii_only(text):
    """Python's re.IGNORECASE takes ı for i, ſ for s and K (Kelvin) for k; the service does not."""
    try:
        parsed = canonical_filter(text)
    except SqlError:
        return
    assert parsed == text  # when it parses at all, it parsed as identifiers, not keywords


@pytest.mark.unit
def test_reserved_words_are_matched_as_the_service_matches_them():
    with pytest.raises(SqlError, match="reserved word"):
        parse_filter("begin = 1")
    assert canonical_filter("\u0131f = 1") == "\u0131f = 1"  # ıf is not IF for the service
