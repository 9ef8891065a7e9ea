"""Long chains stay shallow: balanced AND / OR and outcome masks give the Python evaluator's
results, and what a report builds fits in a Spark Connect plan (whose client refuses protobuf
messages nested more than 100 levels deep)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from reconciler.model import Message, Rule, SqlFilter, TypedValue
from reconciler.sql import matches, parse_filter
from reconciler.traffic.spark.depth import MAX_OPERATOR_NESTING, balanced, operator_nesting

#: Twelve comparisons; on each message every property is 1, 2, missing or a string (an error).
OPERATORS = ["=", "<>", "<", "<=", ">", ">="]
ATOMS = [f"p{k} {OPERATORS[k % 6]} 1" for k in range(12)]
STATES = [TypedValue("long", 1), TypedValue("long", 2), None, TypedValue("string", "x")]


@pytest.mark.unit
def test_balanced_keeps_the_order_and_nests_log2_deep():
    assert balanced(lambda a, b: f"({a}{b})", "abcde") == "(((ab)(cd))e)"
    assert balanced(lambda a, b: f"({a}{b})", ["x"]) == "x"
    assert balanced(lambda a, b: max(a, b) + 1, [0] * 2000) == 11
    with pytest.raises(ValueError):
        balanced(lambda a, b: a, [])


@pytest.mark.unit
def test_operator_nesting_counts_each_link_of_a_chain_and_not_and_or():
    assert operator_nesting(parse_filter("a = 1")) == 1
    assert operator_nesting(parse_filter("a + b + c > 1 AND (x = 1 OR NOT y LIKE 'z%')")) == 3
    assert operator_nesting(parse_filter("-(a * (b - 1)) IN (1, 2)")) == 4
    assert operator_nesting(parse_filter("+".join(["q"] * 500) + ">0")) == 500
    assert MAX_OPERATOR_NESTING < 14  # the deepest chain measured to resolve for every property type


def _messages(count: int, seed: int) -> list[Message]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        user = {f"p{k}": state for k in range(12) if (state := rng.choice(STATES)) is not None}
        out.append(Message(sys={"MessageId": TypedValue("string", f"m{i}")}, user=user))
    return out


def _chains(seed: int) -> list[str]:
    """AND and OR chains of 2-12 operands, and chains of chains, in shuffled operand orders."""
    rng = random.Random(seed)
    out = []
    for n in (2, 3, 5, 8, 12):
        for joiner in (" AND ", " OR "):
            out.append(joiner.join(rng.sample(ATOMS, n)))
    for outer, inner in ((" OR ", " AND "), (" AND ", " OR ")):
        atoms = rng.sample(ATOMS, 12)
        groups = [atoms[0:3], atoms[3:4], atoms[4:9], atoms[9:12]]
        out.append(outer.join("(" + inner.join(g) + ")" for g in groups))
    out.append("NOT (" + " OR ".join(rng.sample(ATOMS, 7)) + ")")
    return out


@pytest.mark.spark
def test_long_and_or_chains_agree_with_python_evaluator(interpreted, frame_of):
    """TRUE, FALSE, UNKNOWN and errors at every position of a chain: an error counts only when no
    earlier operand decided the result, whatever the grouping of the Spark expression."""
    from pyspark.sql import functions as F

    from reconciler.sql import parse_filter
    from reconciler.traffic.sample.footers import property_types
    from reconciler.traffic.spark import PropertyCells, to_spark

    messages = _messages(100, seed=3)
    filters = _chains(seed=4)
    frame = frame_of(messages)
    frame, cells = PropertyCells.over(frame, [f"p{k}" for k in range(12)], property_types(frame))
    outcomes = [F.struct(p.alias("v"), e.alias("e")) for p, e in (to_spark(parse_filter(text), cells) for text in filters)]
    rows = cells.with_tests(frame).select("idx", F.array(*outcomes).alias("r")).collect()
    assert len(rows) == len(messages)
    mismatches = []
    labels = set()
    for row in rows:
        message = messages[row["idx"]]
        for text, cell in zip(filters, row["r"]):
            want = matches(Rule("r", SqlFilter(text)), message).label
            got = "error" if cell["e"] is not None else {True: "true", False: "false", None: "unknown"}[cell["v"]]
            labels.add(want)
            if want != got:
                mismatches.append(f"{text!r} on {message.to_json()}: python {want}, spark {got}")
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:15])
    assert labels == {"true", "false", "unknown", "error"}


@pytest.mark.spark
def test_a_report_of_more_filters_than_a_mask_word_counts_each_one(interpreted, tmp_path):
    """64 distinct filters: two mask words of the grouping query; every rule's counts and the
    subscription's are the Python evaluator's."""
    from reconciler.traffic.analysis.impact import Scope, _evaluate
    from reconciler.traffic.sample.rows import message_to_row
    from reconciler.traffic.sample.sampler import Dataset

    messages = _messages(60, seed=5)
    store = Dataset(tmp_path / "sample")
    for m in messages:
        store.add(message_to_row(m, topic="t", subscription="all"))
    store.flush()
    rng = random.Random(6)
    # The last, never true term keeps the 64 filters distinct (one outcome bit each).
    rules = tuple(Rule(f"r{i}", SqlFilter(" OR ".join(rng.sample(ATOMS, 1 + i % 4)) + f" OR p0 = {i + 10}")) for i in range(64))
    scope = Scope("t", "s", rules, rules[:2], "plan")
    report = _evaluate(interpreted.read.parquet(str(tmp_path / "sample")), [scope]).to_json()
    (sub,) = report["subscriptions"]
    for rule, entry in zip(rules, sub["rules"]):
        outcomes = [matches(rule, m) for m in messages]
        assert (entry["matched"], entry["errors"]) == (sum(o.matched for o in outcomes), sum(o.error is not None for o in outcomes)), rule
    delivered = [any(matches(r, m).matched for r in rules) for m in messages]
    before = [any(matches(r, m).matched for r in rules[:2]) for m in messages]
    assert sub["delivered"] == sum(delivered) and sub["delivered_before"] == sum(before)
    assert sub["gained"] == sum(d and not b for d, b in zip(delivered, before)) > 0


#: Runs in a Spark Connect client without a server: the columns are built and encoded the way a
#: report sends them, and "carried" is whether the client's protobuf decoder accepts the nesting.
CONNECT_PLANS = r"""
import json
from google.protobuf.message import DecodeError
from pyspark.sql import functions as F
from pyspark.sql.connect.proto import Expression
from reconciler.model import Rule, SqlFilter
from reconciler.traffic.spark import PropertyCells, filter_columns, rule_columns
from reconciler.traffic.spark.algebra import MISSING_TAG, USER_TAGS
from reconciler.traffic.spark.depth import CONNECT_MAX_NESTING, nesting
from reconciler.traffic.spark.tally import OUTCOME_NESTING, _mask

