"""The client factory: both transports share one pacer; an explicit budget asks nothing.

The tier probe itself (Standard keeps the budget, Premium drops it) is exercised against the
emulator through the command line in tests/reconcile/test_throttled.py.
"""

from __future__ import annotations

import pytest

from reconciler.namespace.clients import Clients
from reconciler.namespace.credits import DEFAULT_CREDIT_SHARE, STANDARD_CREDITS_PER_SECOND

pytestmark = pytest.mark.unit

CONNECTION_STRING = "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=secret"


def test_the_amqp_and_rest_clients_share_one_pacer():
    clients = Clients(CONNECTION_STRING, max_credits=200)
    amqp, rest = clients.amqp(), clients.rest()
    try:
        assert amqp.pacer is clients.pacer() is rest.pacer
        assert amqp.pacer.budget == 200
    finally:
        amqp.close()
        rest.close()


def test_an_explicit_budget_starts_no_tier_probe_and_close_returns_at_once():
    with Clients(CONNECTION_STRING, max_credits=100) as clients:
        clients.pacer()
        assert clients._probe is None


def test_the_default_budget_is_a_share_of_a_standard_namespace():
    assert Clients(CONNECTION_STRING).credit_budget == DEFAULT_CREDIT_SHARE * STANDARD_CREDITS_PER_SECOND
    assert Clients(CONNECTION_STRING, credit_share=0.5).credit_budget == 0.5 * STANDARD_CREDITS_PER_SECOND
