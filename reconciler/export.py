"""Write live rules as rule files, so a team can adopt sbrules on an existing namespace.

The output is a rule file (schemas/rules.schema.json) in which every correlation property names its
type (``{long: 3}``, ``{int: 3}``), so nobody has to remember which plain scalar means which AMQP
type; planning the exported files against the same namespace shows no changes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import yaml

from reconciler.errors import SbrulesError
from reconciler.model import CorrelationFilter, Rule, TypedValue, ValueType, rule_to_doc
from reconciler.observe import RuleReader, observe_subscriptions
from reconciler.plan import is_temp_rule_name

HEADER = "# Exported by `sbrules export` from the live namespace. Review, then commit.\n"


def _explicit(value: TypedValue) -> Any:
    form = value.to_typed_form()
    if value.type is ValueType.NULL or isinstance(form, dict):
        return form
    return {value.type.value: form}


def rule_doc(rule: Rule) -> dict[str, Any]:
    """The rule-file form of ``rule`` with every correlation property explicitly typed."""
    doc = rule_to_doc(rule)
    if isinstance(rule.filter, CorrelationFilter) and rule.filter.properties:
        doc["correlation"]["properties"] = {k: _explicit(v) for k, v in rule.filter.properties}
    return doc


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
    subs: dict[str, Any] = {}
    for name in subscriptions:
        rules = []
        for rule in live[(topic, name)]:
            if is_temp_rule_name(rule.name):
                warnings.append(
                    f"{topic}/{name}: left out {rule.name!r}, a leftover temporary rule of an interrupted apply"
                )
                continue
            rules.append(rule_doc(rule))
        entry: dict[str, Any] = {"rules": rules}
        if not rules:
            entry["allow_empty"] = True
        subs[name] = entry
    return {"topic": topic, "subscriptions": subs}, warnings


def to_yaml(doc: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120)


def file_name(topic: str) -> str:
    """A safe file name for a topic (topic names may contain '/')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", topic).strip("._") + ".yaml"


def write_export(doc: dict[str, Any], out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / file_name(doc["topic"])
    path.write_text(to_yaml(doc), encoding="utf-8")
    return path
