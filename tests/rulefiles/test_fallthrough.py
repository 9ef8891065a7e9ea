"""`fallthrough: true`: the loader writes the subscription's one rule, or one located error."""

from __future__ import annotations

import pytest

from reconciler import rulefiles
from reconciler.model import Rule, SqlFilter
from reconciler.plan import plan_subscription
from reconciler.rulefiles.render import topic_document
from reconciler.sql.fallthrough import FALLTHROUGH_RULE_NAME

pytestmark = pytest.mark.unit

SHOP = """
topic: orders
subscriptions:
  billing:
    rules:
      - {name: eu, sql: "region = 'eu'"}
  audit:
    rules:
      - {name: refunds, correlation: {subject: refund, properties: {vip: true}}}
  tap: {sampling_tap: true, rules: [{name: all, filter: true}]}
  leftovers: {fallthrough: true}
"""


def _fallthrough(state):
    return state.topic("orders").subscription("leftovers")


def test_the_generated_rule_leaves_out_the_tap(write):
    result = rulefiles.load([write("orders.yaml", SHOP)])
    assert result.ok, result.diagnostics
    sub = _fallthrough(result.state)
    assert sub.fallthrough and sub.rules == (
        Rule(
            FALLTHROUGH_RULE_NAME,
            SqlFilter(
                "NOT (EXISTS(region) AND region = 'eu' OR sys.Label = 'refund' AND (EXISTS(vip) AND vip = TRUE))"
            ),
        ),
    )
    assert topic_document(result.state.topic("orders"))["subscriptions"]["leftovers"] == {"fallthrough": True}


def test_a_change_elsewhere_is_a_replace_of_the_generated_rule(write):
    before = _fallthrough(rulefiles.load([write("a/orders.yaml", SHOP)]).state)
    after = _fallthrough(rulefiles.load([write("b/orders.yaml", SHOP.replace("'eu'", "'us'"))]).state)
    sp = plan_subscription("orders", "leftovers", list(after.rules), list(before.rules))
    assert [(c.kind, c.rule) for c in sp.changes] == [("replace", FALLTHROUGH_RULE_NAME)]


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (SHOP.replace("{fallthrough: true}", "{fallthrough: true, rules: []}"), "remove its rules"),
        (SHOP.replace("{fallthrough: true}", "{fallthrough: true, sampling_tap: true}"), "sampling tap"),
        (SHOP + "  more: {fallthrough: true}\n", "at most one"),
        (SHOP + "  other: {}\n", "'other' declares no rules"),
        (SHOP.replace("vip: true", "tier: {int: 3}"), "rule audit/refunds cannot be expressed"),
        (
            SHOP.replace("region = 'eu'", "region = '" + "e" * 1000 + "'"),
            "the limit is 1024",
        ),
    ],
)
def test_what_cannot_be_generated_is_one_clear_error(write, text, cause):
    result = rulefiles.load([write("orders.yaml", text)])
    errors = [d for d in result.diagnostics if d.code == "fallthrough"]
    assert not result.ok and errors and cause in errors[0].message, result.diagnostics
    assert errors[0].message.startswith("fall-through subscription orders/")
    assert errors[0].origin is not None
