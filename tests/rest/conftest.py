"""Fixtures: one emulator per module holding a namespace worth discovering (read-only tests share it)."""

from __future__ import annotations

import pytest

from reconciler import model
from reconciler.emulator import Emulator

LISTENER, LISTENER_KEY = "listener", "listen-only-key"
#: A subscription rule set with every filter kind, an action and every typed value REST can carry.
RULES = (
    model.Rule("high-value", model.SqlFilter("amount > 1000 AND currency = 'EUR'"),
               model.SqlRuleAction("SET sys.Label = 'priority'")),
    model.Rule("refunds", model.CorrelationFilter(
        correlation_id="c1", message_id="m1", to="t", reply_to="r", subject="refund", session_id="s",
        reply_to_session_id="rs", content_type="application/json",
        properties={"tier": {"int": 3}, "big": {"long": 3}, "region": "eu", "ratio": 1.5, "vip": True,
                    "id": {"uuid": "6f1d3b8e-52a5-4a43-9ad6-3d7d8f0f1a2b"},
                    "since": {"timestamp": "2026-01-01T00:00:00.125Z"}})),
    model.Rule("paused", model.FalseFilter()),
    model.Rule("$Default", model.TrueFilter()),
)
MANY = 250


@pytest.fixture(scope="module")
def namespace_emulator():
    """Topics ``orders`` (250 subscriptions named s000..s249 plus ``forwarded`` and ``sessions``) and
    ``payments`` (none); a Listen-only key ``listener``."""
    emu = Emulator(listen_keys={LISTENER: LISTENER_KEY})
    for index in range(MANY):
        emu.namespace.create_subscription("orders", f"s{index:03}", RULES)
    emu.namespace.create_queue("archive")
    emu.namespace.create_subscription("orders", "forwarded", RULES, forward_to="archive")
    emu.namespace.create_subscription("orders", "sessions", requires_session=True)
    emu.namespace.create_topic("payments")
    with emu:
        yield emu
