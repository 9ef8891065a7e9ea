"""Every message's filter outcomes as a few bitmask longs, counted per distinct combination.

A report needs, per filter, how many messages it matches or fails on, and per subscription, how
many messages it gains, loses or fails on. Summing one column per (filter, outcome) makes an
aggregate hundreds of columns wide: Spark then gives up whole-stage code generation and the
generated methods grow too large for the JIT. Instead each message gets one bit per filter in a
*matched* and an *error* mask (63 filters per long), and grouping by (topic, masks) leaves one row
per distinct outcome combination. Example message ids are picked by hash inside the same aggregate
(the three smallest id hashes of each group), as are the first and last enqueued times; a second
query fetches the few example messages by those hashes.

The groups never come to the driver: their number grows with the sample and the rules (82,553 at
1M messages × 50 rules, 442,251 at 200 rules). The report asks a fixed list of
:class:`Question` s (per filter: matches, errors; per subscription: delivered, gained, lost,
failed; per topic: messages, unrouted), and each partition of the groups is folded into
:class:`Answers`, one count and three example hashes per question, on the executors, in chunks of
at most :data:`FOLD_CHUNK` groups. The driver receives one :class:`Answers` per partition of the
grouping (at most ``spark.sql.shuffle.partitions``) and merges them: its memory is bounded by
partitions × questions × 40 bytes, whatever the number of outcome combinations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

BITS = 63
#: Expression nodes the grouping query puts above a filter's matched or error column: the mask's
#: alias, the balanced OR of its terms, the term's CASE, and the error's null test.
OUTCOME_NESTING = 3 + math.ceil(math.log2(BITS))
#: Outcome groups an executor folds at once (Arrow batches are gathered up to this many rows):
#: large enough that numpy's per-call cost vanishes, small enough to bound the executor's memory
#: at a few tens of MB for hundreds of filters.
FOLD_CHUNK = 200_000
_HIGHEST = np.iinfo(np.int64).max
_LOWEST = np.iinfo(np.int64).min
#: Example messages kept per question: the distinct ids with the smallest hashes (int64 max pads).
EXAMPLES = 3


def smallest(values: np.ndarray) -> np.ndarray:
    """The :data:`EXAMPLES` smallest distinct ``values`` (int64 max where fewer), ascending."""
    out = np.full(EXAMPLES, _HIGHEST, dtype=np.int64)
    for i in range(EXAMPLES):
        if not values.size:
            break
        out[i] = values.min()
        values = values[values > out[i]]
    return out


def smallest_per_row(values: np.ndarray) -> np.ndarray:
    """:func:`smallest` of each row of a (rows, n) array, for short rows (merging a few answers)."""
    ordered = np.sort(values, axis=1)
    repeated = np.zeros(ordered.shape, dtype=bool)
    repeated[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    ordered[repeated] = _HIGHEST
    out = np.sort(ordered, axis=1)[:, :EXAMPLES]
    if out.shape[1] < EXAMPLES:
        out = np.hstack([out, np.full((len(out), EXAMPLES - out.shape[1]), _HIGHEST, dtype=np.int64)])
    return out


@dataclass(frozen=True)
class Tally:
    """Grouped outcomes: row ``g`` stands for ``count[g]`` messages of topic ``topic[g]``."""

    topic: np.ndarray
    matched: np.ndarray  # (groups, words) int64
    errors: np.ndarray  # (groups, words) int64
    count: np.ndarray
    hashes: np.ndarray  # (groups, EXAMPLES) int64: the group's smallest id hashes, int64 max pads
    first: np.ndarray  # earliest enqueued time in the group, µs since the epoch (int64 max: none known)
    last: np.ndarray  # latest enqueued time in the group (int64 min: none known)
    #: (groups, breakdown columns) objects: a group's value of each breakdown column where the group
    #: is unrouted, None elsewhere (see :func:`tally`)
    breakdown: np.ndarray = field(default_factory=lambda: np.empty((0, 0), dtype=object))

    def __post_init__(self) -> None:
        if self.breakdown.shape[0] != len(self.count):  # no breakdown columns: one empty row per group
            object.__setattr__(self, "breakdown", np.empty((len(self.count), 0), dtype=object))

    @classmethod
    def from_arrow(cls, table: Any, words: int, breakdown: Sequence[str] = ()) -> "Tally":
        """The grouping query's rows (an Arrow table or batch) as numpy columns."""
        import pyarrow.compute as pc

        def column(name: str, missing: Any = 0) -> np.ndarray:
            return pc.fill_null(table.column(name), missing).to_numpy(zero_copy_only=False)

        return cls(
            topic=column("topic", ""),
            matched=np.stack([column(f"m{w}") for w in range(words)], axis=1).reshape(-1, words),
            errors=np.stack([column(f"e{w}") for w in range(words)], axis=1).reshape(-1, words),
            count=column("count"),
            hashes=_padded(table.column("hashes")),
            first=column("first", _HIGHEST),
            last=column("last", _LOWEST),
            breakdown=_objects([table.column(f"b_{name}").to_pylist() for name in breakdown], table.num_rows),
        )

    def any_bit(self, masks: np.ndarray, indexes: Iterable[int]) -> np.ndarray:
        """Per group: whether any filter of ``indexes`` is set in ``masks``."""
        words: dict[int, int] = {}
        for index in indexes:
            word, offset = divmod(index, BITS)
            words[word] = words.get(word, 0) | (1 << offset)
        out = np.zeros(len(self.count), dtype=bool)
        for word, bits in words.items():
            out |= (masks[:, word] & np.int64(bits)) != 0
        return out


