"""Pipelined peeking: pages by sequence-number ranges, several in flight, each message once and in order."""

from __future__ import annotations

import random
from bisect import bisect_left
from dataclasses import dataclass
from typing import Sequence

import pytest

from reconciler.model import PARTITION_SHIFT
from reconciler.traffic.sample.sampler import _pages, _unstored

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Peeked:
    sequence_number: int


class Subscription:
    """Peeks as the service answers them: the first ``count`` messages numbered ``start`` or more,
    or fewer (at most ``limit``: the service may return fewer than asked even when more are there)."""

    def __init__(self, numbers: Sequence[int], limit: int | None = None) -> None:
        self.numbers = sorted(numbers)
        self.limit = limit
        self.rounds: list[list[int]] = []
        self.counts: list[int] = []

    def peek_pages(self, topic: str, subscription: str, starts: Sequence[int], count: int) -> list:
        self.rounds.append(list(starts))
        self.counts.append(count)
        returned = min(count, self.limit or count)
        return [[Peeked(n) for n in self.numbers[bisect_left(self.numbers, start) :][:returned]] for start in starts]

    def peeked(self, start: int = 1, max_messages: int | None = None, page: int = 10, in_flight: int = 4) -> list[int]:
        return self.walk(lambda n: max(n, start), max_messages, page, in_flight)

    def walk(self, resume, max_messages: int | None = None, page: int = 10, in_flight: int = 4) -> list[int]:
        pages = _pages(self.peek_pages, "t", "s", resume, max_messages, page, lambda: in_flight, lambda p: p.sequence_number)
        return [p.sequence_number for pages_ in pages for p in pages_]


def test_rounds_of_pages_grow_to_the_pages_in_flight():
    sub = Subscription(range(1, 186))
    assert sub.peeked() == list(range(1, 186))
    assert sub.rounds == [
        [1], [11, 21], [31, 41, 51, 61], [71, 81, 91, 101], [111, 121, 131, 141], [151, 161, 171, 181],
        [186],  # after a short page, one page: the end is a page that comes back empty
    ]


def test_the_pages_in_flight_are_asked_before_each_round():
    # A command's budget can be dropped while it samples (a namespace found to be Premium): the
    # rounds grow past the old limit from then on.
    sub, limits = Subscription(range(1, 400)), iter([2, 2, 8])
    pages = _pages(sub.peek_pages, "t", "s", lambda n: n, None, 10, lambda: next(limits, 8), lambda p: p.sequence_number)
    assert [p.sequence_number for page in pages for p in page] == list(range(1, 400))
    assert [len(r) for r in sub.rounds[:5]] == [1, 2, 2, 4, 8]


@pytest.mark.parametrize("seed", range(8))
def test_every_message_once_whatever_the_gaps(seed):
    rng = random.Random(seed)
    density = rng.choice([1.0, 0.5, 0.1, 0.02])
    numbers = [n for n in range(1, 5000) if rng.random() < density]
    numbers += [6000 + n * 37 for n in range(40)]  # a sparse tail after a dense stretch
    sub = Subscription(numbers)
    assert sub.peeked(page=rng.choice([1, 7, 25]), in_flight=rng.choice([1, 3, 8])) == sorted(numbers)


def test_the_stride_follows_a_sparse_subscription():
    sub = Subscription(range(1, 100_000, 10))  # one message in ten of the topic's numbers
    assert sub.peeked(page=10) == list(range(1, 100_000, 10))
    assert sub.rounds[1][1] - sub.rounds[1][0] >= 80  # not 10: pages of a round barely overlap
    assert len(sub.rounds) < 10_000 / 10 / 4 * 1.3 + 3


def test_a_start_and_a_cap():
    sub = Subscription(range(1, 200))
    assert sub.peeked(start=50, max_messages=23) == list(range(50, 73))
    assert all(len(r) <= 3 for r in sub.rounds)  # no more pages asked for than the cap needs
    asked = sum(len(starts) * count for starts, count in zip(sub.rounds, sub.counts))
    assert asked < 23 + 10  # less than a page more than the cap: a peek is charged per message it returns


