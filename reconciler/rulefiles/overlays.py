"""Overlays: what one environment changes in the base rule files, merged in the order listed.

An overlay file looks like a rule file (``schemas/overlay.schema.json``). Per subscription it may
add the subscription, add rules, replace a base rule of the same name, remove a rule
(``{name: X, remove: true}``) or remove the subscription (``remove: true``). Overlays apply one
after another, a later one seeing what the earlier ones made. Within one overlay entry (a
directory's files have no order among themselves) two changes to the same subscription or rule
are a conflict, and removing what does not exist is an error; both are located.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Any

from reconciler.diagnostics import Diagnostic
from reconciler.model import DesiredState, Origin, Rule, Subscription, Topic
from reconciler.names import name_key, same_name
from reconciler.rulefiles.loader import ReadFile, build_rule, outside_owns, text_origin

OVERLAY_SCHEMA = "overlay.schema.json"


@dataclass(frozen=True)
class Removal:
    """``{name: X, remove: true}``: the rule X is not declared in this environment."""

    name: str
    origin: Origin


@dataclass(frozen=True)
class SubscriptionChange:
    name: str
    origin: Origin
    remove: bool = False
    #: None: the overlay leaves the rules alone.
    rules: tuple[Rule | Removal, ...] | None = None
    allow_empty: bool | None = None
    #: This environment's ``owns:`` patterns (None: the base file's stay).
    owns: tuple[str, ...] | None = None
    #: Name keys of the rules marked ``add: true``: new to the subscription on purpose.
    added: frozenset[str] = field(default=frozenset())
    #: Where each rule of ``rules`` was written, by name key.
    origins: tuple[tuple[str, Origin], ...] = ()


@dataclass(frozen=True)
class TopicChange:
    topic: str
    origin: Origin
    subscriptions: tuple[SubscriptionChange, ...]


def topic_change(read: ReadFile, diags: list[Diagnostic]) -> TopicChange:
    """The changes an overlay file makes: every one its schema violations spare."""
    doc, loc = read.doc, read.loc
    subs = []
    for name, sub_doc in (doc.get("subscriptions") or {}).items():
        path = ("subscriptions", name)
        if path in read.spoiled:
            continue
        sub_doc = sub_doc or {}
        rules: tuple[Rule | Removal, ...] | None = None
        added: set[str] = set()
        origins: list[tuple[str, Origin]] = []
        if "rules" in sub_doc:
            built: list[Rule | Removal] = []
            for index, rule_doc in enumerate(sub_doc["rules"] or ()):
                rule_path = path + ("rules", index)
                if rule_path in read.spoiled:
                    continue
                if rule_doc.get("remove"):
                    built.append(Removal(rule_doc["name"], loc.origin(rule_path)))
                    continue
                if rule_doc.get("add") is True:
                    added.add(name_key(str(rule_doc["name"])))
                rule = build_rule({k: v for k, v in rule_doc.items() if k != "add"}, rule_path, loc, diags)
                if rule is not None:
                    built.append(rule)
                    origins.append((name_key(rule.name), loc.origin(rule_path)))
            rules = tuple(built)
        subs.append(
            SubscriptionChange(
                name=str(name),
                origin=loc.key_origin(path),
                remove=sub_doc.get("remove") is True,
                rules=rules,
                allow_empty=sub_doc["allow_empty"] if isinstance(sub_doc.get("allow_empty"), bool) else None,
                owns=tuple(str(p) for p in sub_doc["owns"]) if isinstance(sub_doc.get("owns"), list) else None,
                added=frozenset(added),
                origins=tuple(origins),
            )
        )
    return TopicChange(str(doc["topic"]), text_origin(("topic",), loc), tuple(subs))


def apply_overlay(state: DesiredState, changes: list[TopicChange], diags: list[Diagnostic]) -> DesiredState:
    """``state`` with one overlay entry's changes made (conflicts and impossible removals in ``diags``)."""
    _conflicts(changes, diags)
    topics = {name_key(t.name): t for t in state.topics}
    order = [name_key(t.name) for t in state.topics]
    for change in changes:
        key = name_key(change.topic)
        if key not in topics:
            topics[key] = Topic(change.topic, (), change.origin)
            order.append(key)
        topics[key] = _apply_topic(topics[key], change, diags)
    return DesiredState(topics=tuple(topics[k] for k in order))


