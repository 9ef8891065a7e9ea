"""Which type tags each application property holds in a traffic sample.

A filter is translated for every type a property *could* have (a ``CASE`` over the operand tags,
docs/sql-language.md §10.3), yet producers send each property with one or two types. Knowing the
types that occur lets the translator drop the branches no message can reach, which makes the
Spark plan and the Java generated for it several times smaller. Pruning is sound only over the exact rows evaluated, so the tags
come from those rows: from each Parquet file's footer (written by ``rows.rows_to_table``), or,
when a file lacks them, from one Spark pass over the sample.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping
from urllib.parse import unquote

from reconciler.traffic.rows import LAYOUT_KEY, LAYOUT_VERSION, PROPERTY_TAGS_KEY, PROPS

log = logging.getLogger(__name__)

PropertyTypes = Mapping[str, frozenset[str]]


class OutdatedSample(Exception):
    """A sample file written by an sbrules whose layout widened property types (short → int,
    float → double, char → string): its types are not the ones the producers sent."""

    def __init__(self, path: str, layout: bytes | None):
        self.path = path
        super().__init__(f"{path} has sample layout {(layout or b'1').decode()}, not {LAYOUT_VERSION.decode()}")


def property_types(frame: Any) -> PropertyTypes:
    """Lower-cased property name → the type tags it has somewhere in ``frame`` (a sample read
    with ``spark.read.parquet``); names never present are absent.

    Raises :class:`OutdatedSample` for a file an older sbrules wrote (it records tags but not the
    current layout): its widened types would make the report disagree with the broker."""
    from_footers = _from_footers(frame.inputFiles())
    if from_footers is not None:
        return from_footers
    return _from_rows(frame)


def _from_footers(files: list[str]) -> dict[str, frozenset[str]] | None:
    """The union of the files' recorded tags; None if a file has none or cannot be read here.

    The files are read through the filesystem ``sbrules sample --out`` writes with
    (:func:`reconciler.traffic.location.filesystem`), reached once per directory."""
    import pyarrow.parquet as pq

    from reconciler.traffic.location import LocationError, filesystem

    if not files:
        return None
    seen: dict[str, set[str]] = {}
    directories: dict[str, tuple[Any, str]] = {}
    try:
        for uri in files:
            parent, base = uri.rsplit("/", 1)
            if parent not in directories:
                directories[parent] = filesystem(parent)
            fs, path = directories[parent]
            footer = pq.read_metadata(f"{path}/{unquote(base)}", filesystem=fs).metadata or {}
            recorded = footer.get(PROPERTY_TAGS_KEY)
            if recorded is None:
                return None
            if footer.get(LAYOUT_KEY) != LAYOUT_VERSION:
                raise OutdatedSample(uri, footer.get(LAYOUT_KEY))
            for name, tags in json.loads(recorded).items():
                seen.setdefault(name, set()).update(tags)
    except (LocationError, OSError, ValueError, TypeError, AttributeError) as exc:
        log.info("property types not read from the Parquet footers (%s); computing them with Spark", exc)
        return None
    return {name: frozenset(tags) for name, tags in seen.items()}


def _from_rows(frame: Any) -> dict[str, frozenset[str]]:
    from pyspark.sql import functions as F

    pairs = frame.select(F.explode(PROPS)).select("key", F.col("value.t").alias("t")).distinct().collect()
    seen: dict[str, set[str]] = {}
    for row in pairs:
        seen.setdefault(row["key"], set()).add(row["t"])
    return {name: frozenset(tags) for name, tags in seen.items()}
