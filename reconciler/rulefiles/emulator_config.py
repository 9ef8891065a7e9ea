"""Microsoft's Service Bus emulator's ``Config.json``: the declared topology written as one, read back,
and checked against what that emulator accepts.

Microsoft's emulator (a Docker image) takes its whole topology from one ``Config.json`` at start:
one namespace, which must be named ``sbemulatorns``; at most 50 queues and topics together; each
topic with 1 to 50 subscriptions; at most 1,000 rules per topic; entity and rule names of letters,
digits, ``_ - . /``, starting and ending with a letter or digit (so no ``$Default``); and a rule's
``FilterType`` spelt exactly ``Sql`` or ``Correlation``, beside a ``SqlFilter`` or
``CorrelationFilter`` object (docs/emulator.md, "Microsoft's emulator").

A correlation property's value is a plain JSON value there, so its type is what JSON says: sbrules
reads an integer as long, a fraction as double, text as string, ``true``/``false`` as bool, the
spelling of a plain scalar in rule files. A typed value of another type (``{int: 3}``) cannot be
written without changing what it matches, and is a warning where it is written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from reconciler import limits
from reconciler.diagnostics import Diagnostic
from reconciler.model import (
    CorrelationFilter,
    DesiredState,
    EmptyAction,
    FalseFilter,
    Origin,
    Rule,
    SqlFilter,
    SqlRuleAction,
    Subscription,
    Topic,
    TrueFilter,
)
from reconciler.rulefiles.located import DocumentError, read_document
from reconciler.typed_values import TypedValue, ValueType

NAMESPACE = "sbemulatorns"
MAX_ENTITIES = 50
MAX_SUBSCRIPTIONS = 50
MAX_RULES_PER_TOPIC = 1000
NAME = re.compile(r"^[A-Za-z0-9]$|^[A-Za-z0-9][\w\-./]*[A-Za-z0-9]$")
FILTER_TYPES = ("Sql", "Correlation")
#: Config.json's correlation keys → the model's field names.
SYSTEM_FIELDS = {
    "ContentType": "content_type",
    "CorrelationId": "correlation_id",
    "Label": "subject",
    "MessageId": "message_id",
    "ReplyTo": "reply_to",
    "ReplyToSessionId": "reply_to_session_id",
    "SessionId": "session_id",
    "To": "to",
}
#: The types a JSON value carries as it is (the others would change type on the way).
_JSON_TYPES = {ValueType.STRING, ValueType.LONG, ValueType.DOUBLE, ValueType.BOOL}

#: Where the value at a path of the Config.json document comes from (None: nowhere to point at).
Locate = Callable[[tuple[Any, ...]], Origin | None]


# ------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------


def to_config(state: DesiredState) -> tuple[dict[str, Any], list[Diagnostic]]:
    """``state`` as a Config.json document, and what it could not carry faithfully (warnings) or
    what Microsoft's emulator would refuse (errors), located in the rule files."""
    diags: list[Diagnostic] = []
    origins: dict[tuple[Any, ...], Origin | None] = {}
    topics = []
    for t_index, topic in enumerate(state.topics):
        origins[("UserConfig", "Namespaces", 0, "Topics", t_index)] = topic.origin
        subscriptions = []
        for s_index, sub in enumerate(topic.subscriptions):
            origins[("UserConfig", "Namespaces", 0, "Topics", t_index, "Subscriptions", s_index)] = sub.origin
            entry: dict[str, Any] = {"Name": sub.name}
            rules = [_rule_config(rule, sub, diags) for rule in sub.rules or () if not _is_default(rule)]
            if rules:
                entry["Rules"] = rules
            elif sub.rules is not None and not any(_is_default(rule) for rule in sub.rules):
                diags.append(Diagnostic(
                    "error", "emulator-config", f"{topic.name}/{sub.name} declares no rules, but the emulator gives a "
                    "subscription without rules the $Default (true) rule", sub.origin,
                ))
            subscriptions.append(entry)
        topics.append({"Name": topic.name, "Subscriptions": subscriptions})
    doc = {"UserConfig": {"Namespaces": [{"Name": NAMESPACE, "Queues": [], "Topics": topics}], "Logging": {"Type": "File"}}}
    def locate(path: tuple[Any, ...]) -> Origin | None:
        while path and path not in origins:
            path = path[:-1]
        return origins.get(path)

    diags += check(doc, locate)
    return doc, diags


def _is_default(rule: Rule) -> bool:
    """The ``$Default`` true rule, which the emulator makes for a subscription that lists no rules."""
    return rule.name == "$Default" and isinstance(rule.filter, TrueFilter) and isinstance(rule.action, EmptyAction)


