"""Peek a topic's subscriptions into a Parquet traffic sample, incrementally and in bounded memory.

A sample is a directory: ``part-*.parquet`` files (one per flushed batch, each complete on its
own, so an interrupted run leaves a readable dataset) plus ``_sbrules_state.json`` holding the
last peeked sequence number per ``topic/subscription``, and ``_sbrules_manifest.json`` saying what
the sample holds (:mod:`reconciler.traffic.sample.manifest`). Spark and pyarrow ignore ``_``-prefixed
files. A re-run continues after the recorded sequence numbers.

A message is stored once: its identity is its sequence number in its topic (partition bits
included), which every subscription's copy carries. Never its MessageId, which producers reuse
(retries without duplicate detection, business keys, ``sbrules send --count``): distinct messages
sharing one are all kept, and a message peeked again (an overlapping re-run, another subscription)
is stored once.

Peeking a subscription shows only what that subscription's *current* rules let through; to see
all of a topic's traffic, sample a catch-all subscription (one whose only rule is ``1=1``).
"""

from __future__ import annotations

import functools
import json
import os
import queue
import threading
import uuid
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

import pyarrow.parquet as pq
from pyarrow import ArrowException
from pyarrow.fs import FileSelector, FileType, LocalFileSystem

from reconciler.amqp.codec import CodecError
from reconciler.amqp.messages import decode_message_fields, sequence_number
from reconciler.atomic_file import replacing, write_atomically
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.json_text import json_text
from reconciler.model import PARTITION_SHIFT
from reconciler.traffic.sample import manifest
from reconciler.traffic.sample.location import filesystem
from reconciler.traffic.sample.manifest import TopicManifest
from reconciler.traffic.sample.rows import Columns

STATE_FILE = "_sbrules_state.json"
#: Version 2 keeps a position per partition (``model.PARTITION_SHIFT``): a re-run that started after
#: the last partition peeked would never see what arrived in the others since. Version 1 (one position
#: per subscription) is read as it.
STATE_VERSION = 2


class SampleError(SbrulesError):
    """The dataset directory cannot be used as a traffic sample."""

    code = ErrorCode.INPUT


class Peeker(Protocol):
    """What the sampler needs from a management client (``ManagementClient`` has it): pages of up to
    ``count`` messages (encoded) from each sequence number of ``starts``, pipelined, or an error per page."""

    def peek_payloads(self, topic: str, subscription: str, starts: Sequence[int], count: int) -> list[Any]:
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
    #: What the dataset holds after the run, per topic (``manifest.MANIFEST_FILE``).
    manifest: list[TopicManifest] = field(default_factory=list)

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
            "manifest": [topic.to_json() for topic in self.manifest],
        }