def _apply_topic(topic: Topic, change: TopicChange, diags: list[Diagnostic]) -> Topic:
    subs = list(topic.subscriptions)
    for sub_change in change.subscriptions:
        index = next((i for i, s in enumerate(subs) if same_name(s.name, sub_change.name)), None)
        where = f"{topic.name}/{sub_change.name}"
        if sub_change.remove:
            if index is None:
                diags.append(_error(f"the overlay removes subscription {where}, which is not declared", sub_change.origin))
            else:
                del subs[index]
            continue
        base = subs[index] if index is not None else Subscription(sub_change.name, None, origin=sub_change.origin)
        updated = _apply_subscription(base, sub_change, where, diags)
        if index is None:
            subs.append(updated)
        else:
            subs[index] = updated
    return replace(topic, subscriptions=tuple(subs))


def _apply_subscription(sub: Subscription, change: SubscriptionChange, where: str, diags: list[Diagnostic]) -> Subscription:
    if change.allow_empty is not None:
        sub = replace(sub, allow_empty=change.allow_empty)
    if change.owns is not None:
        sub = replace(sub, owns=change.owns)
    if change.rules is None:
        return _owned_rules(sub, where, diags)
    rules = list(sub.rules or ())
    for item in change.rules:
        index = next((i for i, r in enumerate(rules) if same_name(r.name, item.name)), None)
        if isinstance(item, Removal):
            if index is None:
                message = f"the overlay removes rule {item.name!r} from {where}, which does not declare it"
                diags.append(_error(message, item.origin))
            else:
                del rules[index]
        elif index is None:
            if sub.rules is not None and name_key(item.name) not in change.added:
                origin = dict(change.origins).get(name_key(item.name))
                diags.append(_new_rule_warning(item.name, [r.name for r in rules], where, origin))
            rules.append(item)
        else:
            rules[index] = item
    return _owned_rules(replace(sub, rules=tuple(rules)), where, diags)


def _owned_rules(sub: Subscription, where: str, diags: list[Diagnostic]) -> Subscription:
    """The subscription less the rules outside its ``owns:`` patterns (each an error)."""
    if sub.rules is None or sub.owns is None:
        return sub
    topic, name = where.split("/", 1)
    return replace(sub, rules=tuple(outside_owns(topic, name, sub.rules, sub.owns, diags)))


def _conflicts(changes: list[TopicChange], diags: list[Diagnostic]) -> None:
    """Two changes to one subscription (removed, or its allow_empty set) or one rule in one overlay entry."""
    seen: dict[tuple[Any, ...], Origin] = {}

    def claim(key: tuple[Any, ...], what: str, origin: Origin | None) -> None:
        first = seen.get(key)
        if origin is None:
            return
        if first is not None:
            diags.append(
                Diagnostic("error", "overlay-conflict", f"the overlay changes {what} twice; one change must go",
                           origin, related=(first,))
            )
        else:
            seen[key] = origin

    for change in changes:
        topic = name_key(change.topic)
        for sub in change.subscriptions:
            where = f"{change.topic}/{sub.name}"
            if sub.remove or sub.allow_empty is not None:
                claim((topic, name_key(sub.name)), f"subscription {where}", sub.origin)
            for item in sub.rules or ():
                claim((topic, name_key(sub.name), name_key(item.name)), f"rule {item.name!r} of {where}", item.origin)


def _new_rule_warning(name: str, existing: list[str], where: str, origin: Origin | None) -> Diagnostic:
    """An overlay rule that replaces nothing: a new rule, or a replacement whose name is misspelt."""
    close = difflib.get_close_matches(name, existing, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return Diagnostic(
        "warning", "overlay-adds",
        f"the overlay's rule {name!r} matches no rule of {where}, so it is added beside them rather than replacing one; "
        f"{hint}write add: true if a new rule is meant",
        origin,
    )


def _error(message: str, origin: Origin | None) -> Diagnostic:
    return Diagnostic("error", "overlay", message, origin)
