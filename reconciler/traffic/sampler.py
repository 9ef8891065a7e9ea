"""Peek a topic's subscriptions into a Parquet traffic sample, incrementally and in bounded memory.

A sample is a directory: ``part-*.parquet`` files (one per flushed batch, each complete on its
own, so an interrupted run leaves a readable dataset) plus ``_sbrules_state.json`` holding the
last peeked sequence number per ``topic/subscription``. Spark and pyarrow ignore ``_``-prefixed
files. A re-run continues after the recorded sequence numbers. A message seen through several
subscriptions is stored once (same message id and enqueued time).

Peeking a subscription shows only what that subscription's *current* rules let through; to see
all of a topic's traffic, sample a catch-all subscription (one whose only rule is ``1=1``).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

import pyarrow.parquet as pq

from reconciler.errors import SbrulesError
from reconciler.model import TypedValue, ValueType
from reconciler.traffic.rows import message_to_row, micros_since_epoch, rows_to_table

STATE_FILE = "_sbrules_state.json"
STATE_VERSION = 1


class SampleError(SbrulesError):
    """The dataset directory cannot be used as a traffic sample."""


class Peeker(Protocol):
    """What the sampler needs from a management client (``ManagementClient`` has it)."""

    def peek_messages(self, topic: str, subscription: str, from_sequence_number: int, count: int) -> list[Any]:
        ...


@dataclass
class SubscriptionStats:
    topic: str
    subscription: str
    start_sequence: int
    last_sequence: int | None = None
    peeked: int = 0
    written: int = 0
    duplicates: int = 0


@dataclass
class SampleStats:
    """What one sampling run did (printed by ``sbrules sample``)."""

    dataset: str
    subscriptions: list[SubscriptionStats] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: Ctrl-C ended the run early; what it had peeked is stored.
    interrupted: bool = False

    @property
    def written(self) -> int:
        return sum(s.written for s in self.subscriptions)

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "written": self.written,
            "files": self.files,
            "subscriptions": [s.__dict__ for s in self.subscriptions],
            "interrupted": self.interrupted,
        }


def _dedupe_key(message_id: str | None, enqueued_micros: Any, sequence: int | None) -> int:
    """A compact (8-byte) identity: message id + enqueued time, or the sequence number without an id."""
    text = f"{message_id}\x00{enqueued_micros}" if message_id is not None else f"\x01{sequence}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Dataset:
    """A sample directory: its state file, the keys already stored, and a batch writer."""

    def __init__(self, path: str | os.PathLike, *, batch_rows: int = 10_000):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise SampleError(f"{self.path} exists and is not a directory")
        self.path.mkdir(parents=True, exist_ok=True)
        self.batch_rows = batch_rows
        self.run_id = uuid.uuid4().hex[:12]
        self.files: list[str] = []
        self._pending: list[dict[str, Any]] = []
        self._positions: dict[str, int] = {}
        self._staged: dict[str, int] = {}
        self._load_state()

    # -- state --------------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.path / STATE_FILE

    def _load_state(self) -> None:
        if not self.state_path.exists():
            return
        try:
            doc = json.loads(self.state_path.read_text())
            if doc.get("version") != STATE_VERSION:
                raise ValueError(f"state version {doc.get('version')!r}")
            self._positions = {str(k): int(v) for k, v in doc["positions"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SampleError(f"{self.state_path} is not an sbrules sample state file ({exc})") from None

    def _save_state(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": STATE_VERSION, "positions": self._positions}, indent=2, sort_keys=True))
        os.replace(tmp, self.state_path)

    def position(self, topic: str, subscription: str) -> int:
        """The last sequence number stored for this subscription (0 = none yet)."""
        return self._positions.get(f"{topic}/{subscription}", 0)

    def advance(self, topic: str, subscription: str, sequence: int) -> None:
        """Record progress; it becomes durable with the batch that holds the rows peeked so far."""
        self._staged[f"{topic}/{subscription}"] = sequence

    def existing_keys(self, topic: str) -> set[int]:
        """Dedupe keys of the rows of ``topic`` already in the dataset (reads three columns only)."""
        keys: set[int] = set()
        for part in sorted(self.path.glob("part-*.parquet")):
            table = pq.read_table(part, columns=["topic", "message_id", "enqueued_time", "sequence_number"])
            for row in table.to_pylist():
                if row["topic"] == topic:
                    keys.add(_row_key(row))
        return keys

    # -- rows ---------------------------------------------------------------------------------
    def add(self, row: dict[str, Any]) -> None:
        self._pending.append(row)
        if len(self._pending) >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        """Write pending rows as one complete Parquet file, then make the staged positions durable."""
        if self._pending:
            name = f"part-{self.run_id}-{len(self.files):05d}.parquet"
            tmp = self.path / f".{name}.tmp"
            pq.write_table(rows_to_table(self._pending), tmp, compression="zstd")
            os.replace(tmp, self.path / name)
            self.files.append(name)
            self._pending = []
        if self._staged:
            self._positions.update(self._staged)
            self._staged = {}
            self._save_state()


def _row_key(row: dict[str, Any]) -> int:
    enqueued = row.get("enqueued_time")
    micros = None if enqueued is None else micros_since_epoch(enqueued)
    return _dedupe_key(row.get("message_id"), micros, row.get("sequence_number"))


def _with_peek_fields(peeked: Any) -> Any:
    """The peeked Message with SequenceNumber/EnqueuedTimeUtc set from the peek envelope if absent."""
    message = peeked.message
    extra = {}
    if "SequenceNumber" not in message.sys and peeked.sequence_number is not None:
        extra["SequenceNumber"] = TypedValue(ValueType.LONG, peeked.sequence_number)
    if "EnqueuedTimeUtc" not in message.sys and peeked.enqueued_time is not None:
        extra["EnqueuedTimeUtc"] = TypedValue(ValueType.TIMESTAMP, peeked.enqueued_time)
    if not extra:
        return message
    return type(message)(sys={**message.sys, **extra}, user=message.user, body=message.body)


def sample(
    client: Peeker,
    topic: str,
    subscriptions: Sequence[str],
    dataset: str | os.PathLike,
    *,
    max_messages: int | None = None,
    page_size: int = 250,
    batch_rows: int = 10_000,
    on_page: Callable[[str, int], None] | None = None,
) -> SampleStats:
    """Peek every subscription from its stored position onward and append new messages to ``dataset``.

    ``max_messages`` bounds the messages peeked per subscription in this run. ``on_page`` is told
    (subscription, messages in the page) after each page, for progress display.

    Ctrl-C ends the run early rather than losing it: the rows peeked so far are written and the
    state records the last page stored whole (a re-run peeks a partly stored page again and skips
    its stored messages as duplicates), and the statistics say ``interrupted``.
    """
    if not subscriptions:
        raise SampleError("name at least one subscription to peek (a catch-all one sees all traffic)")
    store = Dataset(dataset, batch_rows=batch_rows)
    seen = store.existing_keys(topic)
    stats = SampleStats(dataset=str(store.path))
    try:
        for subscription in subscriptions:
            sub_stats = SubscriptionStats(topic, subscription, start_sequence=store.position(topic, subscription) + 1)
            stats.subscriptions.append(sub_stats)
            for page in _pages(client, topic, subscription, sub_stats.start_sequence, max_messages, page_size):
                for peeked in page:
                    message = _with_peek_fields(peeked)
                    row = message_to_row(message, topic=topic, subscription=subscription, body_size=peeked.body_size)
                    key = _row_key(row)
                    sub_stats.peeked += 1
                    sub_stats.last_sequence = max(sub_stats.last_sequence or 0, peeked.sequence_number)
                    if key in seen:
                        sub_stats.duplicates += 1
                        continue
                    seen.add(key)
                    store.add(row)
                    sub_stats.written += 1
                store.advance(topic, subscription, sub_stats.last_sequence)
                if on_page is not None:
                    on_page(subscription, len(page))
    except KeyboardInterrupt:
        stats.interrupted = True
    store.flush()
    stats.files = store.files
    return stats


def _pages(
    client: Peeker, topic: str, subscription: str, start: int, max_messages: int | None, page_size: int
) -> Iterable[list[Any]]:
    """Pages of peeked messages until the subscription is exhausted (empty page / 204) or the cap."""
    next_sequence = start
    remaining = max_messages
    while remaining is None or remaining > 0:
        count = page_size if remaining is None else min(page_size, remaining)
        page = client.peek_messages(topic, subscription, from_sequence_number=next_sequence, count=count)
        if not page:
            return
        if remaining is not None:
            page = page[:remaining]
            remaining -= len(page)
        next_sequence = max(p.sequence_number for p in page) + 1
        yield page