class Dataset:
    """A sample directory (a local path or a URL pyarrow reaches, see
    :mod:`reconciler.traffic.sample.location`): its state file, the keys already stored, a batch writer.

    Each file is replaced whole: on a local disk through :mod:`reconciler.atomic_file`; in an
    object store (s3, gs, abfs) by one upload, which readers see complete or not at all."""

    def __init__(self, location: str | os.PathLike, *, batch_rows: int = 10_000):
        self.location = os.fspath(location)
        self.fs, self.path = filesystem(self.location)
        self._local = isinstance(self.fs, LocalFileSystem)
        try:
            if self.fs.get_file_info(self.path).type == FileType.File:
                raise SampleError(f"{self.location} exists and is not a directory")
            self.fs.create_dir(self.path, recursive=True)
        except OSError as exc:
            raise SampleError(f"cannot make the sample directory {self.location}: {_reason(exc)}") from None
        self.batch_rows = batch_rows
        self.run_id = uuid.uuid4().hex[:12]
        self.files: list[str] = []
        self._pending = Columns()
        self._positions: dict[str, dict[int, int]] = {}
        self._staged: dict[str, dict[int, int]] = {}
        self._load_state()

    # -- state --------------------------------------------------------------------------------
    @property
    def state_path(self) -> str:
        return f"{self.path}/{STATE_FILE}"

    def _load_state(self) -> None:
        if self.fs.get_file_info(self.state_path).type == FileType.NotFound:
            return
        try:
            with self.fs.open_input_stream(self.state_path) as stream:
                doc = json.loads(stream.read())
            if doc.get("version") == 1:
                self._positions = {str(k): {int(v) >> PARTITION_SHIFT: int(v)} for k, v in doc["positions"].items()}
                return
            if doc.get("version") != STATE_VERSION:
                raise ValueError(f"state version {doc.get('version')!r}")
            self._positions = {
                str(k): {int(p): int(n) for p, n in v.items()} for k, v in doc["positions"].items()
            }
        except OSError as exc:
            raise SampleError(f"cannot read {self.state_path}: {_reason(exc)}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SampleError(f"{self.state_path} is not an sbrules sample state file ({exc})") from None

    def _save_state(self) -> None:
        text = json_text({"version": STATE_VERSION, "positions": self._positions})
        if self._local:
            write_atomically(self.state_path, text)
        else:
            with self.fs.open_output_stream(self.state_path) as stream:
                stream.write(text.encode())

    def positions(self, topic: str, subscription: str) -> dict[int, int]:
        """The last sequence number stored for this subscription, by partition (none yet: empty;
        an entity that is not partitioned has partition 0 only)."""
        key = f"{topic}/{subscription}"
        return {**self._positions.get(key, {}), **self._staged.get(key, {})}

    def advance(self, topic: str, subscription: str, sequence: int) -> None:
        """Record progress in ``sequence``'s partition; it becomes durable with the batch that holds
        the rows peeked so far."""
        key, partition = f"{topic}/{subscription}", sequence >> PARTITION_SHIFT
        staged = self._staged.setdefault(key, {})
        stored = self._positions.get(key, {}).get(partition, 0)
        staged[partition] = max(sequence, staged.get(partition, 0), stored)  # a page read again moves nothing back

    def existing_keys(self, topic: str) -> set[int]:
        """The identities (sequence numbers) of the messages of ``topic`` already in the dataset."""
        return {sequence for stored, _, sequence in self.stored() if stored == topic and sequence is not None}

    def stored(self) -> Iterator[tuple[str, str | None, int | None]]:
        """(topic, subscription, sequence number) of every stored message (three columns read)."""
        parts = [
            info.path
            for info in self.fs.get_file_info(FileSelector(self.path))
            if info.base_name.startswith("part-") and info.base_name.endswith(".parquet")
        ]
        for part in sorted(parts):
            try:
                table = pq.read_table(part, columns=["topic", "subscription", "sequence_number"], filesystem=self.fs)
            except (OSError, ArrowException) as exc:
                raise SampleError(
                    f"{part} is not a readable part of an sbrules sample ({_reason(exc)}); move it out of "
                    f"{self.location}, or sample into another directory"
                ) from None
            columns = table.to_pydict()
            yield from zip(columns["topic"], columns["subscription"], columns["sequence_number"])

    def write_manifest(self) -> list[TopicManifest]:
        """Describe what the dataset holds now (``manifest.MANIFEST_FILE``), and return it."""
        topics = manifest.build(self.stored())
        text = json_text(manifest.to_json(topics))
        target = f"{self.path}/{manifest.MANIFEST_FILE}"
        try:
            if self._local:
                write_atomically(target, text)
            else:
                with self.fs.open_output_stream(target) as stream:
                    stream.write(text.encode())
        except OSError as exc:
            raise SampleError(f"cannot write to the sample {self.location}: {_reason(exc)}") from None
        return topics

    # -- rows ---------------------------------------------------------------------------------
    def add(self, row: Mapping[str, Any]) -> None:
        """One row (``rows.message_to_row``)."""
        self._pending.add_row(row)
        self._flush_when_full()

    def add_fields(
        self, system: Mapping[str, Any], user: Mapping[str, Any], *, topic: str, subscription: str, body_size: int
    ) -> None:
        """One message given as its fields, the row never made (``rows.Columns.add``)."""
        self._pending.add(system, user, topic=topic, subscription=subscription, body_size=body_size)
        self._flush_when_full()

    def _flush_when_full(self) -> None:
        if len(self._pending) >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        """Write pending rows as one complete Parquet file, then make the staged positions durable."""
        try:
            self._write_pending()
        except OSError as exc:
            raise SampleError(f"cannot write to the sample {self.location}: {_reason(exc)}") from None

    def _write_pending(self) -> None:
        if len(self._pending):
            name = f"part-{self.run_id}-{len(self.files):05d}.parquet"
            table, target = self._pending.table(), f"{self.path}/{name}"
            if self._local:
                with replacing(target) as tmp:
                    pq.write_table(table, tmp, compression="zstd")
            else:
                pq.write_table(table, target, compression="zstd", filesystem=self.fs)
            self.files.append(name)
            self._pending = Columns()
        if self._staged:
            for key, staged in self._staged.items():
                self._positions.setdefault(key, {}).update(staged)
            self._staged = {}
            self._save_state()


def _reason(exc: BaseException) -> str:
    """An I/O error's message, on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


#: Pages asked for at once when nothing but the round trip limits peeking.
PAGES_IN_FLIGHT = 8


def pages_in_flight(credit_budget: float | None, page_size: int) -> int:
    """Pages to ask for at once: ``PAGES_IN_FLIGHT``, but under a credit budget only one more than a
    second of it pays for (two at least, so that decoding one page overlaps fetching the next). Under
    a budget the rate, not the round trip, limits peeking, and a page asked for past the
    subscription's end still waits its turn at the budget as if it were full."""
    if credit_budget is None:
        return PAGES_IN_FLIGHT
    return max(2, min(PAGES_IN_FLIGHT, int(credit_budget // page_size) + 1))


def sample(
    client: Peeker,
    topic: str,
    subscriptions: Sequence[str],
    dataset: str | os.PathLike,
    *,
    max_messages: int | None = None,
    page_size: int = 250,
    pages_in_flight: int | Callable[[], int] = PAGES_IN_FLIGHT,
    batch_rows: int = 10_000,
    on_page: Callable[[str, int], None] | None = None,
) -> SampleStats:
    """Peek every subscription from its stored position onward and append new messages to ``dataset``.

    ``max_messages`` bounds the messages peeked per subscription in this run; ``pages_in_flight``
    pages are asked for at once (see ``_pages``), or as many as it returns when asked before each
    round: a command's credit budget can change while it samples (dropped once the namespace is
    known to be Premium). Peeking runs on this thread (reading only the
    sequence numbers it needs to place the next pages), decoding messages, building columns and
    writing Parquet on another, so a round of pages is decoded while the next is fetched. ``on_page`` is told
    (subscription, new messages in the page) after each page, for progress display.

    Ctrl-C ends the run early rather than losing it: the pages handed over so far are written whole
    and the state records the last of them (a re-run peeks on from there and skips stored messages
    as duplicates), and the statistics say ``interrupted``.
    """
    if not subscriptions:
        raise SampleError("name at least one subscription to peek (a catch-all one sees all traffic)")
    in_flight = pages_in_flight if callable(pages_in_flight) else lambda: pages_in_flight
    store = Dataset(dataset, batch_rows=batch_rows)
    stats = SampleStats(dataset=store.location)
    try:
        with _Writer(store, topic) as writer:
            for subscription in subscriptions:
                resume = functools.partial(_unstored, store.positions(topic, subscription))
                sub_stats = SubscriptionStats(topic, subscription, start_sequence=resume(1))
                stats.subscriptions.append(sub_stats)
                pages = _pages(
                    client.peek_payloads, topic, subscription, resume, max_messages, page_size, in_flight,
                    sequence_number,
                )
                for page in pages:
                    writer.put(sub_stats, page)
                    if on_page is not None:
                        on_page(subscription, len(page))
    except KeyboardInterrupt:
        stats.interrupted = True
    stats.files = store.files
    stats.manifest = store.write_manifest()
    return stats


class _Writer:
    """Decoding, deduplication, columns and Parquet for pages handed over by the peeking thread, on a thread of
    its own; at most ``QUEUED`` pages wait, so memory stays bounded when writing is the slower side.
    An error on this thread is raised on the peeking thread at its next hand-over or at the end."""

    QUEUED = 16

    def __init__(self, store: Dataset, topic: str) -> None:
        self.store, self.topic = store, topic
        self._queue: queue.Queue[tuple[SubscriptionStats, list[Any]] | None] = queue.Queue(self.QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="sbrules-sample-writer", daemon=True)

    def __enter__(self) -> "_Writer":
        self._seen = self.store.existing_keys(self.topic)
        self._thread.start()
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None and exc is None:
            raise self._error

    def put(self, stats: SubscriptionStats, page: list[Any]) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put((stats, page))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drain: the peeking thread stops at its next hand-over
            try:
                self._write(*item)
            except BaseException as exc:  # handed to the peeking thread, which raises it
                self._error = exc
        if self._error is None:
            try:
                self.store.flush()
            except BaseException as exc:  # as above
                self._error = exc

    def _write(self, sub_stats: SubscriptionStats, page: list[Any]) -> None:
        store, seen = self.store, self._seen
        lasts: dict[int, int] = {}  # partition -> its last sequence number in this page
        for payload in page:
            fields = decode_message_fields(payload)
            sequence = fields.system.get("SequenceNumber")
            if sequence is None:
                raise CodecError("a peeked message has no x-opt-sequence-number annotation")
            key = int(sequence)
            sub_stats.peeked += 1
            sub_stats.last_sequence = max(sub_stats.last_sequence or 0, sequence)
            lasts[sequence >> PARTITION_SHIFT] = sequence
            if key in seen:
                sub_stats.duplicates += 1
                continue
            seen.add(key)
            store.add_fields(
                fields.system, fields.user, topic=self.topic, subscription=sub_stats.subscription,
                body_size=len(fields.body),
            )
            sub_stats.written += 1
        for sequence in lasts.values():
            store.advance(sub_stats.topic, sub_stats.subscription, sequence)


def _unstored(positions: Mapping[int, int], sequence: int) -> int:
    """The first sequence number from ``sequence`` on that is not stored yet: past the position of
    ``sequence``'s partition when that is at or beyond it."""
    last = positions.get(sequence >> PARTITION_SHIFT)
    return last + 1 if last is not None and last >= sequence else sequence


def _pages(
    peek: Callable[[str, str, Sequence[int], int], list[Any]], topic: str, subscription: str,
    resume: Callable[[int], int], max_messages: int | None, page_size: int, in_flight: Callable[[], int],
    sequence: Callable[[Any], int],
) -> Iterator[list[Any]]:
    """Every message from sequence number ``resume(1)`` on, in order and each once, as pages.

    ``resume`` maps where the walk has got to onto where it goes on, past what is stored (see
    ``_unstored``): on a partitioned entity the walk jumps over each partition's stored messages
    when it reaches that partition, having read at most a round of pages of them again.

    ``peek`` fetches a round of pages (``Peeker.peek_payloads``); ``sequence`` reads a message's
    sequence number, which is asked of a few messages per page (the last, and those a binary search
    for the first new one visits), so that the next round goes out before this one is decoded.

    Pages are asked for in rounds of ``in_flight()`` at once, by sequence-number ranges: page k of a
    round starts ``k * stride`` after the round's start. A peek of ``page_size`` from s returns the
    first ``page_size`` messages numbered s or more, so it covers every message from s up to the last
    one it returned; the pages of a round thus cover an unbroken range as long as each page starts
    at most one past where the page before it ended. Messages a page shares with the one before
    (numbers that are not contiguous, in a filtered subscription) are dropped; a page that starts
    beyond the covered range is dropped too and asked for again in the next round, which begins
    where the covered range ends. A page that comes back empty is the end of the subscription; one
    that comes back short need not be (the service may return fewer messages than asked even when
    more are there), so the next round starts after its last message. The
    stride follows the numbers seen: in a subscription that gets one message in ten of the topic's,
    a page of 250 spans about 2,500 numbers, and so does the stride (a little less, so that pages
    overlap rather than leave holes). Rounds start at one page and double while every page comes
    back full, up to ``in_flight()``, and fall back to one page after a round whose last pages came
    back short or beyond a hole: a subscription's end is found after a page or two asked for in
    vain, not ``in_flight`` of them, each reserving a page of credits. Where every page comes back
    short (a partitioned entity answers a peek with one message) the rounds grow as well, the
    stride then being what a page spans, so that such pages are pipelined too. With
    ``max_messages``, no page asks for more than remain to be sampled.
    """
    base, stride, remaining, round_size = resume(1), page_size, max_messages, 1
    while remaining is None or remaining > 0:
        count = page_size if remaining is None else min(page_size, remaining)
        wanted = round_size if remaining is None else min(round_size, -(-remaining // count))
        starts = [base + k * stride for k in range(wanted)]
        covered = base - 1  # every message up to here has been yielded
        spans, pages, short, hole = [], 0, 0, False
        for first, page in zip(starts, peek(topic, subscription, starts, count)):
            if isinstance(page, Exception):
                raise page
            if first > covered + 1:
                hole = True
                break  # a hole before this page: the next round starts at it
            if not page:
                return  # nothing numbered ``first`` or more, and every message before it yielded
            last = sequence(page[-1])
            if first >> PARTITION_SHIFT == last >> PARTITION_SHIFT:  # a page into the next partition spans its gap
                spans.append(last - first + 1)
            new = page[bisect_right(page, covered, key=sequence):] if first <= covered else page
            if remaining is not None:
                new = new[:remaining]
                remaining -= len(new)
            if new:
                covered = last if new[-1] is page[-1] else sequence(new[-1])
                yield new
            if remaining == 0:
                return
            covered = max(covered, last)
            pages, short = pages + 1, short + (len(page) < count)
        base = resume(covered + 1)
        if spans:
            stride = max(count, int(min(spans) * 0.9)) if not short else max(1, min(spans))
        steady = not hole and short in (0, pages)  # all full, or all short: not the end
        round_size = min(in_flight(), round_size * 2) if steady else 1
