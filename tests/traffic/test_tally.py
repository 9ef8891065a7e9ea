"""The fold of outcome groups: answers of any split of the groups, merged in any order, are the
answers of all of them, and the driver receives one row of answers per partition, not the groups."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from reconciler.traffic import tally as tally_module
from reconciler.traffic.tally import BITS, Answers, Question, Tally, _Fold

FILTERS = 130  # three words of bits


def _groups(rng: random.Random, n: int) -> Tally:
    words = (FILTERS + BITS - 1) // BITS

    def masks() -> np.ndarray:
        out = np.zeros((n, words), dtype=np.int64)
        for row in range(n):
            for bit in rng.sample(range(FILTERS), rng.randint(0, 6)):
                out[row, bit // BITS] |= np.int64(1) << np.int64(bit % BITS)
        return out

    def hashes() -> np.ndarray:
        return np.array([rng.randint(-(2**63), 2**63 - 1) for _ in range(n)], dtype=np.int64)

    times = np.array([rng.randint(0, 10**12) for _ in range(n)], dtype=np.int64)
    return Tally(
        topic=np.array([rng.choice(["a", "b"]) for _ in range(n)], dtype=object),
        matched=masks(),
        errors=masks(),
        count=np.array([rng.randint(1, 50) for _ in range(n)], dtype=np.int64),
        low=hashes(),
        high=hashes(),
        pick=hashes(),
        pick_order=np.array([rng.randint(-5, 5) for _ in range(n)], dtype=np.int64),  # ties on purpose
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
    for name in ("count", "low", "high", "pick", "pick_order", "first", "last"):
        columns[name] = pa.array(getattr(groups, name))
    return pa.RecordBatch.from_pydict(columns)


def _same(a: Answers, b: Answers) -> None:
    for name in ("count", "low", "high", "pick_order", "pick"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    assert (a.first, a.last) == (b.first, b.last)


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
            assert whole.examples(question) <= set(groups.low[selected]) | set(groups.high[selected]) | set(groups.pick[selected])


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

    from reconciler.traffic.tally import tally

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