def test_a_cap_below_a_page_asks_for_no_more():
    sub = Subscription(range(1, 200))
    assert sub.peeked(max_messages=1, page=250) == [1]
    assert sub.counts == [1]


@pytest.mark.parametrize("seed", range(6))
def test_pages_shorter_than_asked_are_not_the_end(seed):
    # The service may return fewer messages than a peek asks for while more are there.
    rng = random.Random(seed)
    numbers = [n for n in range(1, 3000) if rng.random() < rng.choice([1.0, 0.3])]
    sub = Subscription(numbers, limit=rng.choice([1, 4, 9]))
    assert sub.peeked(page=10, in_flight=rng.choice([1, 4])) == numbers


def test_an_empty_subscription_takes_one_page():
    sub = Subscription([])
    assert sub.peeked() == [] and sub.rounds == [[1]]


def test_a_failed_page_is_raised():
    class Failing(Subscription):
        def peek_pages(self, *args):
            return [RuntimeError("peek-message on t/Subscriptions/s: gone")]

    with pytest.raises(RuntimeError, match="gone"):
        Failing([1, 2]).peeked()


def _partitioned(counts: Sequence[int]) -> list[int]:
    """The sequence numbers of a partitioned entity: partition p's k-th message is (p << 48) + k."""
    return [(p << PARTITION_SHIFT) + k for p, count in enumerate(counts) for k in range(1, count + 1)]


def test_a_partitioned_entity_is_walked_partition_after_partition():
    numbers = _partitioned([40, 0, 7, 123])
    sub = Subscription(numbers, limit=1)  # the service answers one message per peek there
    assert sub.peeked(page=10, in_flight=8) == numbers
    # Such pages are pipelined too: the rounds grow to 8 pages, a message each, stride 1.
    assert len(sub.rounds) < len(numbers) / 4
    assert [r[1] - r[0] for r in sub.rounds if len(r) == 8][:3] == [1, 1, 1]


@pytest.mark.parametrize("in_flight", [1, 4])
def test_a_rerun_on_a_partitioned_entity_skips_what_each_partition_has_stored(in_flight):
    # Stored up to 30 in partition 0 and 100 in partition 3; since then more came to every partition.
    numbers = _partitioned([45, 20, 0, 130])
    stored = {0: 30, 3: (3 << PARTITION_SHIFT) + 100}
    peeked = Subscription(numbers).walk(lambda n: _unstored(stored, n), page=10, in_flight=in_flight)
    new = [n for n in numbers if n > stored.get(n >> PARTITION_SHIFT, 0)]
    assert peeked == sorted(set(peeked)) and set(new) <= set(peeked)  # in order, once each, nothing new missed
    again = [n for n in peeked if n not in new]
    assert len(again) <= 10 * in_flight  # what was stored is read again at most for a round of pages
    assert not [n for n in new if n >> PARTITION_SHIFT == 3 and n not in peeked]


def test_a_position_only_skips_its_own_partition():
    stored = {0: 30, 2: (2 << PARTITION_SHIFT) + 5}
    assert _unstored(stored, 1) == 31
    assert _unstored(stored, 31) == 31
    assert _unstored(stored, 1 << PARTITION_SHIFT) == 1 << PARTITION_SHIFT  # nothing stored in partition 1
    assert _unstored(stored, (2 << PARTITION_SHIFT) + 1) == (2 << PARTITION_SHIFT) + 6


@pytest.mark.parametrize("seed", range(40))
def test_every_message_once_whatever_the_partitions_gaps_and_short_pages(seed):
    rng = random.Random(seed)
    density = rng.choice([1.0, 0.5, 0.1, 0.02])
    numbers = [(p << PARTITION_SHIFT) + n for p in range(rng.choice([1, 3])) for n in range(1, 400) if rng.random() < density]
    start, cap = rng.randint(1, 50), rng.choice([None, rng.randint(1, 200)])
    sub = Subscription(numbers, limit=rng.choice([None, 1, rng.randint(2, 9)]))
    expected = [n for n in numbers if n >= start][:cap]
    assert sub.peeked(start=start, max_messages=cap, page=rng.randint(1, 30), in_flight=rng.randint(1, 8)) == expected