def carried(column):
    holder = Expression()
    try:
        holder.unresolved_function.arguments.extend([column._expr.to_plan(None)])
        return True
    except DecodeError:
        return False

def chain(nodes):
    column = F.col("x")
    for _ in range(nodes - 2):
        column = column + 1
    return column.alias("y")

budget = CONNECT_MAX_NESTING - OUTCOME_NESTING
filters = {
    "or": " OR ".join(f"q={i}" for i in range(100)),
    "in": "q IN (" + ",".join(str(i) for i in range(250)) + ")",
    "and": " AND ".join(f"q<>{i}" for i in range(75)),
    "mixed": " OR ".join(f"(q>{i} AND s LIKE 'a{i}%' AND sys.Label<>'x')" for i in range(20)),
}
out = {"chain": [nesting(chain(n)) == n and carried(chain(n)) for n in (CONNECT_MAX_NESTING, CONNECT_MAX_NESTING + 3)]}
for name, text in filters.items():
    matched, error = filter_columns(SqlFilter(text))
    depth = max(nesting(matched), nesting(error))
    others = [F.lit(True)] * 62  # a mask's depth is its OR tree's and its deepest term's
    masks = [_mask(F, [matched, *others]).alias("m"), _mask(F, [error.isNotNull(), *others]).alias("e")]
    out[name] = {"length": len(text), "nesting": depth, "budget": budget, "carried": all(carried(m) for m in masks)}
# q may hold every type but float (a computed float's text is never translated: + would need it)
typed = PropertyCells({"q": F.col("q")}, {"q": USER_TAGS - {"float", MISSING_TAG}})
deep = Rule("deep", SqlFilter(" + ".join(["q"] * 8) + " > 0"))
out["deep"] = [rule_columns(deep, typed, max_nesting=budget).fallback, rule_columns(deep, typed).fallback]
deepest = Rule("deepest", SqlFilter(" + ".join(["q"] * 30) + " > 0"))
out["deepest"] = [rule_columns(deepest, max_nesting=budget).fallback, rule_columns(deepest).fallback]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_what_a_report_builds_fits_a_spark_connect_plan():
    """The filters are translated for any property type (the deepest translation), at up to the
    1,024-character limit, then put under 63-bit outcome masks as the report's query does."""
    env = {"SPARK_CONNECT_MODE_ENABLED": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", CONNECT_PLANS], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # The client's limit is real, and the budget sits below it.
    assert out["chain"] == [True, False]
    for name in ("or", "in", "and", "mixed"):
        entry = out[name]
        assert 700 < entry["length"] <= 1024, (name, entry)
        assert entry["nesting"] <= entry["budget"] and entry["carried"], (name, entry)
    # A filter nested by hand deeper than the budget is evaluated by the Python UDF over Spark
    # Connect, and natively elsewhere.
    connect, local = out["deep"]
    assert "Spark Connect" in connect and local is None
    # Deeper than Spark's analyzer resolves: the Python UDF in any session, decided before building.
    assert all("analyzer" in reason for reason in out["deepest"])
