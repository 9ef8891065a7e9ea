"""Named owners (``owners:`` in sbrules.yaml): who owns the subscriptions and rules sbrules does not.

Each owner name maps to glob patterns ``TOPIC/SUBSCRIPTION`` (the subscription and every rule in it)
or ``TOPIC/SUBSCRIPTION/RULE`` (those rules). A pattern is matched with the entity's path segment by
segment, names compared as the service compares them (:func:`reconciler.names.matches`), so a
pattern's ``*`` never spans a ``/``, and a topic whose name has ``/`` segments (as the service
allows) is named by as many segments: ``shop.events/orderplaced/billing``. The first owner listed
whose pattern matches wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from reconciler.names import matches


def _parts_match(parts: tuple[str, ...], pattern: str) -> bool:
    path, wanted = "/".join(parts).split("/"), pattern.split("/")
    return len(wanted) == len(path) and all(matches(segment, glob) for segment, glob in zip(path, wanted))


@dataclass(frozen=True)
class Owners:
    """Owner name → its ``TOPIC/SUBSCRIPTION[/RULE]`` patterns, in the project file's order."""

    patterns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def of_subscription(self, topic: str, subscription: str) -> str | None:
        """The owner claiming the whole subscription (a ``TOPIC/SUBSCRIPTION`` pattern), if any."""
        return self._first((topic, subscription))

    def of_rule(self, topic: str, subscription: str, rule: str) -> str | None:
        """The owner claiming the rule: by a ``TOPIC/SUBSCRIPTION/RULE`` pattern, else its subscription's."""
        return self._first((topic, subscription, rule)) or self.of_subscription(topic, subscription)

    def _first(self, parts: tuple[str, ...]) -> str | None:
        return next(
            (name for name, patterns in self.patterns.items() if any(_parts_match(parts, p) for p in patterns)), None
        )


NO_OWNERS = Owners()
