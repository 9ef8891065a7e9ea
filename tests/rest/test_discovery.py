"""Discovery without the network: topics are listed concurrently, and failures keep their meaning."""

from __future__ import annotations

import threading

import pytest

from reconciler.discovery import discover
from reconciler.namespace.errors import NotFoundError, UnauthorizedError
from reconciler.rest.atom import SubscriptionInfo

pytestmark = pytest.mark.unit


class Lister:
    """Answers a listing only once ``together`` listings are waiting at once (a barrier), so a
    discovery that lists one topic after another fails with BrokenBarrierError instead of passing."""

    def __init__(self, subscriptions: dict[str, list[str] | None], together: int, fail: Exception | None = None):
        self.subscriptions = subscriptions
        self.barrier = threading.Barrier(together, timeout=10)
        self.fail = fail

    def list_topics(self) -> list[str]:
        return list(self.subscriptions)

    def list_subscriptions(self, topic: str) -> list[SubscriptionInfo]:
        self.barrier.wait()
        if self.fail is not None:
            raise self.fail
        names = self.subscriptions[topic]
        if names is None:
            raise NotFoundError(f"no topic {topic}")
        return [SubscriptionInfo(topic, name) for name in names]


def test_topics_are_listed_at_once_and_in_order():
    topics = {f"t{i}": [f"s{i}"] for i in range(4)} | {"gone": None}
    inventory = discover(Lister(topics, together=5), list(topics))
    assert list(inventory.topics) == list(topics)
    assert [s.name for s in inventory.topics["t2"] or ()] == ["s2"]
    assert inventory.topics["gone"] is None and inventory.refused is None


def test_a_refusal_from_any_listing_is_reported_once():
    lister = Lister({"a": [], "b": []}, together=2, fail=UnauthorizedError("no", status=401))
    inventory = discover(lister, ["a", "b"])
    assert inventory.refused == "HTTP 401" and not inventory.topics
