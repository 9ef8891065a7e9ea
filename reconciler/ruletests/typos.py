"""Located warnings for names in a test case that the rules never mention: a topic or
subscription not declared, a property no rule reads or sets, a rule that does not exist. Each is
most likely a typo, which would make the case pass or fail for the wrong reason."""

from __future__ import annotations

from typing import Iterator, Sequence

from reconciler.diagnostics import Diagnostic
from reconciler.model import CorrelationFilter, DesiredState, SqlFilter, SqlRuleAction, Subscription, Topic
from reconciler.names import name_key
from reconciler.rulefiles.project import Environment
from reconciler.ruletests.cases import Case
from reconciler.sql import ast, compiled_action, compiled_filter
from reconciler.sql.errors import SqlError
from reconciler.sql.routing import RULE_NAME_PROPERTY


def typo_warnings(cases: Sequence[Case], state: DesiredState, environment: Environment | None) -> list[Diagnostic]:
    """A warning for each name in ``cases`` that the declared rules do not know."""
    out: list[Diagnostic] = []
    mentioned: dict[str, set[str]] = {}
    subscriptions: dict[str, dict[str, Subscription]] = {}
    for case in cases:
        actual = environment.actual_topic(case.topic) if environment is not None else case.topic
        topic = state.topic(actual)
        if topic is None:
            out.append(Diagnostic("warning", "test-unknown-topic",
                                  f"case {case.name!r}: topic {case.topic!r} is not declared", case.origin))
            continue
        if topic.name not in mentioned:
            mentioned[topic.name] = mentioned_properties(topic)
        known = mentioned[topic.name]
        if topic.name not in subscriptions:
            subscriptions[topic.name] = {name_key(sub.name): sub for sub in topic.subscriptions}
        for name in case.expect.named():
            sub = subscriptions[topic.name].get(name_key(name))
            if sub is None:
                out.append(Diagnostic("warning", "test-unknown-subscription",
                                      f"case {case.name!r}: topic {case.topic!r} has no subscription {name!r}", case.origin))
            else:
                for copy in case.expect.copies.get(name, ()):
                    if copy.rule is not None and sub.rule(copy.rule) is None:
                        out.append(Diagnostic("warning", "test-unknown-rule",
                                              f"case {case.name!r}: subscription {name!r} has no rule {copy.rule!r}",
                                              copy.origin))
        for scope, prop in case.property_origins:  # each place found only for a warning
            if scope == "user" and name_key(prop) not in known:
                out.append(Diagnostic("warning", "test-unknown-property",
                                      f"case {case.name!r}: no rule of topic {case.topic!r} reads property {prop!r}",
                                      case.property_origins[scope, prop]))
    return out


def mentioned_properties(topic: Topic) -> set[str]:
    """The name keys of every application property the topic's rules read or set."""
    found = {name_key(RULE_NAME_PROPERTY)}
    for sub in topic.subscriptions:
        for rule in sub.rules or ():
            if isinstance(rule.filter, CorrelationFilter):
                found.update(name_key(name) for name, _ in rule.filter.properties)
            nodes: list[ast.Node] = []
            try:
                if isinstance(rule.filter, SqlFilter):
                    nodes.append(compiled_filter(rule.filter.expression).node)
                if isinstance(rule.action, SqlRuleAction):
                    nodes.append(compiled_action(rule.action.expression).node)
            except SqlError:
                pass
            found.update(_user_names(nodes))
    return found


def _user_names(nodes: list[ast.Node]) -> Iterator[str]:
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Property) and node.scope == "user":
            yield name_key(node.name)
        elif isinstance(node, ast.Function) and node.args and isinstance(node.args[0], ast.Literal):
            yield name_key(str(node.args[0].value))
        stack.extend(ast.children(node))
