"""Where user and system property values come from: the sample's property cells and type tests.

A user property is a cell of the ``props`` map (:mod:`reconciler.traffic.sample.rows`): a struct with
the type tag ``t`` and typed fields, NULL when the message lacks the property. A report looks each
property its filters name up once per message and tests its type once per message
(:class:`PropertyCells`); a filter translated on its own reads ``props`` directly. System
properties are typed columns, NULL when unset.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Iterable, Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from reconciler.model import SYSTEM_PROPERTIES
from reconciler.names import key_translation, name_key
from reconciler.traffic.sample.rows import PROPS, SYS_COLUMNS, VALUE_FIELD
from reconciler.traffic.spark.algebra import MISSING_TAG, STRINGS, USER_TAGS, Untranslatable, Val, first_error, only_when

#: Pre-computed ``props[name]`` cells by folded name (``names.name_key``)
#: (see :func:`reconciler.traffic.spark.rules.property_names`).
Cells = Mapping[str, Column]


def _lookup(key: Column) -> Val:
    """The value of the user property named by the folded (``names.name_key``) ``key`` column."""
    return _cell_value(F.try_element_at(F.col(PROPS), key))


def _cell_value(cell: Column) -> Val:
    """A property cell (NULL when missing) as a value of any user tag."""
    return Val(
        USER_TAGS,
        F.coalesce(cell.getField("t"), F.lit(MISSING_TAG)),
        s=cell.getField("s"),
        l=cell.getField("l"),
        d=cell.getField("d"),
        b=cell.getField("b"),
        text=F.coalesce(cell.getField("s"), F.lit("")),
    )


class PropertyCells(dict):
    """:data:`Cells` that also build each property's :class:`Val` once for all the filters using
    it (translating many filters is dominated by py4j round trips, one per Column operation), and
    name each tag test the filters make of a property as a column of its own, ``tests``, for the
    caller to project before the filters (:meth:`with_tests`).

    Why: every filter tests property tags many times (one test per operator branch). Inlined,
    those tests make up most of the Java Spark generates for a report of many rules, and
    generating it takes longer than running it; projected once per message, a test is a boolean
    read."""

    def __init__(self, columns: Mapping[str, Column], types: Mapping[str, frozenset[str]] | None = None):
        super().__init__(columns)
        self.types = types
        self.vals: dict[str, Val] = {}
        self.tests: dict[str, Column] = {}
        self._names: dict[tuple[str, frozenset[str]], str] = {}

    @classmethod
    def over(
        cls, frame: Any, names: Iterable[str], types: Mapping[str, frozenset[str]] | None = None
    ) -> tuple[Any, "PropertyCells"]:
        """``frame`` with ``props[name]`` looked up once per message for each of ``names``
        (folded by ``names.name_key``), and the cells that refer to those lookups.

        ``types``: the type tags each property has somewhere in ``frame`` (a name not in it is
        never present); the filters are then translated for those types only. None = any type."""
        ordered = sorted(set(names))
        lookups = (F.try_element_at(F.col(PROPS), F.lit(name)).alias(f"_p{i}") for i, name in enumerate(ordered))
        return frame.select("*", *lookups), cls({name: F.col(f"_p{i}") for i, name in enumerate(ordered)}, types)

    def val(self, key: str) -> Val:
        if key not in self.vals:
            cell = _cell_value(self[key])
            if self.types is not None:
                tags = frozenset(self.types.get(key, ())) | {MISSING_TAG}
                if not tags <= USER_TAGS:
                    others = ", ".join(sorted(tags - USER_TAGS))
                    raise Untranslatable(f"property {key!r} holds {others} values, which have no Spark translation")
                cell = replace(cell, tags=tags)
            self.vals[key] = replace(cell, test=lambda wanted: self._test(key, cell.tag, wanted))
        return self.vals[key]

    def _test(self, key: str, tag: Column, wanted: frozenset[str]) -> Column:
        name = self._names.get((key, wanted))
        if name is None:
            name = self._names[(key, wanted)] = f"_is{len(self.tests)}"
            self.tests[name] = _tag_test(self[key], tag, self.vals[key].tags, wanted)
        return F.col(name)

    def with_tests(self, frame: Any) -> Any:
        """``frame`` with the tag tests the translated filters refer to."""
        return frame.select("*", *(test.alias(name) for name, test in self.tests.items())) if self.tests else frame


#: Struct field → the tags whose values set it (``s``: every non-null value, as text).
_SET_BY = {
    name: frozenset(t for t, f in VALUE_FIELD.items() if f == name or name == "s") for name in dict.fromkeys(VALUE_FIELD.values())
}


def _tag_test(cell: Column, tag: Column, possible: frozenset[str], wanted: frozenset[str]) -> Column:
    """Whether ``cell`` (one of the ``possible`` tags) has a ``wanted`` tag: a null check of the
    cell or of one typed field where that tells them apart, which is cheaper per message than
    reading and comparing the tag's text."""
    if possible & {MISSING_TAG} == wanted:
        return cell.isNull()
    if possible - {MISSING_TAG} == wanted:
        return cell.isNotNull()
    for name, tags in _SET_BY.items():
        if possible & tags == wanted:
            return cell.getField(name).isNotNull()
        if possible - tags == wanted:
            return cell.getField(name).isNull()
    return tag.isin(*sorted(wanted))


