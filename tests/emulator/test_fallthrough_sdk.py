"""End to end: the fall-through subscription, applied with `sbrules apply` to the emulator and fed
by Microsoft's SDK, holds exactly the messages no other subscription receives."""

from __future__ import annotations

import pytest

from tests.emulator import fallthrough_shop as shop

pytestmark = pytest.mark.slow


def test_the_fallthrough_holds_exactly_the_unrouted_messages(run_cli, tmp_path):
    with shop.empty_emulator() as emulator:
        rules, held = shop.apply_and_publish(emulator, run_cli, tmp_path)
        code, out, err = run_cli("plan", rules, "--detailed-exitcode", "--connection-string", emulator.connection_string)
        assert code == 0, out + err  # the generated rule is live and unchanged
    assert held["tap"] == set(shop.MESSAGES)
    assert held["leftovers"] == shop.python_unrouted(rules) == shop.UNROUTED
    assert held["leftovers"] == set(shop.MESSAGES) - held["billing"] - held["audit"]


def test_a_subscription_no_file_mentions_receives_too_so_the_fallthrough_leaves_its_messages_out(run_cli, tmp_path):
    with shop.empty_emulator(shop.BYSTANDER) as emulator:
        subscriptions = (*shop.SUBSCRIPTIONS, shop.BYSTANDER.name)
        rules, held = shop.apply_and_publish(emulator, run_cli, tmp_path, subscriptions)
        code, out, err = run_cli("plan", rules, "--detailed-exitcode", "--connection-string", emulator.connection_string)
        assert code == 0, out + err  # the plan generates the same rule again: in sync
        assert "undeclared orders/legacy" in out
        live = {r.name: r for r in emulator.namespace.rules("orders", "leftovers")}
    assert held["legacy"] == {"us", "small", "big-and-us"}
    assert held["leftovers"] == shop.UNROUTED - held["legacy"]
    assert held["leftovers"] == set(shop.MESSAGES) - held["billing"] - held["audit"] - held["legacy"]
    assert "region = 'us'" in live["fallthrough"].filter.expression
