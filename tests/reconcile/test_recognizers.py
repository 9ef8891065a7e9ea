"""Each framework's recognizer against the rules that framework's own sources and tests write
(the file each example comes from is named beside it), and against rules it must not claim."""

from __future__ import annotations

import pytest

from reconciler.model import CorrelationFilter, FalseFilter, Rule, SqlFilter, SqlRuleAction, TrueFilter
from reconciler.recognizers import RECOGNIZERS, recognize

pytestmark = pytest.mark.unit

DEFAULT_TRUE = Rule("$Default", TrueFilter())

#: Particular/NServiceBus.Transport.AzureServiceBus: the approved CreateRuleOptions of
#: MigrationTopologySubscriptionManagerTests (a rule name from the migration map), and
#: Administration/SubscriptionManager.cs's rule named after the event type.
NSB_MAPPED = Rule("MyRuleName1", SqlFilter(
    "[NServiceBus.EnclosedMessageTypes] LIKE '%NServiceBus.Transport.AzureServiceBus.Tests."
    "MigrationTopologySubscriptionManagerTests+MyEvent1%'"
))
NSB_EVENT = Rule("Shop.Messages.OrderPlaced", SqlFilter("[NServiceBus.EnclosedMessageTypes] LIKE '%Shop.Messages.OrderPlaced%'"))
#: MigrationTopologySubscriptionManager.SetupInfrastructureCore: the endpoint's subscription is
#: created with CreateRuleOptions("$default", new FalseRuleFilter()).
NSB_DEFAULT = Rule("$default", FalseFilter())

#: MassTransit/MassTransit, MassTransit.Azure.ServiceBus.Core.Tests, Specifying_a_subscription_rule.
MT_TOPIC = "masstransit.azure.servicebus.core.tests.topologytesttypes/messageb"
MT_RULE = Rule("test-rule", SqlFilter("0 = 1"), SqlRuleAction("SET A = 1"))


def test_nservicebus_rules_named_after_their_event_type():
    found = recognize("bundle-1", NSB_EVENT, [NSB_DEFAULT, NSB_EVENT])
    assert str(found) == (
        "looks like NServiceBus: rule named after an event type (Shop.Messages.OrderPlaced), "
        "filtering [NServiceBus.EnclosedMessageTypes] on it"
    )


def test_nservicebus_rules_with_a_mapped_name_are_recognised_by_their_filter():
    found = recognize("SubscribeTopic", NSB_MAPPED, [NSB_MAPPED])
    assert found is not None and found.framework == "NServiceBus"
    assert "MigrationTopologySubscriptionManagerTests+MyEvent1" in found.evidence and "rule named" not in found.evidence


def test_nservicebus_endpoint_subscriptions_default_false_rule():
    found = recognize("bundle-1", NSB_DEFAULT, [NSB_DEFAULT])
    assert found is not None and found.framework == "NServiceBus"


def test_masstransit_subscription_rules_on_topics_named_after_message_types():
    found = recognize(MT_TOPIC, MT_RULE, [MT_RULE])
    assert found is not None and found.framework == "MassTransit"
    assert "masstransit.azure.servicebus.core.tests.topologytesttypes/messageb" in found.evidence
    assert "the one rule of a subscription" in found.evidence


def test_a_rule_beside_others_on_a_message_type_topic_is_not_claimed_for_masstransit():
    """The topic's name alone is no evidence: a team's rules there are the team's."""
    team = Rule("team-a-big", SqlFilter("amount > 1000"))
    assert recognize(MT_TOPIC, team, [team, Rule("team-a-eu", CorrelationFilter(subject="eu"))]) is None


def test_dapr_subscriptions_hold_only_the_default_true_rule():
    found = recognize("orders", DEFAULT_TRUE, [DEFAULT_TRUE])
    assert found is not None and found.framework == "Dapr" and str(found).startswith("looks like Dapr: ")
    assert recognize("orders", DEFAULT_TRUE, [DEFAULT_TRUE, Rule("other", TrueFilter())]) is None


@pytest.mark.parametrize("topic, rule", [
    ("orders", Rule("high-value", SqlFilter("amount > 1000"))),
    ("orders", Rule("eu", CorrelationFilter(subject="eu"))),
    ("orders", Rule("x", SqlFilter("[NServiceBus.EnclosedMessageTypes] = 'A'"))),  # not the LIKE it writes
    ("orders/eu", Rule("x", TrueFilter())),  # one segment is no namespace
    ("orders", Rule("$Default", TrueFilter())),  # beside other rules: any subscription's catch-all
])
def test_ordinary_rules_are_not_claimed(topic, rule):
    assert recognize(topic, rule, [rule, Rule("mine", TrueFilter())]) is None


def test_every_label_says_it_is_only_a_likeness():
    assert list(RECOGNIZERS) == ["NServiceBus", "MassTransit", "Dapr"]
    for topic, rule in (("bundle-1", NSB_EVENT), (MT_TOPIC, MT_RULE), ("orders", DEFAULT_TRUE)):
        assert str(recognize(topic, rule, [rule])).startswith("looks like ")
