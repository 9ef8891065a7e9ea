"""Which framework a live rule looks like it was written by: one recognizer per framework.

Each recognizer matches the naming and shape its framework's own sources write, and says what it
matched; a match is evidence, never proof (anyone can write a rule that looks like this), so every
label reads "looks like X: <what matched>". docs/coexistence.md lists the sources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from reconciler.model import DEFAULT_RULE_NAME, FalseFilter, Rule, SqlFilter, TrueFilter
from reconciler.names import same_name


@dataclass(frozen=True)
class Recognition:
    """A framework a rule looks like it was written by, and the evidence."""

    framework: str
    evidence: str

    def __str__(self) -> str:
        return f"looks like {self.framework}: {self.evidence}"


#: NServiceBus' Azure Service Bus transport subscribes an endpoint to an event with a SQL rule
#: ``[NServiceBus.EnclosedMessageTypes] LIKE '%<event type's full name>%'`` named after the event
#: type (its full name, or what the rule-name convention makes of one longer than 50 characters):
#: Particular/NServiceBus.Transport.AzureServiceBus, src/Transport/Administration/SubscriptionManager.cs
#: (versions 1 to 4, forwarding topology) and src/Transport/EventRouting/MigrationTopologySubscriptionManager.cs
#: (version 5, migration topology; both create the endpoint's subscription with ``$default``
#: holding a false filter).
_NSB_FILTER = re.compile(r"\s*\[NServiceBus\.EnclosedMessageTypes\]\s+LIKE\s+'%(?P<type>[^%']+)%'\s*", re.IGNORECASE)


def nservicebus(topic: str, rule: Rule, live: Sequence[Rule]) -> str | None:
    """NServiceBus' event subscription rule, or the false ``$default`` of its endpoint subscriptions."""
    if isinstance(rule.filter, SqlFilter):
        match = _NSB_FILTER.fullmatch(rule.filter.expression)
        if match is None:
            return None
        event = match.group("type")
        if same_name(rule.name, event):
            return f"rule named after an event type ({event}), filtering [NServiceBus.EnclosedMessageTypes] on it"
        return f"filter [NServiceBus.EnclosedMessageTypes] LIKE '%{event}%' (an event type)"
    if isinstance(rule.filter, FalseFilter) and same_name(rule.name, DEFAULT_RULE_NAME):
        return "$default with a false filter, as its topology creates an endpoint's subscription"
    return None


#: MassTransit names a message type's topic ``Namespace/TypeName`` (``/`` between namespace and
#: type, ``--`` around generic arguments): MassTransit/MassTransit, src/Transports/MassTransit.Azure.ServiceBus.Core,
#: ServiceBusMessageNameFormatter (DefaultMessageNameFormatter("---", "--", "/", "-")). A receive
#: endpoint's subscription there holds one rule: the one its ``Subscribe(topic, subscription, cb =>
#: cb.Rule = ...)`` configures (the subscription is created with it, and a later start updates that
#: rule in place), else the service's catch-all ``$Default``: the test Specifying_a_subscription_rule
#: (topic "masstransit.azure.servicebus.core.tests.topologytesttypes/messageb", rule "test-rule").
_MASSTRANSIT_TOPIC = re.compile(r"(?P<namespace>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)+)/(?P<type>[A-Za-z_][\w\-]*)")


def masstransit(topic: str, rule: Rule, live: Sequence[Rule]) -> str | None:
    """The one rule of a subscription on a topic named after a message type, as MassTransit's
    publish topology names the topic and its subscription endpoint writes the rule."""
    match = _MASSTRANSIT_TOPIC.fullmatch(topic)
    if match is None or len(live) != 1:
        return None
    return (f"the one rule of a subscription on a topic named after a message type "
            f"({match.group('namespace')}/{match.group('type')}, Namespace/TypeName)")


#: Dapr's Service Bus pub/sub component creates a subscription (named after the consumer ID, the app
#: ID by default) without rule options, so the service gives it ``$Default`` with a true filter and
#: nothing else, and Dapr filters in the sidecar: dapr/components-contrib,
#: common/component/azure/servicebus/client.go (Client.createSubscription).
def dapr(topic: str, rule: Rule, live: Sequence[Rule]) -> str | None:
    """A subscription whose one rule is the catch-all ``$Default`` (Dapr leaves its subscriptions so;
    so does any client that creates a subscription without rules)."""
    if same_name(rule.name, DEFAULT_RULE_NAME) and isinstance(rule.filter, TrueFilter) and len(live) == 1:
        return ("the subscription's one rule is $Default with a true filter, as Dapr's Service Bus component "
                "creates it (it filters in the sidecar)")
    return None


#: Framework → recognizer, tried in this order (the first match labels the rule).
RECOGNIZERS: dict[str, Callable[[str, Rule, Sequence[Rule]], str | None]] = {
    "NServiceBus": nservicebus,
    "MassTransit": masstransit,
    "Dapr": dapr,
}


def recognize(topic: str, rule: Rule, live: Sequence[Rule]) -> Recognition | None:
    """The first framework whose signature ``rule`` (one of its subscription's ``live`` rules, on
    ``topic``) matches, with what matched; None when none does."""
    for framework, recognizer in RECOGNIZERS.items():
        evidence = recognizer(topic, rule, live)
        if evidence is not None:
            return Recognition(framework, evidence)
    return None