def cell_column(name: str, cells: Cells | None) -> Column:
    """The cell (NULL when missing) of the user property ``name``: pre-computed, or read from ``props``."""
    key = name_key(name)
    if cells is not None and key in cells:
        return cells[key]
    return F.try_element_at(F.col(PROPS), F.lit(key))


def user_property(name: str, cells: Cells | None = None) -> Val:
    """``props[name_key(name)]``: a NULL struct is a missing property (tag :data:`MISSING_TAG`)."""
    key = name_key(name)
    if isinstance(cells, PropertyCells) and key in cells:
        return cells.val(key)
    return _cell_value(cell_column(name, cells))


def system_property(name: str) -> Val:
    """A typed system-property column; NULL there is a real null (system properties always exist)."""
    column = F.col(SYS_COLUMNS[name])
    vtype = SYSTEM_PROPERTIES[name].value
    tag = F.when(column.isNull(), F.lit("null")).otherwise(F.lit(vtype))
    tags = frozenset({"null", vtype})
    # Of two tags a test wants exactly one (is_ decides the others statically): a null check.
    val = functools.partial(Val, tags, tag, test=lambda wanted: column.isNull() if "null" in wanted else column.isNotNull())
    if vtype in ("string", "uuid"):
        return val(s=column, text=F.coalesce(column, F.lit("")))
    if vtype in ("long", "int"):
        return val(l=column.cast("bigint"), text=F.coalesce(column.cast("string"), F.lit("")))
    if vtype == "double":
        return val(d=column)
    if vtype == "bool":
        return val(b=column)
    return val(l=F.unix_micros(column))


def dynamic_property(name: Val, cells: Cells | None = None) -> Val:
    """``property(expr)``: the user property named by a computed string (error if not a string).

    It may name any property, so its value has any type the sample holds (every type without one);
    a sample holding a type without a native translation makes the filter :class:`Untranslatable`."""
    tags = USER_TAGS
    if isinstance(cells, PropertyCells) and cells.types is not None:
        tags = frozenset().union(*cells.types.values()) | {MISSING_TAG}
        if not tags <= USER_TAGS:
            others = ", ".join(sorted(tags - USER_TAGS))
            raise Untranslatable(f"property() may read {others} values, which have no Spark translation")
    folded = F.translate(name.s, *key_translation()) if name.s is not None else F.lit(None).cast("string")
    found = _lookup(folded)
    bad = name.is_(USER_TAGS - STRINGS)
    err = only_when(bad, F.concat(F.lit("property() needs a string, got "), name.tag_col()))
    return Val(tags, found.tag, found.s, found.l, found.d, found.b, first_error(name.err, err), depth=1)
