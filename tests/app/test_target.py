"""The target: made once from the options, both transports share one pacer, an explicit budget asks nothing.

The tier probe itself (Standard keeps the budget, Premium drops it) is exercised against the
emulator through the command line in tests/reconcile/test_throttled.py.
"""

from __future__ import annotations

import pytest

from reconciler.app.target import Target, TargetOptions
from reconciler.errors import UsageError
from reconciler.model import Origin
from reconciler.namespace.credits import DEFAULT_CREDIT_SHARE, STANDARD_CREDITS_PER_SECOND
from reconciler.rulefiles.project import Environment

pytestmark = pytest.mark.unit

CONNECTION_STRING = "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=secret"


def test_the_amqp_and_rest_clients_share_one_pacer():
    target = Target.connect(CONNECTION_STRING, max_credits=200)
    amqp, rest = target.amqp(), target.rest()
    try:
        assert amqp.pacer is target.pacer() is rest.pacer
        assert amqp.pacer.budget == 200
    finally:
        amqp.close()
        rest.close()


def test_an_explicit_budget_starts_no_tier_probe_and_close_returns_at_once():
    with Target.connect(CONNECTION_STRING, max_credits=100) as target:
        target.pacer()
        assert target._probe is None


def test_the_default_budget_is_a_share_of_a_standard_namespace():
    assert Target.connect(CONNECTION_STRING).credit_budget == DEFAULT_CREDIT_SHARE * STANDARD_CREDITS_PER_SECOND
    assert Target.connect(CONNECTION_STRING, credit_share=0.5).credit_budget == 0.5 * STANDARD_CREDITS_PER_SECOND


def test_the_options_make_a_target_whose_address_is_the_namespace_host():
    target = TargetOptions(CONNECTION_STRING, timeout=5.0, max_credits=10).without_discovery(True).target()
    assert (target.address, target.timeout, target.max_credits, target.discovery) == (
        "myns.servicebus.windows.net", 5.0, 10, False,
    )
    assert "secret" not in repr(TargetOptions(CONNECTION_STRING))


def test_no_connection_string_anywhere_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("SERVICEBUS_CONNECTION_STRING", raising=False)
    with pytest.raises(UsageError, match="--connection-string or set \\$SERVICEBUS_CONNECTION_STRING"):
        TargetOptions().target()


def test_an_environment_names_its_namespace_by_variable_and_refuses_an_explicit_one(monkeypatch):
    env = Environment("prod", Origin("sbrules.yaml", 3, 3), connection_string_env="PROD_SB")
    monkeypatch.setenv("PROD_SB", CONNECTION_STRING.replace("myns", "prodns"))
    assert TargetOptions().target(env).address == "prodns.servicebus.windows.net"
    with pytest.raises(UsageError, match=r"takes its namespace from sbrules\.yaml"):
        TargetOptions(CONNECTION_STRING, explicit=True).target(env)
    monkeypatch.delenv("PROD_SB")
    with pytest.raises(UsageError, match="reads it from \\$PROD_SB, which is not set"):
        TargetOptions().target(env)


def test_a_proxy_plain_amqp_cannot_use_is_said_once_as_a_note():
    notes: list[str] = []
    TargetOptions(CONNECTION_STRING, proxy="http://proxy.example:3128").target(note=notes.append)
    assert len(notes) == 1 and "plain AMQP (port 5671) cannot go through an HTTP proxy" in notes[0]
