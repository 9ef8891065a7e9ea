"""Every message's filter outcomes as a few bitmask longs, counted per distinct combination.

A report needs, per filter, how many messages it matches or fails on, and per subscription, how
many messages it gains, loses or fails on. Summing one column per (filter, outcome) makes an
aggregate hundreds of columns wide: Spark then gives up whole-stage code generation and the
generated methods grow too large for the JIT. Instead each message gets one bit per filter in a
*matched* and an *error* mask (63 filters per long); grouping by (topic, masks) leaves a few
thousand rows, from which the driver derives every count with numpy. Example message ids are
picked by hash inside the same aggregate (fixed-width values keep it a hash aggregate), as are the
first and last enqueued times; a second query fetches the few example messages by those hashes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

BITS = 63
#: Expression nodes the grouping query puts above a filter's matched or error column: the mask's
#: alias, the balanced OR of its terms, the term's CASE, and the error's null test.
OUTCOME_NESTING = 3 + math.ceil(math.log2(BITS))


@dataclass(frozen=True)
class Tally:
    """Grouped outcomes: row ``g`` stands for ``count[g]`` messages of topic ``topic[g]``."""

    topic: np.ndarray
    matched: np.ndarray  # (groups, words) int64
    errors: np.ndarray  # (groups, words) int64
    count: np.ndarray
    low: np.ndarray  # smallest id hash in the group
    high: np.ndarray  # largest id hash in the group
    pick: np.ndarray  # id hash of the member with the smallest second hash
    pick_order: np.ndarray  # that second hash
    first: np.ndarray  # earliest enqueued time in the group (datetime64, NaT when none is known)
    last: np.ndarray  # latest enqueued time in the group

    def bit(self, masks: np.ndarray, index: int) -> np.ndarray:
        """Per group: whether filter ``index`` is set in ``masks``."""
        word, offset = divmod(index, BITS)
        return (masks[:, word] >> offset) & 1 == 1

    def any_bit(self, masks: np.ndarray, indexes: Sequence[int]) -> np.ndarray:
        out = np.zeros(len(self.count), dtype=bool)
        for index in indexes:
            out |= self.bit(masks, index)
        return out


def _mask(F: Any, conditions: Sequence[Any]) -> Any:
    """One bit per condition, OR-ed as a balanced tree (shallow enough for Spark Connect)."""
    from reconciler.traffic.spark.depth import balanced

    zero = F.lit(0).cast("bigint")
    if not conditions:
        return zero
    bits = (F.when(cond, F.lit(1 << offset)).otherwise(zero) for offset, cond in enumerate(conditions))
    return balanced(lambda a, b: a.bitwiseOR(b), bits)


def tally(
    frame: Any, topic: Any, message_id: Any, outcomes: Sequence[tuple[Any, Any]], enqueued: Any = None
) -> Tally:
    """Group ``frame`` by topic and the (matched, error) bits of ``outcomes`` (one pair per filter);
    ``enqueued`` (a timestamp column) gives each group's time range."""
    from pyspark.sql import functions as F

    words = range(0, max(len(outcomes), 1), BITS)
    masks = []
    for w, start in enumerate(words):
        chunk = outcomes[start : start + BITS]
        masks.append(_mask(F, [matched for matched, _ in chunk]).alias(f"m{w}"))
        masks.append(_mask(F, [error.isNotNull() for _, error in chunk]).alias(f"e{w}"))
    when = F.lit(None).cast("timestamp") if enqueued is None else enqueued
    rows = frame.select(
        topic.alias("topic"), F.xxhash64(message_id).alias("h"), F.hash(message_id).alias("h2"), when.alias("t"), *masks
    )
    keys = ["topic", *(f"{kind}{w}" for w in range(len(words)) for kind in "me")]
    grouped = rows.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("count"),
        F.min("h").alias("low"),
        F.max("h").alias("high"),
        F.min_by("h", "h2").alias("pick"),
        F.min("h2").alias("pick_order"),
        F.min("t").alias("first"),
        F.max("t").alias("last"),
    )
    table = grouped.toArrow()
    column = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    return Tally(
        topic=column["topic"],
        matched=np.stack([column[f"m{w}"] for w in range(len(words))], axis=1),
        errors=np.stack([column[f"e{w}"] for w in range(len(words))], axis=1),
        count=column["count"],
        low=column["low"],
        high=column["high"],
        pick=column["pick"],
        pick_order=column["pick_order"],
        first=column["first"].astype("datetime64[us]"),
        last=column["last"].astype("datetime64[us]"),
    )


def examples(result: Tally, bucket: np.ndarray) -> set[int]:
    """Up to three id hashes of the messages in ``bucket`` (a group mask): the smallest and the
    largest hash and the member with the smallest second hash, a spread that needs no sort."""
    if not bucket.any():
        return set()
    pick = result.pick[bucket][np.argmin(result.pick_order[bucket])]
    return {int(result.low[bucket].min()), int(result.high[bucket].max()), int(pick)}


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
