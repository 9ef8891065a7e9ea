"""Fixtures: a live emulated namespace (reconciler.emulator) over real loopback sockets."""

from __future__ import annotations

import pytest

from reconciler import model as m
from reconciler.emulator import Emulator

SEED = m.DesiredState(
    topics=(
        m.Topic(
            "orders",
            (
                m.Subscription("all", rules=(m.Rule("$Default", m.TrueFilter()),)),
                m.Subscription("billing", rules=(m.Rule("big", m.SqlFilter("amount > 100")),)),
                m.Subscription("empty", rules=()),
            ),
        ),
    )
)


@pytest.fixture
def emulator():
    with Emulator(SEED) as emu:
        yield emu


@pytest.fixture
def client(emulator):
    from reconciler.amqp.client import ManagementClient

    with ManagementClient(emulator.connection_string, timeout=5, retries=3, backoff=0.01) as c:
        yield c
