"""Write live rules as rule files, so a team can adopt sbrules on an existing namespace.

The output is a rule file (schemas/rules.schema.json) in which every correlation property names its
type (``{long: 3}``, ``{int: 3}``), so nobody has to remember which plain scalar means which AMQP
type; planning the exported files against the same namespace shows no changes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from reconciler.errors import SbrulesError
from reconciler.model import Rule, rule_to_doc
from reconciler.observe import RuleReader, observe_subscriptions
from reconciler.plan import is_temp_rule_name

HEADER = "# Exported by `sbrules export` from the live namespace. Review, then commit.\n"


def rule_file_doc(
    topic: str, rules_by_subscription: Mapping[str, Sequence[Rule]], *, explicit_types: bool = False
) -> dict[str, Any]:
    """A rule-file document for ``topic``: each subscription's rules in the one rule form
    (:func:`reconciler.model.rule_to_doc`); a subscription with no rules says ``allow_empty``."""
    subs: dict[str, Any] = {}
    for name, rules in rules_by_subscription.items():
        entry: dict[str, Any] = {"rules": [rule_to_doc(r, explicit_types=explicit_types) for r in rules]}
        if not rules:
            entry["allow_empty"] = True
        subs[name] = entry
    return {"topic": topic, "subscriptions": subs}


def dump_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def dump_yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120)


def to_yaml(doc: dict[str, Any]) -> str:
    """The exported rule file: the document as YAML under a header saying where it came from."""
    return HEADER + dump_yaml(doc)


def export_topic(
    client: RuleReader, topic: str, subscriptions: Sequence[str], *, concurrency: int = 32
) -> tuple[dict[str, Any], list[str]]:
    """The rule-file document for ``topic`` and warnings (leftover temporary rules left out)."""
    if not subscriptions:
        raise SbrulesError(
            "name the subscriptions to export with --subscription (the AMQP management node cannot list "
            "a topic's subscriptions)"
        )
    live = observe_subscriptions(client, [(topic, s) for s in subscriptions], concurrency=concurrency)
    warnings: list[str] = []
    kept: dict[str, list[Rule]] = {}
    for name in subscriptions:
        kept[name] = []
        for rule in live[(topic, name)]:
            if is_temp_rule_name(rule.name):
                warnings.append(
                    f"{topic}/{name}: left out {rule.name!r}, a leftover temporary rule of an interrupted apply"
                )
            else:
                kept[name].append(rule)
    return rule_file_doc(topic, kept, explicit_types=True), warnings


def file_name(topic: str) -> str:
    """A safe file name for a topic (topic names may contain '/')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", topic).strip("._") + ".yaml"


def write_export(doc: dict[str, Any], out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / file_name(doc["topic"])
    path.write_text(to_yaml(doc), encoding="utf-8")
    return path
