"""Canonical form: what the planner compares, so cosmetic differences must vanish."""

from __future__ import annotations

import pytest

from reconciler.sql import SqlError, canonical_action, canonical_filter

pytestmark = pytest.mark.unit

EQUIVALENT_FILTERS = [
    ("color='blue' and quantity=10", "color = 'blue' AND quantity = 10"),
    ("  COLOR = 'blue'\n\tAND\r\nquantity = 10  ", "COLOR = 'blue' AND quantity = 10"),
    ("((color = 'blue'))", "color = 'blue'"),
    ("(a = 1 AND b = 2) AND c = 3", "a = 1 AND b = 2 AND c = 3"),
    ("a = 1 OR (b = 2 AND c = 3)", "a = 1 OR b = 2 AND c = 3"),
    ("sys.label like 'a%'", "sys.Label LIKE 'a%'"),
    ("SYS.LABEL = 'x'", "sys.Label = 'x'"),
    ("[sys].[label] = 'x'", "sys.Label = 'x'"),
    ("user.color = 'x'", "color = 'x'"),
    ("[user].[color] = 'x'", "color = 'x'"),
    ('"color" = \'x\'', "color = 'x'"),
    ("[my prop] = 1", "[my prop] = 1"),
    ('"in" = 1', "[in] = 1"),
    ("[x]]y] = 1", "[x]]y] = 1"),
    ("a != 1", "a <> 1"),
    ("a = 1.50", "a = 1.5"),
    ("a = 1e3", "a = 1000.0"),
    ("a = 0.5E-2", "a = 0.005"),
    ("a = 1e20", "a = 1E+20"),
    ("a = - 5", "a = -5"),
    ("a = -(5)", "a = -5"),
    ("a = +5", "a = 5"),
    ("a = +'x'", "a = 'x'"),
    ("a = - - 5", "a = 5"),
    ("p('x') = 1", "property('x') = 1"),
    ("NEWID() = 1", "newid() = 1"),
    ("x in('a','b')", "x IN ('a', 'b')"),
    ("not x not in (1)", "NOT x NOT IN (1)"),
    ("exists ( x )", "EXISTS(x)"),
    ("x is not null", "x IS NOT NULL"),
    ("(a + b) * c = 1", "(a + b) * c = 1"),
    ("a + (b * c) = 1", "a + b * c = 1"),
    ("a - (b + c) = 1", "a - (b + c) = 1"),
    ("(a - b) + c = 1", "a - b + c = 1"),
    ("a = 'it''s'", "a = 'it''s'"),
    ("NOT (NOT a = 1)", "NOT NOT a = 1"),
    ("NOT (a = 1 OR b = 1)", "NOT (a = 1 OR b = 1)"),
    ("x = 'a' -- c", "x = 'a' - -c"),
]


@pytest.mark.parametrize(("text", "expected"), EQUIVALENT_FILTERS)
def test_canonical_filter(text: str, expected: str) -> None:
    assert canonical_filter(text) == expected
    assert canonical_filter(expected) == expected


def test_cosmetic_variants_compare_equal() -> None:
    variants = [
        "color = 'blue' AND quantity > 10",
        "Color='blue' and quantity>10",
        "(color = 'blue') AND (quantity > 10)",
        "user.color = 'blue'\nAND quantity > +10",
    ]
    forms = {canonical_filter(v).lower() for v in variants}
    assert len(forms) == 1


def test_string_values_stay_case_sensitive() -> None:
    assert canonical_filter("a = 'Blue'") != canonical_filter("a = 'blue'")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("set a = 1;", "SET a = 1"),
        ("SET a=1 SET b = a+1; remove c", "SET a = 1; SET b = a + 1; REMOVE c"),
        ("SET sys.label = 'x'", "SET sys.Label = 'x'"),
    ],
)
def test_canonical_action(text: str, expected: str) -> None:
    assert canonical_action(text) == expected


def test_canonical_filter_rejects_invalid_text() -> None:
    with pytest.raises(SqlError):
        canonical_filter("color =")


def test_filter_key_folds_user_property_case_only():
    from reconciler.sql import filter_key

    assert filter_key("Amount > 1 AND [My Prop] = 'X'") == filter_key("amount > 1 AND [my prop] = 'X'")
    assert filter_key("a = 'X'") != filter_key("a = 'x'")
    assert filter_key("sys.label = 'x'") == "sys.Label = 'x'"
    assert canonical_filter("Amount > 1") == "Amount > 1"
