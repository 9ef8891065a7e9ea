"""What a traffic sample's Parquet footers record: the type tags of each property, and the topics.

A filter is translated for every type a property *could* have (a ``CASE`` over the operand tags,
docs/sql-language.md §10.3), yet producers send each property with one or two types. Knowing the
types that occur lets the translator drop the branches no message can reach, which makes the
Spark plan and the Java generated for it several times smaller. Pruning is sound only over the exact rows evaluated, so the tags
come from those rows: from each Parquet file's footer (written by ``rows.Columns.table``), or,
when a file lacks them, from one Spark pass over the sample.

The topics a sample holds decide which subscriptions a report covers (a topic without sampled
messages would make every rule look dead). The footers name them too; a file written before they
did costs a Spark query instead. Reading footers is a few milliseconds; either Spark pass costs
seconds on a freshly started JVM.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote

from reconciler.traffic.sample.rows import LAYOUT_KEY, LAYOUT_VERSION, PROPERTY_TAGS_KEY, PROPS, TOPICS_KEY

log = logging.getLogger(__name__)

PropertyTypes = Mapping[str, frozenset[str]]


class OutdatedSample(Exception):
    """A sample file written by an sbrules whose layout widened property types (short → int,
    float → double, char → string): its types are not the ones the producers sent."""

    def __init__(self, path: str, layout: bytes | None):
        self.path = path
        super().__init__(f"{path} has sample layout {(layout or b'1').decode()}, not {LAYOUT_VERSION.decode()}")


@dataclass(frozen=True)
class SampleFacts:
    """What every file of a sample records; None where some file does not record it."""

    types: PropertyTypes | None
    #: the topics as written in the sample (any case)
    topics: frozenset[str] | None


def sample_facts(frame: Any) -> tuple[PropertyTypes, frozenset[str]]:
    """The property types and the topics of ``frame`` (a sample read with ``spark.read.parquet``),
    from its footers, each computed with Spark where a footer lacks it.

    Raises :class:`OutdatedSample` for a file an older sbrules wrote (see :func:`property_types`)."""
    facts = _from_footers(frame.inputFiles())
    types = facts.types if facts.types is not None else _types_from_rows(frame)
    topics = facts.topics if facts.topics is not None else _topics_from_rows(frame)
    return types, topics


def property_types(frame: Any) -> PropertyTypes:
    """Lower-cased property name → the type tags it has somewhere in ``frame``; names never present
    are absent.

    Raises :class:`OutdatedSample` for a file an older sbrules wrote (it records tags but not the
    current layout): its widened types would make the report disagree with the broker."""
    types = _from_footers(frame.inputFiles()).types
    return types if types is not None else _types_from_rows(frame)


def _from_footers(files: list[str]) -> SampleFacts:
    """The union over the files of what their footers record.

    The files are read through the filesystem ``sbrules sample --out`` writes with
    (:func:`reconciler.traffic.sample.location.filesystem`), reached once per directory."""
    import pyarrow.parquet as pq

    from reconciler.traffic.sample.location import LocationError, filesystem

    unknown = SampleFacts(None, None)
    if not files:
        return unknown
    tags: dict[str, set[str]] | None = {}
    topics: set[str] | None = set()
    directories: dict[str, tuple[Any, str]] = {}
    try:
        for uri in files:
            parent, base = uri.rsplit("/", 1)
            if parent not in directories:
                directories[parent] = filesystem(parent)
            fs, path = directories[parent]
            footer = pq.read_metadata(f"{path}/{unquote(base)}", filesystem=fs).metadata or {}
            recorded_tags, recorded_topics = footer.get(PROPERTY_TAGS_KEY), footer.get(TOPICS_KEY)
            if recorded_tags is not None and footer.get(LAYOUT_KEY) != LAYOUT_VERSION:
                raise OutdatedSample(uri, footer.get(LAYOUT_KEY))
            if recorded_tags is None:
                tags = None
            elif tags is not None:
                for name, names_tags in json.loads(recorded_tags).items():
                    tags.setdefault(name, set()).update(names_tags)
            if recorded_topics is None:
                topics = None
            elif topics is not None:
                topics.update(json.loads(recorded_topics))
            if tags is None and topics is None:
                break
    except (LocationError, OSError, ValueError, TypeError, AttributeError) as exc:
        log.info("the Parquet footers could not be read (%s); Spark computes what they record", exc)
        return unknown
    return SampleFacts(
        None if tags is None else {name: frozenset(t) for name, t in tags.items()},
        None if topics is None else frozenset(topics),
    )


def _types_from_rows(frame: Any) -> dict[str, frozenset[str]]:
    from pyspark.sql import functions as F

    pairs = frame.select(F.explode(PROPS)).select("key", F.col("value.t").alias("t")).distinct().collect()
    seen: dict[str, set[str]] = {}
    for row in pairs:
        seen.setdefault(row["key"], set()).add(row["t"])
    return {name: frozenset(tags) for name, tags in seen.items()}


def _topics_from_rows(frame: Any) -> frozenset[str]:
    return frozenset(row[0] for row in frame.select("topic").distinct().collect() if row[0] is not None)
