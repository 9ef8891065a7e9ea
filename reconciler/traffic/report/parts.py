"""What both traffic documents (the impact report, the routing-health document) share: how they
count and name topics, the sample's time range, its example messages, and how a saved document is
read back (its kind, its version, one clear line when it is malformed).

Topic names are the rule files' (declared) names; under an environment that renames a topic, the
namespace's name is kept beside them (``namespace_topic``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from reconciler.errors import InputError
from reconciler.model import Message
from reconciler.scalars import format_timestamp


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 subscription``, ``2,000 subscriptions``."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


#: A topic's declared name from its name in the namespace (an environment may rename topics).
Naming = Callable[[str], str]


def as_declared(topic: str) -> str:
    """The naming of rule files without environment renames: a topic's name is the namespace's."""
    return topic


def named(topic: str, declared: Naming) -> tuple[str, str | None]:
    """A topic's declared name, and its name in the namespace when an environment renames it."""
    name = declared(topic)
    return name, (topic if name != topic else None)


def renamed(topic: str, namespace_topic: str | None) -> str:
    """A topic as a person reads it: its declared name, the namespace's beside it when renamed."""
    return f"{topic} ({namespace_topic} in the namespace)" if namespace_topic else topic


def topic_json(topic: str, namespace_topic: str | None) -> dict[str, str]:
    """A topic in a document: ``topic`` (declared), then ``namespace_topic`` when renamed."""
    return {"topic": topic, "namespace_topic": namespace_topic} if namespace_topic else {"topic": topic}


# ------------------------------------------------------------------------------------------------
# The sample
# ------------------------------------------------------------------------------------------------


def iso(micros: int | None) -> str | None:
    """A time in µs since the epoch as ISO 8601 UTC (milliseconds), None when none is known."""
    if micros is None:
        return None
    return format_timestamp(dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros))


@dataclass(frozen=True)
class TimeRange:
    """When the sampled messages were enqueued (ISO 8601 UTC, milliseconds); None where unknown."""

    first: str | None = None
    last: str | None = None

    @property
    def span(self) -> str | None:
        """``enqueued 2024-05-01 10:00:00 → 2024-05-01 12:30:00 UTC``, or None when unknown."""
        if not self.first or not self.last:
            return None
        short = lambda iso: iso.replace("T", " ").removesuffix("Z").split(".")[0]  # noqa: E731
        return f"enqueued {short(self.first)} → {short(self.last)} UTC"

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TimeRange":
        return cls(doc["first"], doc["last"])


@dataclass(frozen=True)
class ExampleMessage:
    """An example message as reports show it: its topic, body size and properties."""

    topic: str | None
    body_size: int | None
    message: Message

    def to_json(self) -> dict[str, Any]:
        """The properties in the message JSON shape (``{"sys", "user"}``) that ``sbrules route --message`` reads."""
        return {"topic": self.topic, "body_size": self.body_size, "message": self.message.to_json()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "ExampleMessage":
        return cls(doc["topic"], doc["body_size"], Message.from_json(doc["message"]))


def examples_json(found: Mapping[str, ExampleMessage]) -> dict[str, Any]:
    return {ident: example.to_json() for ident, example in sorted(found.items())}


def examples_from_json(doc: Mapping[str, Any]) -> dict[str, ExampleMessage]:
    return {ident: ExampleMessage.from_json(example) for ident, example in doc.items()}


# ------------------------------------------------------------------------------------------------
# A saved document
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentKind:
    """A kind of document sbrules writes, as a reader tells it apart: by a member no other kind has."""

    #: what a person calls it (``traffic impact report``)
    name: str
    #: the member only documents of this kind have
    mark: str
    format_version: int
    #: its JSON Schema (``schemas/``), which names what is wrong with a malformed one
    schema: str

    def recognizes(self, doc: Any) -> bool:
        """Whether ``doc`` is a document of this kind (of any version)."""
        return isinstance(doc, Mapping) and self.mark in doc

    @contextlib.contextmanager
    def reading(self, doc: Any) -> Iterator[Mapping[str, Any]]:
        """``doc`` to read as this kind: one :class:`~reconciler.errors.InputError` line when it is
        another kind or version, breaks its schema (the first violation named), or says what its
        model cannot hold (a message's unknown system property, a change with the wrong sides)."""
        from reconciler.rulefiles.schema import first_violation

        if not self.recognizes(doc):
            raise InputError(f"not an sbrules {self.name} (it has no {self.mark!r} member)")
        if doc.get("format_version") != self.format_version:
            raise InputError(
                f"{self.name} format_version {doc.get('format_version')!r} is not supported "
                f"(this sbrules reads {self.format_version})"
            )
        violation = first_violation(self.schema, doc)
        if violation:
            raise InputError(f"malformed {self.name}: {violation}")
        try:
            yield doc
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"malformed {self.name}: {exc}") from None

