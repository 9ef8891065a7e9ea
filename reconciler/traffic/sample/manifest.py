"""A sample's manifest: per topic and subscription, what the sample holds, and the holes in it.

``_sbrules_manifest.json`` is rewritten from the stored rows at the end of every ``sbrules
sample`` run (so it always describes the whole dataset, whatever runs made it). A message's
identity is its sequence number in its topic (the partition's number in its top bits); the
topic numbers its messages without gaps, per partition, and every subscription's copy carries the
topic's number. So a *gap* — numbers between a topic's first and last stored message that no
stored message has — is traffic the sample does not hold: messages that expired or were received
before they were peeked, that no sampled subscription's rules let through, or copies a rule action
made in another subscription (each copy is a message of its own there, with a number of its own). ``analyze`` and
``impact`` print gaps as a warning: the counts are of the sampled messages only.

A message peeked through several subscriptions is stored once, under the first that delivered it:
a subscription's entry counts the messages stored through it.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from reconciler.model import PARTITION_SHIFT

MANIFEST_FILE = "_sbrules_manifest.json"
MANIFEST_VERSION = 1
#: Gaps listed per topic (all are counted in ``missing``).
LISTED_GAPS = 20


@dataclass(frozen=True)
class Range:
    """Stored messages of a topic or subscription: how many, and their first and last sequence numbers."""

    messages: int
    first_sequence: int
    last_sequence: int

    def to_json(self) -> dict[str, int]:
        return {"messages": self.messages, "first_sequence": self.first_sequence, "last_sequence": self.last_sequence}


@dataclass(frozen=True)
class TopicManifest:
    topic: str
    stored: Range
    #: (first, last) missing sequence numbers, inclusive, the first ``LISTED_GAPS``
    gaps: tuple[tuple[int, int], ...]
    missing: int
    subscriptions: Mapping[str, Range]

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic, **self.stored.to_json(),
            "missing": self.missing, "gaps": [{"first": a, "last": b} for a, b in self.gaps],
            "subscriptions": [{"subscription": s, **r.to_json()} for s, r in sorted(self.subscriptions.items())],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TopicManifest":
        return cls(
            doc["topic"], _range(doc), tuple((g["first"], g["last"]) for g in doc["gaps"]), doc["missing"],
            {s["subscription"]: _range(s) for s in doc["subscriptions"]},
        )

    @property
    def warning(self) -> str | None:
        """One line when the topic's sampled messages have gaps (None without)."""
        if not self.missing:
            return None
        listed = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in self.gaps[:3])
        more = ", …" if len(self.gaps) > 3 else ""
        return (
            f"the sample of {self.topic} misses {self.missing:,} of the sequence numbers "
            f"{self.stored.first_sequence}–{self.stored.last_sequence} ({listed}{more}): messages that expired or were "
            "received before they were peeked, that no sampled subscription let through, or copies a rule action made "
            f"elsewhere; its counts are of the {self.stored.messages:,} sampled messages only"
        )


def _range(doc: Mapping[str, Any]) -> Range:
    return Range(doc["messages"], doc["first_sequence"], doc["last_sequence"])


def build(rows: Iterable[tuple[str, str | None, int | None]]) -> list[TopicManifest]:
    """The manifest of stored rows given as (topic, subscription, sequence number)."""
    numbers: dict[str, list[int]] = {}
    per_subscription: dict[str, dict[str, list[int]]] = {}
    for topic, subscription, sequence in rows:
        if sequence is None:
            continue
        numbers.setdefault(topic, []).append(sequence)
        per_subscription.setdefault(topic, {}).setdefault(subscription or "", []).append(sequence)
    out = []
    for topic in sorted(numbers):
        ordered = sorted(set(numbers[topic]))
        gaps = list(_gaps(ordered))
        out.append(
            TopicManifest(
                topic, _stored(ordered), tuple(gaps[:LISTED_GAPS]), sum(b - a + 1 for a, b in gaps),
                {sub: _stored(sorted(seqs)) for sub, seqs in per_subscription[topic].items()},
            )
        )
    return out


def _stored(ordered: Sequence[int]) -> Range:
    return Range(len(ordered), ordered[0], ordered[-1])


def _gaps(ordered: Sequence[int]) -> Iterable[tuple[int, int]]:
    """Missing runs between consecutive numbers of one partition (a partition's numbers start anew
    in the top bits, so the step from one partition to the next is not a gap)."""
    for before, after in itertools.pairwise(ordered):
        if before >> PARTITION_SHIFT == after >> PARTITION_SHIFT and after > before + 1:
            yield before + 1, after - 1


def to_json(topics: Sequence[TopicManifest]) -> dict[str, Any]:
    return {"version": MANIFEST_VERSION, "topics": [t.to_json() for t in topics]}


def from_text(text: str | bytes) -> list[TopicManifest]:
    """The manifest in a file's text; empty when it is not one this sbrules reads (it only adds warnings)."""
    try:
        doc = json.loads(text)
        if doc.get("version") != MANIFEST_VERSION:
            return []
        return [TopicManifest.from_json(t) for t in doc["topics"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def read(dataset: str) -> list[TopicManifest]:
    """The manifest of the sample ``dataset`` (a directory or URL); empty when it has none."""
    from pyarrow.fs import FileType

    from reconciler.traffic.sample.location import filesystem

    try:
        fs, path = filesystem(dataset)
        target = f"{path.rstrip('/')}/{MANIFEST_FILE}"
        if fs.get_file_info(target).type != FileType.File:
            return []
        with fs.open_input_stream(target) as stream:
            return from_text(stream.read())
    except (OSError, ValueError):
        return []


def gap_warnings(dataset: str, topics: Iterable[str] | None = None) -> list[str]:
    """The gap warning of each topic of the sample (of ``topics`` only, as the namespace names them, when given)."""
    from reconciler.names import name_key

    wanted = None if topics is None else {name_key(t) for t in topics}
    return [
        t.warning for t in read(dataset) if t.warning is not None and (wanted is None or name_key(t.topic) in wanted)
    ]
