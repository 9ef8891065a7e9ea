"""Differential fuzzing: generated filters × generated messages, Spark translation vs Python evaluator.

Each example is a batch (many filters, many messages) evaluated in one interpreted Spark job, so
a few examples cover a few hundred filters and thousands of (filter, message) pairs.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reconciler.model import Message, Rule, SqlFilter, TypedValue
from reconciler.sql import SqlError, matches, parse_filter

pytestmark = pytest.mark.spark

INTS = [0, 1, -1, 2, 3, 7, 10, -7, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
DOUBLES = [0.0, -0.0, 0.1, 1.5, -2.5, 2.0, 1e20, 1e-7, 1e15, 123456.789, float("nan"), float("inf"), float("-inf")]
STRINGS = ["", "a", "A", "ab", "a%b", "it's", "x_y", "1", "True", "é", "a\nb", "ab\n", "\U0001F600", "\U0001F600x"]
NAMES = ["a", "b", "c"]

# -- filters -------------------------------------------------------------------------------------

def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _double_literal(value: float) -> str:
    text = repr(value)
    return text if "e" in text or "." in text else text + ".0"


literals = st.one_of(
    st.sampled_from([str(i) for i in INTS]),
    st.sampled_from([_double_literal(d) for d in DOUBLES if d == d and abs(d) != float("inf")]),
    st.sampled_from([_quote(s) for s in STRINGS]),
    st.sampled_from(["TRUE", "FALSE", "NULL"]),
)
properties = st.sampled_from(
    NAMES + ["A", "[b]", "user.c", "sys.Label", "sys.SequenceNumber", "sys.EnqueuedTimeUtc", "sys.DeliveryCount", "sys.ReplyTo"]
)
leaves = st.one_of(literals, properties, st.sampled_from(["property('a')", "p('B')"]))


def _expressions(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(["+", "-", "*", "/", "%"]), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda e: f"-({e})"),
    )


expressions = st.recursive(leaves, _expressions, max_leaves=4)
patterns = st.sampled_from(["a%", "%", "_", "__", "a_b", "%a%", "1%", "T%", "!%%", "a!_", "", "\U0001F600", "_\U0001F600", "é_", "%b"])

comparison = st.tuples(expressions, st.sampled_from(["=", "<>", "!=", "<", "<=", ">", ">="]), expressions).map(" ".join)
like = st.tuples(expressions, st.booleans(), patterns, st.booleans()).map(
    lambda t: f"{t[0]} {'NOT ' if t[1] else ''}LIKE {_quote(t[2])}{' ESCAPE ' + _quote('!') if t[3] else ''}"
)
in_list = st.tuples(expressions, st.booleans(), st.lists(expressions, min_size=1, max_size=4)).map(
    lambda t: f"{t[0]} {'NOT ' if t[1] else ''}IN ({', '.join(t[2])})"
)
null_checks = st.tuples(properties, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join)
exists = properties.map(lambda p: f"EXISTS({p})")
atoms = st.one_of(comparison, comparison, like, in_list, null_checks, exists)


def _predicates(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(["AND", "OR"]), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda p: f"NOT {p}"),
    )


predicates = st.recursive(atoms, _predicates, max_leaves=4)

# -- messages ------------------------------------------------------------------------------------

#: Value families; a batch gives each property name one to three of them, as producers keep a
#: property's type mostly stable (which the report's type-pruned translation relies on).
FAMILIES = [
    st.sampled_from(STRINGS).map(lambda s: TypedValue("string", s)),
    st.sampled_from(INTS).map(lambda i: TypedValue("long", i)),
    st.sampled_from([i for i in INTS if -(2**31) <= i < 2**31]).map(lambda i: TypedValue("int", i)),
    st.sampled_from(DOUBLES).map(lambda d: TypedValue("double", d)),
    st.booleans().map(lambda b: TypedValue("bool", b)),
    st.just(TypedValue("null")),
    st.sampled_from([uuid.UUID(int=1), uuid.UUID(int=2)]).map(lambda u: TypedValue("uuid", u)),
    st.sampled_from([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(1999, 12, 31, 23, 59, 59, 500000, tzinfo=dt.timezone.utc)]).map(
        lambda t: TypedValue("timestamp", t)
    ),
]


@st.composite
def messages(draw, kinds):
    user = {}
    for name in NAMES:
        if draw(st.booleans()):
            user[draw(st.sampled_from([name, name.upper()]))] = draw(kinds[name])
    sys_props = {"SequenceNumber": TypedValue("long", draw(st.sampled_from([1, 7, 2**63 - 1])))}
    label = draw(st.one_of(st.none(), st.sampled_from(STRINGS)))
    if label is not None:
        sys_props["Label"] = TypedValue("string", label)
    if draw(st.booleans()):
        sys_props["EnqueuedTimeUtc"] = TypedValue("timestamp", dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    sys_props["DeliveryCount"] = TypedValue("int", draw(st.sampled_from([0, 2**31 - 1])))
    return Message(sys=sys_props, user=user)


@st.composite
def batches(draw):
    kinds = {name: st.one_of(*draw(st.lists(st.sampled_from(FAMILIES), min_size=1, max_size=3))) for name in NAMES}
    return draw(st.lists(messages(kinds), min_size=25, max_size=25))


@settings(
    max_examples=2,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure lists each differing pair
    suppress_health_check=list(HealthCheck),
)
@given(filters=st.lists(predicates, min_size=50, max_size=50), batch=batches())
def test_generated_filters_agree_with_python_evaluator(interpreted, frame_of, filters, batch):
    """Half the filters are translated for any type (``to_spark`` alone), half the report's way:
    property cells translated for the types the batch's properties have."""
    from pyspark.sql import functions as F

    from reconciler.traffic.sample.footers import property_types
    from reconciler.traffic.spark import PropertyCells, Untranslatable, property_names, to_spark

    frame = frame_of(batch)
    names = {n for text in filters for n in property_names(SqlFilter(text))}
    frame, cells = PropertyCells.over(frame, names, property_types(frame))
    accepted, columns = [], []
    for text in filters:
        try:
            node = parse_filter(text)
        except SqlError:
            continue
        try:
            pred, err = to_spark(node, cells if len(accepted) % 2 else None)
        except Untranslatable as exc:  # the report's Python UDF evaluates it
            assert "computed float" in str(exc), text
            continue
        accepted.append(text)
        columns.append(F.struct(pred.alias("v"), err.alias("e")))
    assert len(accepted) > len(filters) // 2
    rows = cells.with_tests(frame).select("idx", F.array(*columns).alias("r")).collect()
    mismatches = []
    for row in rows:
        message = batch[row["idx"]]
        for n, (text, cell) in enumerate(zip(accepted, row["r"])):
            want = matches(Rule("r", SqlFilter(text)), message).label
            got = "error" if cell["e"] is not None else {True: "true", False: "false", None: "unknown"}[cell["v"]]
            if want != got:
                how = "type-pruned" if n % 2 else "any type"
                mismatches.append(f"{text!r} ({how}) on {message.to_json()}: python {want}, spark {got}")
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:15])


