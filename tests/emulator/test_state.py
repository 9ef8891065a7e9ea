"""The state file: atomic rewrites, and a restart that keeps rules, messages and session state."""

from __future__ import annotations

import datetime as _dt
import json
import threading

import proton
import pytest

from reconciler.amqp.client import ManagementClient
from reconciler.emulator import Emulator
from reconciler.emulator import state as persistence
from reconciler.emulator.namespace import Namespace, parse_address
from reconciler.model import CorrelationFilter, Rule, SqlFilter, SqlRuleAction

from .conftest import ORDERS

NEW_RULE = Rule("vip", SqlFilter("tier = 'vip'"), SqlRuleAction("SET seen = 1"))


def test_restart_keeps_rules_messages_and_session_state(tmp_path):
    path = tmp_path / "state.json"
    with Emulator(ORDERS, state_file=path) as emu:
        with ManagementClient(emu.connection_string, timeout=10) as mgmt:
            mgmt.add_rule("orders", "all", NEW_RULE)
            mgmt.remove_rule("orders", "all", "$Default")
        emu.broker.publish(parse_address("orders"), proton.Message(body="kept", properties={"tier": "vip"}))
        emu.broker.publish(parse_address("orders"), proton.Message(body="s", group_id="g1"))
        store = emu.namespace.subscription("orders", "sessions").store
        emu.broker.accept_session(store, "g1", owner="test")
        emu.broker.set_session_state(store, "g1", b"cursor=7")
    assert path.exists()
    with Emulator(ORDERS, state_file=path) as emu:
        assert emu.namespace.rules("orders", "all") == [NEW_RULE]
        assert emu.namespace.rules("orders", "eu") == [Rule("eu", CorrelationFilter(properties={"region": "eu"}))]
        (kept,) = emu.namespace.subscription("orders", "all").store.messages.values()
        decoded = proton.Message()
        decoded.decode(kept.payload)
        assert decoded.body == "kept"
        assert kept.sequence_number == 1
        store = emu.namespace.subscription("orders", "sessions").store
        assert store.sessions["g1"].state == b"cursor=7"
        emu.broker.publish(parse_address("orders"), proton.Message(body="next", properties={"tier": "vip"}))
        numbers = sorted(emu.namespace.subscription("orders", "all").store.messages)
        assert numbers == [1, 3]  # the topic numbers its messages, on after the restart; "s" (2) went to sessions


def test_state_is_saved_soon_after_a_change_without_stopping(tmp_path):
    path = tmp_path / "state.json"
    saved = threading.Event()
    with Emulator(ORDERS, state_file=path) as emu:
        emu.namespace.add_rule("orders", "all", NEW_RULE)
        emu.when_saved(saved.set)
        assert saved.wait(10), "the change was not saved while the emulator ran"
        doc = json.loads(path.read_text())
    (orders,) = doc["topics"]
    (all_sub,) = [s for s in orders["subscriptions"] if s["name"] == "all"]
    names = [r["rule"]["name"] for r in all_sub["rules"]]
    assert names == ["$Default", "vip"]


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    namespace = Namespace()
    namespace.seed(ORDERS)
    path = tmp_path / "state.json"
    path.write_text("old")
    persistence.save(namespace, path)
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    restored = Namespace()
    assert persistence.load(restored, path)
    assert restored.rules("orders", "eu") == namespace.rules("orders", "eu")


def test_damaged_state_file_is_a_clear_error(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"version": 1, "topics": [{"nope": 1}]}')
    with pytest.raises(persistence.StateFileError, match="damaged"):
        Emulator(state_file=path)
    path.write_text("{not json")
    with pytest.raises(persistence.StateFileError, match="cannot read"):
        Emulator(state_file=path)


def test_scheduled_messages_survive_a_restart_and_arrive_when_due(tmp_path):
    path = tmp_path / "state.json"
    due = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0) + _dt.timedelta(hours=1)
    with Emulator(ORDERS, state_file=path) as emu:
        emu.broker.publish(
            parse_address("orders"),
            proton.Message(
                body="later",
                annotations={proton.symbol("x-opt-scheduled-enqueue-time"): proton.timestamp(due.timestamp() * 1000)},
            ),
        )
        assert emu.namespace.topic("orders").store.scheduled == {1}
    with Emulator(ORDERS, state_file=path) as emu:
        assert emu.namespace.topic("orders").store.scheduled == {1}
        store = emu.namespace.subscription("orders", "all").store
        assert not emu.broker.tick(now=due - _dt.timedelta(milliseconds=1))
        assert not store.messages
        assert emu.broker.tick(now=due)
        assert len(store.messages) == 1
        assert emu.namespace.topic("orders").store.messages == {}


def test_rules_keep_their_created_at_across_a_restart(tmp_path):
    path = tmp_path / "state.json"
    with Emulator(ORDERS, state_file=path) as emu, ManagementClient(emu.connection_string, timeout=10) as mgmt:
        mgmt.add_rule("orders", "all", NEW_RULE)
        created = {r.name: r.created_at for r in mgmt.list_rules("orders", "all")}
    assert created["vip"] is not None and created["vip"].tzinfo is not None
    with Emulator(ORDERS, state_file=path) as emu, ManagementClient(emu.connection_string, timeout=10) as mgmt:
        assert {r.name: r.created_at for r in mgmt.list_rules("orders", "all")} == created
