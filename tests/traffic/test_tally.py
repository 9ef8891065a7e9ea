"""The fold of outcome groups: answers of any split of the groups, merged in any order, are the
answers of all of them, and the driver receives one row of answers per partition, not the groups."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.traffic.spark import tally as tally_module
from reconciler.traffic.spark.tally import BITS, EXAMPLES, Answers, Question, Tally, _Fold

FILTERS = 130  # three words of bits
SHARED = [-5, 0, 7]  # hashes several groups hold (an id in two topics, or the same id sent twice)


def _groups(rng: random.Random, n: int) -> Tally:
    words = (FILTERS + BITS - 1) // BITS

    def masks() -> np.ndarray:
        out = np.zeros((n, words), dtype=np.int64)
        for row in range(n):
            for bit in rng.sample(range(FILTERS), rng.randint(0, 6)):
                out[row, bit // BITS] |= np.int64(1) << np.int64(bit % BITS)
        return out

    def hashes() -> np.ndarray:
        """Each group's smallest id hashes as Spark gives them: ascending, repeats of an id
        included, fewer than three in a small group (padded); a few shared between groups."""
        out = np.full((n, EXAMPLES), np.iinfo(np.int64).max, dtype=np.int64)
        for row in range(n):
            found = sorted(rng.choice(SHARED) if rng.random() < 0.2 else rng.randint(-(2**62), 2**62) for _ in range(rng.randint(1, 3)))
            if rng.random() < 0.2:
                found = [found[0]] * len(found)
            out[row, : len(found)] = found
        return out

    times = np.array([rng.randint(0, 10**12) for _ in range(n)], dtype=np.int64)
    return Tally(
        topic=np.array([rng.choice(["a", "b"]) for _ in range(n)], dtype=object),
        matched=masks(),
        errors=masks(),
        count=np.array([rng.randint(1, 50) for _ in range(n)], dtype=np.int64),
        hashes=hashes(),
        first=times,
        last=times + 1000,
    )


def _questions(rng: random.Random) -> list[Question]:
    def bits() -> frozenset[int]:
        return frozenset(rng.sample(range(FILTERS), rng.randint(0, 8)))

    out = [Question(), Question("a", examples=True)]
    for _ in range(60):
        out.append(
            Question(
                rng.choice([None, "a", "b"]),
                matched=rng.choice([None, bits()]),
                unmatched=bits() if rng.random() < 0.5 else frozenset(),
                failed=rng.choice([None, bits()]),
                examples=rng.random() < 0.5,
            )
        )
    return list(dict.fromkeys(out))


def _rows(groups: Tally, rows: np.ndarray) -> Tally:
    return Tally(**{name: getattr(groups, name)[rows] for name in Tally.__dataclass_fields__})


def _as_batch(groups: Tally) -> pa.RecordBatch:
    columns = {"topic": pa.array(groups.topic, pa.string())}
    for w in range(groups.matched.shape[1]):
        columns[f"m{w}"], columns[f"e{w}"] = pa.array(groups.matched[:, w]), pa.array(groups.errors[:, w])
    for name in ("count", "first", "last"):
        columns[name] = pa.array(getattr(groups, name))
    columns["hashes"] = pa.array([[h for h in row if h != np.iinfo(np.int64).max] for row in groups.hashes.tolist()])
    return pa.RecordBatch.from_pydict(columns)


def _same(a: Answers, b: Answers) -> None:
    for name in ("count", "hashes"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    assert (a.first, a.last) == (b.first, b.last)
    assert a.spans == b.spans


@pytest.mark.unit
@pytest.mark.parametrize("seed", range(5))
def test_answers_of_parts_merged_in_any_order_are_the_answers_of_all(seed):
    rng = random.Random(seed)
    groups, questions = _groups(rng, 400), _questions(rng)
    whole = Answers.of(questions, groups)
    order = np.array(rng.sample(range(400), 400))
    parts = [Answers.of(questions, _rows(groups, rows)) for rows in np.array_split(order, rng.randint(2, 9))]
    rng.shuffle(parts)
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    _same(merged, whole)
    table = pa.Table.from_batches([part.to_arrow() for part in parts])
    _same(Answers.from_arrow(questions, table), whole)
    # What a report reads of them: the counts, and examples of the groups each question selects.
    for question in questions:
        in_topic = np.ones(len(groups.count), dtype=bool) if question.topic is None else groups.topic == question.topic
        selected = question.select(groups, in_topic)
        assert whole.total(question) == groups.count[selected].sum()
        if question.examples and selected.any():
            shown = whole.examples(question)
            found = set(groups.hashes[selected].ravel().tolist()) - {np.iinfo(np.int64).max}
            assert shown == set(sorted(found)[:3])  # the three smallest distinct, or all when fewer


@pytest.mark.unit
def test_an_executor_folds_its_batches_in_bounded_chunks_into_one_row(monkeypatch):
    rng = random.Random(9)
    groups, questions = _groups(rng, 300), _questions(rng)
    monkeypatch.setattr(tally_module, "FOLD_CHUNK", 64)
    folded = []
    original = Answers.of

    def spy(questions, chunk, breakdown=()):
        folded.append(len(chunk.count))
        return original(questions, chunk, breakdown)

    monkeypatch.setattr(Answers, "of", staticmethod(spy))
    batches = [_as_batch(_rows(groups, rows)) for rows in np.array_split(np.arange(300), 10)]
    (row,) = list(_Fold(tuple(questions), groups.matched.shape[1])(iter(batches)))
    assert max(folded) < 64 + 30 and sum(folded) == 300
    monkeypatch.setattr(Answers, "of", staticmethod(original))
    _same(Answers.from_arrow(questions, pa.Table.from_batches([row])), Answers.of(questions, groups))


@pytest.mark.spark
def test_the_driver_receives_one_row_of_answers_per_partition_not_the_groups(spark, monkeypatch):
    """16,384 distinct outcome combinations over two shuffle partitions: at most two rows reach the driver."""
    from pyspark.sql import functions as F

    from reconciler.traffic.spark.tally import tally

    received = []
    original = Answers.from_arrow.__func__

    def spy(cls, questions, table):
        received.append(table.num_rows)
        return original(cls, questions, table)

    monkeypatch.setattr(Answers, "from_arrow", classmethod(spy))
    bits = 14
    frame = spark.range(40_000).select(F.col("id"), F.lit("t").alias("topic"), F.col("id").cast("string").alias("mid"))
    outcomes = [(F.col("id").bitwiseAND(1 << k) != 0, F.when(F.col("id") % 7 == k, F.lit("boom"))) for k in range(bits)]
    questions = [Question("t", matched=frozenset({k})) for k in range(bits)]
    questions += [Question("t", failed=frozenset({k})) for k in range(bits)]
    questions.append(Question("t", matched=frozenset({0}), unmatched=frozenset({1}), examples=True))
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    coalesce = spark.conf.get("spark.sql.adaptive.coalescePartitions.enabled")
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")  # one row per shuffle partition, exactly
    try:
        answers = tally(frame, F.col("topic"), F.col("mid"), outcomes, questions)
    finally:
        spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", coalesce)
    (rows,) = received
    assert rows == partitions == 2
    ids = range(40_000)
    for k in range(bits):
        assert answers.total(questions[k]) == sum(1 for i in ids if i >> k & 1)
        assert answers.total(questions[bits + k]) == sum(1 for i in ids if i % 7 == k)
    assert answers.total(questions[-1]) == sum(1 for i in ids if i & 1 and not i & 2)
    assert len(answers.examples(questions[-1])) == 3


@pytest.mark.spark
@pytest.mark.slow
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 40), max_size=9)), min_size=1, max_size=6))
def test_examples_are_three_distinct_ids_whenever_three_exist(spark, groups):
    """Messages in outcome groups (the bits of ``group``), some ids sent more than once: a
    question's examples are distinct ids of its messages, min(3, distinct ids) of them when no id
    is repeated (a repeated id takes several of a group's three smallest places)."""
    from pyspark.sql import functions as F

    from reconciler.traffic.spark.tally import tally

    rows = [(f"id-{ident:02d}", bits) for bits, idents in groups for ident in idents]
    if not rows:
        return
    frame = spark.createDataFrame(rows, "mid string, bits int")
    outcomes = [(F.col("bits").bitwiseAND(1 << k) != 0, F.lit(None).cast("string")) for k in range(2)]
    questions = [Question("t", matched=frozenset({0}), examples=True), Question("t", unmatched=frozenset({0, 1}), examples=True)]
    answers = tally(frame, F.lit("t"), F.col("mid"), outcomes, questions)
    hash_of = {h: mid for mid, h in frame.select("mid", F.xxhash64("mid")).distinct().collect()}
    for question, wanted in zip(questions, (lambda b: b & 1, lambda b: not b & 3)):
        ids = [mid for mid, bits in rows if wanted(bits)]
        shown = [hash_of[h] for h in answers.examples(question)]
        assert len(shown) == len(set(shown)) and set(shown) <= set(ids)
        if len(ids) == len(set(ids)):
            assert len(shown) == min(3, len(ids))
