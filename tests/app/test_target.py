"""The target: made once from the options, both transports share one pacer, an explicit budget asks nothing.

The tier probe itself (Standard keeps the budget, Premium drops it) is exercised against the
emulator through the command line in tests/reconcile/test_throttled.py.
"""

from __future__ import annotations

import pytest

from reconciler.app.target import Target, TargetOptions
from reconciler.errors import InputError, UsageError
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


def test_max_rate_paces_every_client_of_the_target_whichever_is_made_first():
    # The request rate belongs to the target, not to whichever call made its pacer first.
    target = TargetOptions(CONNECTION_STRING, max_credits=1000, max_rate=1).target()
    rest, amqp = target.rest(), target.amqp()
    try:
        assert rest.pacer is amqp.pacer
        assert amqp.pacer.try_acquire() == 0.0
        assert amqp.pacer.try_acquire() > 0.5  # the next request waits about a second
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


def test_an_entra_environment_names_its_endpoint_and_its_management_url():
    env = Environment(
        "prod", Origin("sbrules.yaml", 3, 3), endpoint="sb://prodns.servicebus.windows.net/",
        management_endpoint="https://management.example/",
    )
    target = TargetOptions(CONNECTION_STRING).target(env)
    assert (target.address, target.auth, target.management_endpoint) == (
        "prodns.servicebus.windows.net", "entra", "https://management.example/",
    )
    assert target.connection.key is None  # the explicit key is not carried over to another namespace


def test_an_environments_plain_http_management_url_to_a_remote_host_is_an_input_error():
    env = Environment("prod", Origin("sbrules.yaml", 3, 3), management_endpoint="http://management.example/")
    with pytest.raises(InputError, match=r"environment 'prod': management_endpoint .*loopback host only"):
        TargetOptions(CONNECTION_STRING).target(env)


def test_neither_the_options_nor_the_target_show_a_key_or_a_proxy_password():
    options = TargetOptions(CONNECTION_STRING, transport="websockets", proxy="http://user:hunter2@proxy.example:3128")
    target = options.target()
    shown = repr(options) + repr(target) + str(target.network)
    assert "secret" not in shown and "hunter2" not in shown
    assert "proxy.example" in repr(target)  # where it goes is shown, only not how it authenticates
