"""A DesiredState written back as rule files (``sbrules render``): one document per topic, every
correlation property typed explicitly, so that loading the files gives the same state."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from reconciler.model import DesiredState, Topic, rule_to_doc

#: libyaml's emitter when PyYAML was built with it: several times faster than the pure-Python one,
#: and it escapes a NEL (U+0085) instead of writing it raw, where a reader takes it for a line break.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_rule_file(doc: dict[str, Any]) -> str:
    """A rule-file document as YAML text, keys in document order."""
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=120)


def topic_document(topic: Topic) -> dict[str, Any]:
    """The rule-file document of one topic (a subscription without rules stays unmanaged)."""
    subs: dict[str, Any] = {}
    for sub in topic.subscriptions:
        entry: dict[str, Any] = {}
        if sub.rules is not None:
            entry["rules"] = [rule_to_doc(rule, explicit_types=True) for rule in sub.rules]
        if sub.allow_empty:
            entry["allow_empty"] = True
        subs[sub.name] = entry or None
    return {"topic": topic.name, "subscriptions": subs}


def render_documents(state: DesiredState, env: str) -> dict[str, str]:
    """File name → YAML text, one per topic, each under a header naming the environment."""
    header = f"# Rendered by `sbrules render --env {env}`: generated, do not edit.\n"
    return {
        file_name(topic.name): header + dump_rule_file(topic_document(topic))
        for topic in state.topics
    }


def file_name(topic: str) -> str:
    """A safe file name for a topic (topic names may contain '/')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", topic).strip("._") + ".yaml"


def write_documents(documents: dict[str, str], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in documents.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
