"""A sample never drops a distinct message: identity is the sequence number in the topic, never the
MessageId; and its manifest says what it holds and where it has gaps (against the emulator, sent with
Microsoft's SDK)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from reconciler import model
from reconciler.traffic.sample import manifest
from reconciler.traffic.sample.sampler import STATE_FILE

EU = model.Rule("eu", model.CorrelationFilter(properties={"region": "eu"}))
ORDERS = model.DesiredState(
    topics=(model.Topic("orders", (model.Subscription("all"), model.Subscription("eu", (EU,)))),)
)


@pytest.fixture
def emulator():
    from reconciler.emulator import Emulator

    with Emulator(ORDERS) as emu:
        yield emu


def _send(emulator, messages: list[tuple[str, str]]) -> None:
    """One batch (one transfer: one enqueued millisecond) of (message id, region) messages."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as sb:
        with sb.get_topic_sender("orders") as sender:
            batch = sender.create_message_batch()
            for i, (message_id, region) in enumerate(messages):
                batch.add_message(
                    ServiceBusMessage(f"body {i}", message_id=message_id, application_properties={"region": region})
                )
            sender.send_messages(batch)


def _sample(run_cli, emulator, out, *subscriptions: str) -> dict:
    args = [a for s in subscriptions for a in ("--subscription", s)]
    code, stdout, stderr = run_cli(
        "sample", "--topic", "orders", *args, "--out", out, "--format", "json",
        "--connection-string", emulator.connection_string,
    )
    assert code == 0, stderr
    return json.loads(stdout)


def test_messages_sharing_a_message_id_and_a_millisecond_are_all_stored(emulator, run_cli, tmp_path):
    _send(emulator, [("same", "eu"), ("same", "us"), ("same", "eu")])
    stats = _sample(run_cli, emulator, tmp_path / "s", "all")
    assert stats["written"] == 3
    rows = pq.read_table(tmp_path / "s").to_pylist()
    assert len({r["enqueued_time"] for r in rows}) == 1  # one millisecond, one message id
    assert sorted(r["sequence_number"] for r in rows) == [1, 2, 3]
    assert sorted(dict(r["props"])["region"]["s"] for r in rows) == ["eu", "eu", "us"]


def test_two_subscriptions_of_one_topic_store_each_message_once(emulator, run_cli, tmp_path):
    _send(emulator, [("a", "eu"), ("a", "us"), ("b", "eu"), ("c", "us")])
    stats = _sample(run_cli, emulator, tmp_path / "s", "eu", "all")
    by_sub = {s["subscription"]: s for s in stats["subscriptions"]}
    assert (by_sub["eu"]["written"], by_sub["all"]["written"], by_sub["all"]["duplicates"]) == (2, 2, 2)
    rows = pq.read_table(tmp_path / "s").to_pylist()
    assert sorted(r["sequence_number"] for r in rows) == [1, 2, 3, 4]
    assert {r["sequence_number"]: r["subscription"] for r in rows} == {1: "eu", 2: "all", 3: "eu", 4: "all"}
    (topic,) = stats["manifest"]
    assert (topic["messages"], topic["first_sequence"], topic["last_sequence"], topic["missing"]) == (4, 1, 4, 0)
    assert topic["subscriptions"] == [
        {"subscription": "all", "messages": 2, "first_sequence": 2, "last_sequence": 4},
        {"subscription": "eu", "messages": 2, "first_sequence": 1, "last_sequence": 3},
    ]


def test_resampling_an_overlapping_range_stores_each_message_once(emulator, run_cli, tmp_path):
    out = tmp_path / "s"
    _send(emulator, [("same", "eu")] * 3)
    assert _sample(run_cli, emulator, out, "all")["written"] == 3
    _send(emulator, [("same", "us")] * 2)
    (out / STATE_FILE).unlink()  # the next run peeks everything again: 3 stored, 2 new
    stats = _sample(run_cli, emulator, out, "all")
    (sub,) = stats["subscriptions"]
    assert (sub["start_sequence"], sub["peeked"], sub["written"], sub["duplicates"]) == (1, 5, 2, 3)
    assert sorted(r["sequence_number"] for r in pq.read_table(out).to_pylist()) == [1, 2, 3, 4, 5]


def test_the_manifest_names_the_gaps_and_analyze_warns_of_them(emulator, run_cli, tmp_path):
    out = tmp_path / "s"
    _send(emulator, [("a", "eu"), ("b", "us"), ("c", "us"), ("d", "eu"), ("e", "us"), ("f", "eu")])
    code, stdout, stderr = run_cli(
        "sample", "--topic", "orders", "--subscription", "eu", "--out", out, "--connection-string", emulator.connection_string
    )
    assert code == 0, stderr
    assert "warning: the sample of orders misses 3 of the sequence numbers 1–6 (2–3, 5)" in stderr
    (held,) = manifest.read(str(out))
    assert (held.stored.messages, held.missing, held.gaps) == (3, 3, ((2, 3), (5, 5)))
    assert json.loads((out / manifest.MANIFEST_FILE).read_text())["topics"][0]["gaps"] == [
        {"first": 2, "last": 3}, {"first": 5, "last": 5}
    ]
    assert manifest.gap_warnings(str(out), ["ORDERS"]) == [held.warning]
    assert manifest.gap_warnings(str(out), ["payments"]) == []


@pytest.mark.unit
def test_gaps_are_per_partition():
    first, second = 0, 1 << model.PARTITION_SHIFT
    (held,) = manifest.build(
        [("t", "all", first + 1), ("t", "all", first + 4), ("t", "all", second + 1), ("t", "x", second + 2)]
    )
    assert held.gaps == ((2, 3),) and held.missing == 2
    assert held.subscriptions["x"] == manifest.Range(1, second + 2, second + 2)
    assert manifest.from_text(json.dumps(manifest.to_json([held]))) == [held]
    assert manifest.from_text("{not json") == []
