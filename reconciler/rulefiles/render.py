"""A DesiredState written back as rule files (``sbrules render``): one document per topic, every
correlation property typed explicitly, so that loading the files gives the same state."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from reconciler.errors import InputError
from reconciler.model import DesiredState, Topic, rule_to_doc
from reconciler.names import name_key


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter when PyYAML was built with it (several times faster than the pure-Python one,
    and it escapes a NEL, U+0085, instead of writing it raw, where a reader takes it for a line break),
    writing a multi-line string (SQL over several lines) as a literal block, as a person would."""


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    # The emitter falls back to a quoted scalar where a block cannot hold the text exactly.
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _text)


def dump_rule_file(doc: dict[str, Any], *, width: int = 120) -> str:
    """A rule-file document (or a part of one) as YAML text, keys in document order."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=width)


def topic_document(topic: Topic, *, explicit_types: bool = True) -> dict[str, Any]:
    """The one rule-file document of a topic (``render`` and ``export``): a subscription without
    rules stays unmanaged; ``explicit_types`` names every correlation property's type."""
    subs: dict[str, Any] = {}
    for sub in topic.subscriptions:
        entry: dict[str, Any] = {}
        if sub.owns is not None and sub.rules is not None:
            entry["owns"] = list(sub.owns)
        if sub.fallthrough:
            entry["fallthrough"] = True
        elif sub.rules is not None:
            entry["rules"] = [rule_to_doc(rule, explicit_types=explicit_types) for rule in sub.rules]
        if sub.allow_empty:
            entry["allow_empty"] = True
        if sub.sampling_tap:
            entry["sampling_tap"] = True
        subs[sub.name] = entry or None
    return {"topic": topic.name, "subscriptions": subs}


def render_documents(state: DesiredState, env: str) -> dict[str, str]:
    """File name → YAML text, one per topic, each under a header naming the environment."""
    header = f"# Rendered by `sbrules render --env {env}`: generated, do not edit.\n"
    names = file_names(topic.name for topic in state.topics)
    return {names[topic.name]: header + dump_rule_file(topic_document(topic)) for topic in state.topics}


def file_name(topic: str) -> str:
    """A safe file name for a topic: the name itself when it is one, else a slug and a digest.

    Topic names may contain '/' and characters a file system treats differently, so those become
    '_'; a name changed that way gets the first 16 hex digits (64 bits) of its key's sha256
    (``names.name_key``, so every spelling of one topic gets the same file), which keeps ``orders/eu``
    and ``orders_eu`` apart, and makes a colliding pair of real names too costly to find.
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", topic).strip("._") or "topic"
    if slug == topic:
        return slug + ".yaml"
    return f"{slug}-{hashlib.sha256(name_key(topic).encode()).hexdigest()[:16]}.yaml"


def file_names(topics: Iterable[str]) -> dict[str, str]:
    """Topic → file name for topics written side by side; an InputError if two would share a file.

    Files are compared ignoring case, as macOS and Windows do. Only a topic literally named like
    another's slug and digest can collide, and then nothing is written.
    """
    names: dict[str, str] = {}
    owners: dict[str, str] = {}
    for topic in topics:
        name = file_name(topic)
        owner = owners.setdefault(name.lower(), topic)
        if name_key(owner) != name_key(topic):
            raise InputError(f"topics {owner!r} and {topic!r} would both be written to {name}; nothing was written")
        names[topic] = name
    return names


def write_documents(documents: dict[str, str], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in documents.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