def _rule_config(rule: Rule, sub: Subscription, diags: list[Diagnostic]) -> dict[str, Any]:
    properties: dict[str, Any]
    flt = rule.filter
    if isinstance(flt, CorrelationFilter):
        correlation: dict[str, Any] = {
            key: getattr(flt, field) for key, field in SYSTEM_FIELDS.items() if getattr(flt, field) is not None
        }
        values = {}
        for name, value in flt.properties:
            if value.type not in _JSON_TYPES:
                diags.append(Diagnostic(
                    "warning", "emulator-config",
                    f"rule {rule.name!r}: property {name!r} is {value.type.value} {value.value!r}, "
                    f"but Config.json carries a plain JSON value, which reads as {_json_type(value)}: correlation "
                    "filters compare types, so the emulator's rule may not match the same messages",
                    rule.origin or sub.origin,
                ))
            values[name] = _json_value(value)
        if values:
            correlation["Properties"] = values
        properties = {"FilterType": "Correlation", "CorrelationFilter": correlation}
    else:
        expression = "1=1" if isinstance(flt, TrueFilter) else "1=0" if isinstance(flt, FalseFilter) else flt.expression
        properties = {"FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}}
    if isinstance(rule.action, SqlRuleAction):
        properties["Action"] = {"SqlExpression": rule.action.expression}
    return {"Name": rule.name, "Properties": properties}


def _json_value(value: TypedValue) -> Any:
    if value.type in (ValueType.BOOL, ValueType.STRING) or isinstance(value.value, (int, float)):
        return value.value
    return str(value.to_typed_form())


def _json_type(value: TypedValue) -> str:
    python = _json_value(value)
    if isinstance(python, bool):
        return "bool"
    return "long" if isinstance(python, int) else "double" if isinstance(python, float) else "string"


# ------------------------------------------------------------------------------------------------
# Reading and checking
# ------------------------------------------------------------------------------------------------


def read_config(path: Path, display: str | None = None) -> tuple[DesiredState, list[Diagnostic]]:
    """The topology of a Config.json (every subscription managed, its rules as listed, none meaning
    ``$Default``), and its problems, located in the file."""
    try:
        doc, loc = read_document(path, display or str(path))
    except DocumentError as exc:
        return DesiredState(), [exc.diag]
    diags = check(doc, loc.origin)
    if any(d.severity == "error" for d in diags):
        return DesiredState(), diags
    namespace = doc["UserConfig"]["Namespaces"][0]
    topics = []
    for t_index, topic in enumerate(namespace.get("Topics") or []):
        t_path: tuple[Any, ...] = ("UserConfig", "Namespaces", 0, "Topics", t_index)
        subs = []
        for s_index, sub in enumerate(topic.get("Subscriptions") or []):
            s_path = (*t_path, "Subscriptions", s_index)
            rules = tuple(_rule_from_config(rule) for rule in sub.get("Rules") or [])
            subs.append(Subscription(sub["Name"], rules or (Rule("$Default", TrueFilter()),), origin=loc.origin(s_path)))
        topics.append(Topic(topic["Name"], tuple(subs), origin=loc.origin(t_path)))
    return DesiredState(tuple(topics)), diags


def _rule_from_config(rule: dict[str, Any]) -> Rule:
    properties = rule["Properties"]
    action = SqlRuleAction(properties["Action"]["SqlExpression"]) if "Action" in properties else EmptyAction()
    if properties["FilterType"] == "Sql":
        return Rule(rule["Name"], SqlFilter(properties["SqlFilter"]["SqlExpression"]), action)
    correlation = properties["CorrelationFilter"]
    fields = {field: correlation[key] for key, field in SYSTEM_FIELDS.items() if key in correlation}
    values = tuple((name, TypedValue.from_typed_form(value)) for name, value in (correlation.get("Properties") or {}).items())
    return Rule(rule["Name"], CorrelationFilter(**fields, properties=values), action)


def check(doc: Any, locate: Locate) -> list[Diagnostic]:
    """What Microsoft's emulator would refuse in a Config.json document (``locate``: where the value
    at a path was written, in the file itself or in the rule files it was made from)."""
    found: list[Diagnostic] = []

    def problem(path: tuple[Any, ...], message: str) -> None:
        found.append(Diagnostic("error", "emulator-config", message, locate(path)))

    def mapping(value: Any, path: tuple[Any, ...], what: str) -> bool:
        if not isinstance(value, dict):
            problem(path, f"{what} must be a JSON object")
            return False
        return True

    def listing(value: Any, path: tuple[Any, ...], what: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            problem(path, f"{what} must be a JSON array")
            return []
        return value

    def name(entry: dict[str, Any], path: tuple[Any, ...], what: str) -> str | None:
        value = entry.get("Name")
        if not isinstance(value, str):
            problem(path, f"{what} needs a \"Name\"")
            return None
        if not NAME.match(value):
            problem((*path, "Name"), f"{what} name {value!r}: the emulator accepts letters, digits, _ - . / only, starting "
                    "and ending with a letter or digit")
        return value

    if not mapping(doc, (), "the document") or not mapping(doc.get("UserConfig"), ("UserConfig",), "\"UserConfig\""):
        return found
    user = doc["UserConfig"]
    mapping(user.get("Logging"), ("UserConfig",), "\"Logging\" (e.g. {\"Type\": \"File\"})")
    namespaces = listing(user.get("Namespaces"), ("UserConfig", "Namespaces"), "\"Namespaces\"")
    if len(namespaces) != 1:
        problem(("UserConfig",), f"the emulator takes exactly one namespace, not {len(namespaces)}")
        return found
    ns_path: tuple[Any, ...] = ("UserConfig", "Namespaces", 0)
    namespace = namespaces[0]
    if not mapping(namespace, ns_path, "the namespace"):
        return found
    if namespace.get("Name") != NAMESPACE:
        problem((*ns_path, "Name") if "Name" in namespace else ns_path, f"the emulator's namespace must be named {NAMESPACE!r}")
    queues = listing(namespace.get("Queues"), (*ns_path, "Queues"), "\"Queues\"")
    topics = listing(namespace.get("Topics"), (*ns_path, "Topics"), "\"Topics\"")
    if len(queues) + len(topics) > MAX_ENTITIES:
        problem(ns_path, f"{len(queues)} queues and {len(topics)} topics: the emulator takes at most {MAX_ENTITIES} together")
    for t_index, topic in enumerate(topics):
        t_path = (*ns_path, "Topics", t_index)
        if not mapping(topic, t_path, "a topic"):
            continue
        topic_name = name(topic, t_path, "topic") or "?"
        subs = listing(topic.get("Subscriptions"), (*t_path, "Subscriptions"), "\"Subscriptions\"")
        if not subs:
            problem(t_path, f"topic {topic_name!r} has no subscriptions: the emulator refuses a topic without one")
        elif len(subs) > MAX_SUBSCRIPTIONS:
            problem((*t_path, "Subscriptions"),
                    f"topic {topic_name!r} has {len(subs)} subscriptions: the emulator takes at most {MAX_SUBSCRIPTIONS}")
        rule_count = 0
        for s_index, sub in enumerate(subs):
            s_path = (*t_path, "Subscriptions", s_index)
            if not mapping(sub, s_path, "a subscription"):
                continue
            sub_name = name(sub, s_path, "subscription") or "?"
            rules = listing(sub.get("Rules"), (*s_path, "Rules"), "\"Rules\"")
            rule_count += len(rules)
            for r_index, rule in enumerate(rules):
                _check_rule(rule, (*s_path, "Rules", r_index), f"{topic_name}/{sub_name}", problem, mapping, name)
        if rule_count > MAX_RULES_PER_TOPIC:
            problem(t_path,
                    f"topic {topic_name!r} has {rule_count} rules: the emulator takes at most {MAX_RULES_PER_TOPIC} per topic")
    return found


def _check_rule(rule: Any, path: tuple[Any, ...], where: str, problem: Any, mapping: Any, name: Any) -> None:
    if not mapping(rule, path, "a rule"):
        return
    rule_name = name(rule, path, f"{where}: rule") or "?"
    properties = rule.get("Properties")
    if not mapping(properties, path, f"{where}: rule {rule_name!r}: \"Properties\""):
        return
    p_path = (*path, "Properties")
    kind = properties.get("FilterType")
    if kind not in FILTER_TYPES:
        hint = next((k for k in FILTER_TYPES if isinstance(kind, str) and kind.lower().startswith(k.lower())), None)
        problem((*p_path, "FilterType") if "FilterType" in properties else p_path,
                f"{where}: rule {rule_name!r}: FilterType {kind!r} is not one the emulator knows: write \"Sql\" or "
                f"\"Correlation\"" + (f" (did you mean {hint!r}?)" if hint else ""))
        return
    body_key = "SqlFilter" if kind == "Sql" else "CorrelationFilter"
    body = properties.get(body_key)
    if not mapping(body, p_path, f"{where}: rule {rule_name!r}: FilterType {kind} needs \"{body_key}\""):
        return
    if kind == "Sql":
        expression = body.get("SqlExpression")
        if not isinstance(expression, str) or not expression.strip():
            problem((*p_path, body_key), f"{where}: rule {rule_name!r}: \"SqlFilter\" needs a \"SqlExpression\"")
        elif (too_long := limits.sql_text_problem(expression, "filter")) is not None:
            problem((*p_path, body_key, "SqlExpression"), f"{where}: rule {rule_name!r}: {too_long}")
    else:
        unknown = sorted(set(body) - set(SYSTEM_FIELDS) - {"Properties"})
        if unknown:
            problem((*p_path, body_key, unknown[0]), f"{where}: rule {rule_name!r}: the emulator's correlation filter "
                    f"has no {unknown[0]!r} (it knows {', '.join(sorted(SYSTEM_FIELDS))}, Properties)")
        if not body or body == {"Properties": {}}:
            problem((*p_path, body_key), f"{where}: rule {rule_name!r}: an empty correlation filter")
        for key, value in (body.get("Properties") or {}).items():
            if isinstance(value, (dict, list)) or value is None:
                problem((*p_path, body_key, "Properties", key), f"{where}: rule {rule_name!r}: property {key!r} must be "
                        "a string, number or true/false")

