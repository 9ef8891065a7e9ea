"""Write live rules as rule files, so a team can adopt sbrules on an existing namespace.

The output is a rule file (schemas/rules.schema.json) in which every correlation property names its
type (``{long: 3}``, ``{int: 3}``), so nobody has to remember which plain scalar means which AMQP
type; planning the exported files against the same namespace shows no changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from reconciler.atomic_file import write_atomically
from reconciler.discovery import EntityLister, discover_namespace
from reconciler.errors import SbrulesError
from reconciler.limits import is_lock_rule
from reconciler.model import Rule, Subscription, Topic
from reconciler.namespace.errors import NotFoundError
from reconciler.observe import FallbackReader, RuleReader, observe_subscriptions
from reconciler.owners import NO_OWNERS, Owners
from reconciler.plan import is_temp_rule_name, lookalike_warnings, partition
from reconciler.rulefiles.render import dump_rule_file as dump_yaml
from reconciler.rulefiles.render import file_names, topic_document

HEADER = "# Exported by `sbrules export` from the live namespace. Review, then commit.\n"


def rule_file_doc(
    topic: str, rules_by_subscription: Mapping[str, Sequence[Rule]], *, explicit_types: bool = False,
    owns: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """The rule-file document of live rules (:func:`reconciler.rulefiles.render.topic_document`):
    each subscription's rules (and ``owns``); a subscription with no rules says ``allow_empty``."""
    subscriptions = tuple(
        Subscription(name, rules=tuple(rules), allow_empty=not rules, owns=owns)
        for name, rules in rules_by_subscription.items()
    )
    return topic_document(Topic(topic, subscriptions), explicit_types=explicit_types)


def to_yaml(doc: dict[str, Any]) -> str:
    """The exported rule file: the document as YAML under a header saying where it came from."""
    return HEADER + dump_yaml(doc)


@dataclass
class Export:
    """Rule-file documents, one per topic, and what the reader should know about them."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def export_rules(
    client: RuleReader,
    targets: Mapping[str, Sequence[str]],
    *,
    fallback: FallbackReader | None = None,
    concurrency: int = 32,
    owns: tuple[str, ...] | None = None,
    owners: Owners = NO_OWNERS,
) -> Export:
    """The rules of every (topic → subscriptions) target as rule-file documents, read in one pipelined
    batch over AMQP (``fallback`` reads those AMQP refuses: auto-forwarding). Leftover temporary rules
    of an interrupted apply are left out, with a warning; with ``owns``, so are the rules outside those
    patterns (foreign), with a note, and each subscription says ``owns:``. What ``owners`` claims is
    labelled with its owner (a ``description``)."""
    pairs = [(topic, sub) for topic, subs in targets.items() for sub in subs]
    live = observe_subscriptions(client, pairs, concurrency=concurrency, fallback=fallback)
    result = Export(notes=[
        f"{topic}/{sub}: rules read over the management REST API (auto-forwarding: AMQP refuses to enumerate them)"
        for topic, sub in live.read_over_rest
    ])
    for topic, subs in targets.items():
        kept: dict[str, list[Rule]] = {}
        for name in subs:
            kept[name] = []
            foreign = [r.name for r in partition(live[(topic, name)], owns)[1]]
            if foreign:
                result.notes.append(f"{topic}/{name}: left out {len(foreign)} foreign rule(s) outside owns: "
                                    f"({', '.join(map(repr, foreign))})")
            for rule in live[(topic, name)]:
                if rule.name in foreign:
                    continue
                if is_temp_rule_name(rule.name):
                    result.warnings.append(
                        f"{topic}/{name}: left out {rule.name!r}, a leftover temporary rule of an interrupted apply"
                    )
                elif is_lock_rule(rule):
                    result.notes.append(f"{topic}/{name}: left out {rule.name!r}, the lock of an apply writing it")
                else:
                    result.warnings += lookalike_warnings(f"{topic}/{name}", [rule])
                    kept[name].append(rule)
        doc = rule_file_doc(topic, kept, explicit_types=True, owns=owns)
        if owners:
            _label_owners(doc, owners)
        result.documents.append(doc)
    return result


def _label_owners(doc: dict[str, Any], owners: Owners) -> None:
    """Say in the document who owns each subscription and rule ``owners`` claims."""
    topic = doc["topic"]
    for name, entry in doc["subscriptions"].items():
        owner = owners.of_subscription(topic, name)
        if owner and entry is not None:
            entry["description"] = f"owned by {owner} (sbrules.yaml owners:)"
        for rule in (entry or {}).get("rules", ()):
            owner = owners.of_rule(topic, name, rule["name"])
            if owner:
                rule["description"] = f"owned by {owner} (sbrules.yaml owners:)"


def export_topic(
    client: RuleReader, topic: str, subscriptions: Sequence[str], *, concurrency: int = 32
) -> tuple[dict[str, Any], list[str]]:
    """The rule-file document for the named subscriptions of ``topic``, and warnings."""
    if not subscriptions:
        raise SbrulesError("name at least one subscription to export")
    result = export_rules(client, {topic: subscriptions}, concurrency=concurrency)
    return result.documents[0], result.warnings


def discovered_targets(rest: EntityLister, topic: str | None = None) -> dict[str, list[str]]:
    """Every subscription of ``topic`` (or of every topic), by name, from one discovery pass."""
    inventory = discover_namespace(rest, [topic] if topic else ())
    targets: dict[str, list[str]] = {}
    for name, subs in inventory.topics.items():
        if subs is None:
            raise NotFoundError(f"topic {name!r} does not exist in the namespace")
        targets[name] = [s.name for s in subs]
    return targets


def write_exports(docs: list[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """Each document as ``<topic>.yaml`` in ``out_dir`` (file names checked for clashes before any is written)."""
    out = Path(out_dir)
    names = file_names(doc["topic"] for doc in docs)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for doc in docs:
        path = out / names[doc["topic"]]
        write_atomically(path, to_yaml(doc))
        paths.append(path)
    return paths
