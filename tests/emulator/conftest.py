"""Fixtures: an in-process emulator with a small namespace (orders topic, queue work)."""

from __future__ import annotations

import pytest

from reconciler import model
from reconciler.emulator import Emulator

ORDERS = model.DesiredState(
    topics=(
        model.Topic(
            "orders",
            (
                model.Subscription("all"),
                model.Subscription("sessions"),
                model.Subscription(
                    "eu",
                    (model.Rule("eu", model.CorrelationFilter(properties={"region": "eu"})),),
                ),
            ),
        ),
    )
)


@pytest.fixture
def emulator():
    emu = Emulator(ORDERS)
    emu.namespace.create_queue("work")
    with emu:
        yield emu