def test_a_computed_property_name_is_folded_as_the_service_folds_names(interpreted, frame_of):
    """``property(expr)`` finds a property whatever the case of its name, by the service's rules
    (.NET's simple upper-casing), not Spark's ``lower``: 'GRÖßE' is 'Größe', the Kelvin sign is not 'k'."""

    from reconciler.traffic.spark import PropertyCells, to_spark

    def message(name: str, label: str) -> Message:
        return Message(sys={"Label": TypedValue("string", label)}, user={name: TypedValue("long", 1)})

    batch = [message("Größe", "GRÖßE"), message("Größe", "größe"), message("\u212a", "k"), message("\u212a", "\u212a")]
    text = "property(sys.Label) = 1"  # the name is computed per message: folded in Spark, not in Python
    frame, cells = PropertyCells.over(frame_of(batch), set(), None)
    pred, err = to_spark(parse_filter(text), None)
    rows = cells.with_tests(frame).select("idx", pred.alias("v"), err.alias("e")).collect()
    got = {row["idx"]: "error" if row["e"] is not None else {True: "true", False: "false", None: "unknown"}[row["v"]]
           for row in rows}
    want = {i: matches(Rule("r", SqlFilter(text)), m).label for i, m in enumerate(batch)}
    assert want == {0: "true", 1: "true", 2: "unknown", 3: "true"}
    assert got == want
