"""The ATOM documents: rules survive writing and reading; hostile XML is refused."""

from __future__ import annotations

import datetime as _dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler import model
from reconciler.model import ValueType
from reconciler.rest import atom
from tests.amqp.strategies import TYPED_BY_TYPE
from tests.rest.conftest import RULES

pytestmark = pytest.mark.unit

NOW = _dt.datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=_dt.timezone.utc)


def _round_trip(rule: model.Rule) -> model.Rule:
    text = atom.entry("https://ns", f"t/subscriptions/s/rules/{rule.name}", rule.name,
                      atom.rule_description(rule, NOW), NOW, standalone=True)
    (entry,) = atom.page(text.encode()).entries
    return atom.rule_from_entry(entry)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_kind_reads_back_as_written(rule):
    assert _round_trip(rule) == rule


def test_values_of_every_representable_type_read_back():
    values = {"null": None, "nan": {"double": "nan"}, "neg": {"double": "-inf"}, "text": "<&'\">",
              "min": {"long": -9223372036854775808}}
    rule = model.Rule("r", model.CorrelationFilter(properties=values))
    back = _round_trip(rule)
    assert [(k, v.type) for k, v in back.filter.properties] == [(k, v.type) for k, v in rule.filter.properties]
    assert str(back.filter.property_map["nan"].value) == "nan"
    assert back.filter.property_map["text"].value == "<&'\">"


@settings(max_examples=60)
@given(st.fixed_dictionaries({t.value: s.filter(lambda v: str(v.value).isprintable()) for t, s in TYPED_BY_TYPE.items()}))
def test_every_property_type_reads_back_as_written(values):
    """Symbols come back as strings (a symbol is a .NET string on the broker); the rest exactly."""
    rule = model.Rule("r", model.CorrelationFilter(properties=values))
    expected = {k: model.TypedValue("string", v.value) if v.type is ValueType.SYMBOL else v for k, v in values.items()}
    assert _round_trip(rule).filter.property_map == expected


def test_feed_pages_name_their_next_page():
    text = atom.feed("https://ns/t/subscriptions?$skip=0&$top=2", "Subscriptions", [], NOW,
                     "https://ns/t/subscriptions?$skip=2&$top=2")
    assert atom.page(text.encode()).next_link.endswith("$skip=2&$top=2")


def test_entity_expansion_is_refused():
    bomb = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
            b'<feed xmlns="http://www.w3.org/2005/Atom"><title>&lol2;</title></feed>')
    with pytest.raises(atom.AtomError, match="forbidden"):
        atom.page(bomb)


def test_unknown_filter_types_are_named():
    text = ('<entry xmlns="http://www.w3.org/2005/Atom"><title>r</title><content type="application/xml">'
            f'<RuleDescription xmlns="{atom.SB_NS}" xmlns:i="{atom.XSI_NS}"><Filter i:type="FancyFilter"/>'
            '<Name>r</Name></RuleDescription></content></entry>')
    with pytest.raises(atom.AtomError, match="FancyFilter"):
        atom.rule_from_entry(atom.page(text.encode()).entries[0])


def test_error_bodies_give_their_detail():
    assert atom.error_detail(atom.error(404, "gone").encode()) == "gone"
    assert atom.error_detail(b"not xml") is None