def _padded(lists: Any) -> np.ndarray:
    """A column of lists of at most :data:`EXAMPLES` hashes as a (rows, EXAMPLES) array, int64 max padding."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks() if lists.num_chunks else pa.array([], pa.list_(pa.int64()))
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    out = np.full((len(lengths), EXAMPLES), _HIGHEST, dtype=np.int64)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.cumsum(lengths) - lengths
    columns = np.arange(len(rows)) - np.repeat(starts, lengths)
    out[rows, columns] = pc.list_flatten(lists).to_numpy(zero_copy_only=False)
    return out


def _objects(columns: list[list[Any]], rows: int) -> np.ndarray:
    """Python values in a (rows, columns) object array."""
    out = np.empty((rows, len(columns)), dtype=object)
    for index, values in enumerate(columns):
        out[:, index] = values
    return out


@dataclass(frozen=True)
class Question:
    """How many messages (and, with ``examples``, which) fall in the outcome groups of ``topic``
    (lower case; every topic when None) in which some filter of ``matched`` matched (no condition
    when None), no filter of ``unmatched`` matched, and some filter of ``failed`` failed (no
    condition when None). Filters are bit indexes."""

    topic: str | None = None
    matched: frozenset[int] | None = None
    unmatched: frozenset[int] = frozenset()
    failed: frozenset[int] | None = None
    examples: bool = False

    def select(self, groups: Tally, in_topic: np.ndarray) -> np.ndarray:
        """Per group: whether it falls under this question, given which groups are of its topic."""
        out = in_topic.copy()
        if self.matched is not None:
            out &= groups.any_bit(groups.matched, self.matched)
        if self.unmatched:
            out &= ~groups.any_bit(groups.matched, self.unmatched)
        if self.failed is not None:
            out &= groups.any_bit(groups.errors, self.failed)
        return out


@dataclass
class Answers:
    """Per question: the messages counted and, for questions with examples, the three smallest
    distinct id hashes of its messages (``hashes``, int64 max where fewer), which merge in any
    order: so three example messages whenever three distinct ids are there. Besides, the earliest
    and latest enqueued time of every group (µs; int64 max / min when none is known)."""

    questions: Sequence[Question]
    count: np.ndarray
    hashes: np.ndarray  # (questions, EXAMPLES) int64
    first: int = _HIGHEST
    last: int = _LOWEST
    #: unrouted messages counted by (breakdown name, topic, value): the producers behind a routing gap
    breakdown: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: per topic: its earliest and latest known enqueued time (µs), as ``first`` and ``last`` are of all
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    _index: dict[Question, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._index = {question: i for i, question in enumerate(self.questions)}

    @classmethod
    def none(cls, questions: Sequence[Question]) -> "Answers":
        """The answers of no groups at all."""
        n = len(questions)
        return cls(questions, np.zeros(n, dtype=np.int64), np.full((n, EXAMPLES), _HIGHEST, dtype=np.int64))

    @classmethod
    def of(cls, questions: Sequence[Question], groups: Tally, breakdown: Sequence[str] = ()) -> "Answers":
        """The answers of one chunk of groups (``breakdown``: the names of its breakdown columns)."""
        out = cls.none(questions)
        if not len(groups.count):
            return out
        out.first, out.last = int(groups.first.min()), int(groups.last.max())
        for topic in np.unique(groups.topic):
            here = groups.topic == topic
            out.spans[str(topic)] = (int(groups.first[here].min()), int(groups.last[here].max()))
        for column, name in enumerate(breakdown):
            found = groups.breakdown[:, column]
            for row in np.flatnonzero(np.array([value is not None for value in found], dtype=bool)):
                key = (name, str(groups.topic[row]), str(found[row]))
                out.breakdown[key] = out.breakdown.get(key, 0) + int(groups.count[row])
        # A report asks several questions per topic: compare the topic strings once per topic.
        in_topic = {
            topic: np.ones(len(groups.count), dtype=bool) if topic is None else groups.topic == topic
            for topic in {question.topic for question in questions}
        }
        for i, question in enumerate(questions):
            selected = question.select(groups, in_topic[question.topic])
            out.count[i] = groups.count[selected].sum()
            if question.examples and out.count[i]:
                out.hashes[i] = smallest(groups.hashes[selected].ravel())
        return out

    def merge(self, other: "Answers") -> "Answers":
        """The answers of both sets of groups (disjoint, as the grouping's partitions are)."""
        return Answers(
            self.questions,
            self.count + other.count,
            smallest_per_row(np.hstack([self.hashes, other.hashes])),
            min(self.first, other.first),
            max(self.last, other.last),
            _summed(self.breakdown, other.breakdown),
            _spanned(self.spans, other.spans),
        )

    def total(self, question: Question) -> int:
        return int(self.count[self._index[question]])

    def examples(self, *questions: Question) -> set[int]:
        """The three smallest distinct id hashes of the messages of ``questions`` (disjoint groups,
        together), fewer only when there are fewer distinct ids."""
        rows = [self._index[q] for q in questions if self.count[self._index[q]]]
        return {int(h) for h in smallest(self.hashes[rows].ravel()) if h != _HIGHEST}

    def time_range(self, topic: str | None = None) -> tuple[int | None, int | None]:
        """The earliest and latest known enqueued time (µs since the epoch), of ``topic`` (lower
        case) when given, else of every message."""
        first, last = (self.first, self.last) if topic is None else self.spans.get(topic, (_HIGHEST, _LOWEST))
        return (None if first == _HIGHEST else first, None if last == _LOWEST else last)

    # -- as Arrow, to travel from the executors ---------------------------------------------------
    _ARRAYS = ("count", "hashes")

    def to_arrow(self) -> Any:
        import pyarrow as pa

        arrays = [pa.array([getattr(self, name).ravel()], type=pa.list_(pa.int64())) for name in self._ARRAYS]
        arrays += [pa.array([self.first], pa.int64()), pa.array([self.last], pa.int64())]
        pairs = [("\x1f".join(key), count) for key, count in sorted(self.breakdown.items())]
        arrays.append(pa.array([pairs], type=pa.map_(pa.string(), pa.int64())))
        for side in range(2):
            spans = [(topic, span[side]) for topic, span in sorted(self.spans.items())]
            arrays.append(pa.array([spans], type=pa.map_(pa.string(), pa.int64())))
        return pa.RecordBatch.from_arrays(arrays, names=[*self._ARRAYS, "first", "last", "breakdown", "firsts", "lasts"])

    @classmethod
    def from_arrow(cls, questions: Sequence[Question], table: Any) -> "Answers":
        """The answers of all the groups from a table of partial answers (:meth:`to_arrow` rows)."""
        import pyarrow.compute as pc

        if not table.num_rows:
            return cls.none(questions)
        rows, n = table.num_rows, len(questions)
        count = pc.list_flatten(table.column("count")).to_numpy().astype(np.int64).reshape(rows, n)
        hashes = pc.list_flatten(table.column("hashes")).to_numpy().astype(np.int64).reshape(rows, n, EXAMPLES)
        return cls(
            questions,
            count.sum(axis=0),
            smallest_per_row(hashes.transpose(1, 0, 2).reshape(n, rows * EXAMPLES)),
            int(pc.min(table.column("first")).as_py()),
            int(pc.max(table.column("last")).as_py()),
            _summed(*({tuple(k.split("\x1f", 2)): v for k, v in part or ()} for part in table.column("breakdown").to_pylist())),
            _spanned(*(
                {topic: (first, dict(lasts or ())[topic]) for topic, first in firsts or ()}
                for firsts, lasts in zip(table.column("firsts").to_pylist(), table.column("lasts").to_pylist())
            )),
        )


def _summed(*parts: dict[Any, int]) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for part in parts:
        for key, count in part.items():
            out[key] = out.get(key, 0) + count
    return out


def _spanned(*parts: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Per topic: the earliest first and the latest last of ``parts``."""
    out: dict[str, tuple[int, int]] = {}
    for part in parts:
        for topic, (first, last) in part.items():
            seen = out.get(topic, (_HIGHEST, _LOWEST))
            out[topic] = (min(seen[0], first), max(seen[1], last))
    return out


ANSWERS_SCHEMA = (
    "count array<bigint>, hashes array<bigint>, first bigint, last bigint, breakdown map<string,bigint>, "
    "firsts map<string,bigint>, lasts map<string,bigint>"
)


@dataclass(frozen=True)
class _Fold:
    """What each task of the grouping runs on the executors: its groups, in chunks of at most
    :data:`FOLD_CHUNK`, into one row of :class:`Answers`."""

    questions: tuple[Question, ...]
    words: int
    breakdown: tuple[str, ...] = ()

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        answers: Answers | None = None
        pending: list[Any] = []
        rows = 0

        def fold(answers: Answers | None) -> Answers:
            groups = Tally.from_arrow(pa.Table.from_batches(pending), self.words, self.breakdown)
            chunk = Answers.of(self.questions, groups, self.breakdown)
            return chunk if answers is None else answers.merge(chunk)

        for batch in batches:
            pending.append(batch)
            rows += batch.num_rows
            if rows >= FOLD_CHUNK:
                answers, pending, rows = fold(answers), [], 0
        if pending:
            answers = fold(answers)
        if answers is not None:
            yield answers.to_arrow()


def start_worker(batches: Iterator[Any]) -> Iterator[Any]:
    """A fold with nothing to answer: the Python worker that runs it has imported this module
    (see :func:`reconciler.traffic.spark.executors.start_local_workers`)."""
    for _ in batches:
        pass
    return iter(())


def _mask(F: Any, conditions: Sequence[Any]) -> Any:
    """One bit per condition, OR-ed as a balanced tree (shallow enough for Spark Connect)."""
    from reconciler.traffic.spark.depth import balanced

    zero = F.lit(0).cast("bigint")
    if not conditions:
        return zero
    bits = (F.when(cond, F.lit(1 << offset)).otherwise(zero) for offset, cond in enumerate(conditions))
    return balanced(lambda a, b: a.bitwiseOR(b), bits)


def tally(
    frame: Any,
    topic: Any,
    message_id: Any,
    outcomes: Sequence[tuple[Any, Any]],
    questions: Sequence[Question],
    enqueued: Any = None,
    unrouted: Mapping[str, frozenset[int]] | None = None,
    breakdown: Mapping[str, Any] | None = None,
) -> Answers:
    """Group ``frame`` by topic and the (matched, error) bits of ``outcomes`` (one pair per filter)
    and answer ``questions`` about the groups; ``enqueued`` (a timestamp column) gives the time range.

    ``breakdown`` (name → column) counts the messages of each topic of ``unrouted`` (topic → the
    filters that take a message) that no such filter matched, by their value of each column: the
    column joins the grouping only for those messages, so routed traffic makes no more groups."""
    from pyspark.sql import functions as F

    words = range(0, max(len(outcomes), 1), BITS)
    masks = []
    for w, start in enumerate(words):
        chunk = outcomes[start : start + BITS]
        masks.append(_mask(F, [matched for matched, _ in chunk]).alias(f"m{w}"))
        masks.append(_mask(F, [error.isNotNull() for _, error in chunk]).alias(f"e{w}"))
    when = F.lit(None).cast("timestamp") if enqueued is None else enqueued
    breakdown = dict(breakdown or {})
    rows = frame.select(
        topic.alias("topic"), F.xxhash64(message_id).alias("h"), when.alias("t"), *masks,
        *(column.alias(f"v_{name}") for name, column in breakdown.items()),
    )
    keys = ["topic", *(f"{kind}{w}" for w in range(len(words)) for kind in "me")]
    if breakdown:
        nowhere = _unrouted_column(F, unrouted or {}, len(words))
        rows = rows.select(
            *keys, "h", "t", *(F.when(nowhere, F.col(f"v_{name}")).alias(f"b_{name}") for name in breakdown)
        )
        keys += [f"b_{name}" for name in breakdown]
    grouped = rows.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("count"),
        # The smallest hashes of the group (repeats of an id included, so the fold keeps the distinct).
        F.min_by("h", "h", EXAMPLES).alias("hashes"),
        F.unix_micros(F.min("t")).alias("first"),
        F.unix_micros(F.max("t")).alias("last"),
    )
    fold = _Fold(tuple(questions), len(words), tuple(breakdown))
    return Answers.from_arrow(questions, grouped.mapInArrow(fold, ANSWERS_SCHEMA).toArrow())


def _unrouted_column(F: Any, unrouted: Mapping[str, frozenset[int]], words: int) -> Any:
    """Per row: whether its topic is one of ``unrouted`` and none of that topic's filters matched
    (read off the matched masks, so no filter is evaluated twice)."""
    condition = F.lit(False)
    for topic, bits in unrouted.items():
        per_word: dict[int, int] = {}
        for index in bits:
            word, offset = divmod(index, BITS)
            per_word[word] = per_word.get(word, 0) | (1 << offset)
        clear = F.lit(True)
        for word, mask in per_word.items():
            if word < words:
                clear = clear & ((F.col(f"m{word}").bitwiseAND(F.lit(mask)) == 0))
        condition = F.when(F.col("topic") == topic, clear).otherwise(condition)
    return condition


def resolve(
    frame: Any, message_id: Any, hashes: set[int], columns: Sequence[str] = ()
) -> dict[int, tuple[str, dict[str, Any]]]:
    """The message behind each example hash: its id and its values of ``columns`` (one scan of
    those columns; 64-bit hashes do not collide in practice, and on a collision, or when several
    messages share an id, the smallest id and then the smallest row is shown, so reruns agree)."""
    if not hashes:
        return {}
    from pyspark.sql import functions as F

    h = F.xxhash64(message_id)
    table = frame.where(h.isin(*sorted(hashes))).select(h.alias("_h"), message_id.alias("_id"), *columns).toArrow()
    out: dict[int, tuple[str, dict[str, Any]]] = {}
    for row in sorted(table.to_pylist(), key=lambda r: (r["_id"], repr(r))):
        key, ident = row.pop("_h"), row.pop("_id")
        out.setdefault(key, (ident, row))
    return out
