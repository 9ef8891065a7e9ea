"""Sampling: Message ⇄ row round trip, the emulator → Parquet path (incremental, deduplicated)
and the end-to-end impact report against the emulator's live rules."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler import model
from reconciler.model import PARTITION_SHIFT, Message, TypedValue
from reconciler.traffic.sample.rows import (
    LAYOUT_KEY,
    LAYOUT_VERSION,
    PROPERTY_TAGS_KEY,
    SCHEMA,
    message_to_row,
    row_to_message,
    rows_to_table,
)
from reconciler.traffic.sample.sampler import STATE_FILE, Dataset, SampleError
from tests.amqp.strategies import typed_values

UTC = dt.timezone.utc


def _typed_message() -> Message:
    return Message(
        sys={
            "MessageId": TypedValue.infer("m-1"),
            "Label": TypedValue.infer("created"),
            "SessionId": TypedValue.infer("s-1"),
            "SequenceNumber": TypedValue.infer(7),
            "DeliveryCount": TypedValue("int", 0),
            "EnqueuedTimeUtc": TypedValue("timestamp", "2024-05-01T10:00:00.123Z"),
            "TimeToLive": TypedValue.infer(60.0),
        },
        user={
            "Region": TypedValue.infer("eu"),
            "i32": TypedValue("int", 3),
            "i64": TypedValue.infer(3),
            "ratio": TypedValue.infer(1e20),
            "flag": TypedValue.infer(True),
            "nothing": TypedValue("null"),
            "id": TypedValue("uuid", uuid.UUID(int=5)),
            "at": TypedValue("timestamp", dt.datetime(2024, 1, 1, tzinfo=UTC)),
        },
        body=b"hello",
    )


def test_rows_keep_types_and_round_trip_through_parquet(tmp_path):
    message = _typed_message()
    store = Dataset(tmp_path / "ds", batch_rows=1)
    store.add(message_to_row(message, topic="orders", subscription="all"))
    store.flush()
    table = pq.read_table(tmp_path / "ds")
    assert table.schema.equals(SCHEMA)
    (row,) = table.to_pylist()
    props = dict(row["props"])
    assert set(props) == {"region", "i32", "i64", "ratio", "flag", "nothing", "id", "at"}
    assert props["region"]["k"] == "Region"
    assert (props["i32"]["t"], props["i64"]["t"]) == ("int", "long")
    assert props["ratio"]["s"] == "1E+20"  # the .NET text form, what string + and LIKE see
    assert props["nothing"]["t"] == "null"
    assert row["subject"] == "created" and row["sequence_number"] == 7 and row["body_size"] == 5
    back = row_to_message(row)
    assert back.user == message.user
    assert back.sys == message.sys


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["a", "B", "c", "d", "e"]), typed_values.filter(lambda v: v.value == v.value), min_size=1))
def test_every_property_type_round_trips_through_parquet_unwidened(tmp_path_factory, user):
    """No widening: each value comes back with its own type and value (docs/sql-language.md §10.2)."""
    folder = tmp_path_factory.mktemp("ds")
    store = Dataset(folder, batch_rows=10)
    message = Message(sys={"MessageId": TypedValue.infer("m")}, user=user)
    store.add(message_to_row(message, topic="t", subscription="s"))
    store.flush()
    table = pq.read_table(folder)
    assert table.schema.metadata[LAYOUT_KEY] == LAYOUT_VERSION
    (row,) = table.to_pylist()
    assert row_to_message(row).user == user
    tags = json.loads(table.schema.metadata[PROPERTY_TAGS_KEY])
    assert tags == {k.lower(): [v.type.value] for k, v in user.items()}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a", "B", "c"]), typed_values, max_size=3), min_size=1, max_size=6))
def test_the_column_built_table_is_the_one_arrow_builds_from_rows(users):
    """rows_to_table assembles columns from buffers (no pandas); Arrow's own conversion of the same
    rows, with nulls, every property type and empty property maps, gives an equal table."""
    import pyarrow as pa

    rows = [
        message_to_row(_typed_message() if i % 2 else Message(sys={"MessageId": TypedValue.infer(f"m{i}")}, user=user),
                       topic="t", subscription=None if i % 3 else "s")
        for i, user in enumerate(users)
    ]
    built = rows_to_table(rows)
    assert built.replace_schema_metadata(None).equals(pa.Table.from_pylist(rows, schema=SCHEMA))


def test_state_file_must_be_ours(tmp_path):
    (tmp_path / STATE_FILE).write_text("{}")
    with pytest.raises(SampleError):
        Dataset(tmp_path)


def test_positions_are_kept_per_partition_and_never_move_back(tmp_path):
    partition = [p << PARTITION_SHIFT for p in range(4)]
    store = Dataset(tmp_path)
    store.advance("orders", "all", partition[0] + 30)
    store.advance("orders", "all", partition[3] + 100)
    store.flush()
    again = Dataset(tmp_path)
    assert again.positions("orders", "all") == {0: 30, 3: partition[3] + 100}
    again.advance("orders", "all", partition[3] + 60)  # a page read again after the position
    again.advance("orders", "all", partition[1] + 5)
    again.flush()
    assert Dataset(tmp_path).positions("orders", "all") == {0: 30, 1: partition[1] + 5, 3: partition[3] + 100}


def test_a_state_file_of_one_position_per_subscription_is_read(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": 1, "positions": {"orders/all": 7}}))
    assert Dataset(tmp_path).positions("orders", "all") == {0: 7}


# -- against the emulator -----------------------------------------------------------------------

ORDERS = model.DesiredState(
    topics=(
        model.Topic(
            "orders",
            (
                model.Subscription("all"),
                model.Subscription("eu", (model.Rule("eu", model.CorrelationFilter(properties={"region": "eu"})),)),
            ),
        ),
    )
)


@pytest.fixture
def emulator():
    from reconciler.emulator import Emulator

    with Emulator(ORDERS) as emu:
        yield emu


def _send(emulator, messages):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as sb:
        with sb.get_topic_sender("orders") as sender:
            sender.send_messages([ServiceBusMessage(body, **kw) for body, kw in messages])


def _order(i: int, region: str, amount, session: str | None = None):
    props = {"region": region, "amount": amount, "priority": i % 2 == 0, "ref": uuid.UUID(int=i)}
    return f"order {i}", {"application_properties": props, "message_id": f"o{i}", "subject": "order", "session_id": session}


def test_sample_from_emulator_is_incremental_and_deduplicated(emulator, run_cli, tmp_path):
    _send(emulator, [_order(i, "eu" if i % 3 == 0 else "us", i * 1.5, session=f"s{i % 2}") for i in range(6)])
    out = tmp_path / "sample"
    args = ["sample", "--topic", "orders", "--subscription", "all", "--subscription", "eu", "--out", out]
    code, stdout, stderr = run_cli(*args, "--connection-string", emulator.connection_string, "--format", "json")
    assert code == 0, stderr
    stats = json.loads(stdout)
    by_sub = {s["subscription"]: s for s in stats["subscriptions"]}
    assert (by_sub["all"]["peeked"], by_sub["all"]["written"]) == (6, 6)
    assert (by_sub["eu"]["peeked"], by_sub["eu"]["written"], by_sub["eu"]["duplicates"]) == (2, 0, 2)

    rows = pq.read_table(out).to_pylist()
    assert sorted(r["message_id"] for r in rows) == [f"o{i}" for i in range(6)]
    first = next(r for r in rows if r["message_id"] == "o0")
    props = dict(first["props"])
    assert props["region"]["s"] == "eu" and props["amount"]["t"] == "double"
    assert props["priority"]["b"] is True and props["ref"]["t"] == "uuid"
    assert first["session_id"] == "s0" and first["subject"] == "order" and first["enqueued_time"] is not None

    _send(emulator, [_order(i, "eu", i, session="s9") for i in range(6, 9)])
    code, stdout, stderr = run_cli(*args, "--max", "2", "--connection-string", emulator.connection_string)
    assert code == 0, stderr
    assert "orders/all: peeked 2 from sequence 7, stored 2" in stdout
    code, stdout, _ = run_cli(*args, "--connection-string", emulator.connection_string)
    assert "orders/all: peeked 1 from sequence 9, stored 1" in stdout
    ids = sorted(r["message_id"] for r in pq.read_table(out).to_pylist())
    assert ids == [f"o{i}" for i in range(9)]


def test_sample_needs_a_subscription(run_cli, tmp_path):
    code, _, stderr = run_cli("sample", "--topic", "orders", "--out", tmp_path, "--connection-string", "Endpoint=sb://x/")
    assert code == 64 and "catch-all" in stderr


@pytest.mark.spark
def test_end_to_end_emulator_sample_to_impact_report(spark, emulator, run_cli, tmp_path):
    from reconciler.app import operations
    from reconciler.app.target import Target
    from reconciler.sql import matches

    _send(emulator, [_order(i, ["eu", "us", "fr"][i % 3], i * 10) for i in range(12)])
    out = tmp_path / "sample"
    code, _, stderr = run_cli(
        "sample", "--topic", "orders", "--subscription", "all", "--out", out, "--connection-string", emulator.connection_string
    )
    assert code == 0, stderr
    new_rules = (
        model.Rule("eu", model.CorrelationFilter(properties={"region": "eu"})),
        model.Rule("big", model.SqlFilter("amount >= 80 AND region <> 'us'")),
    )
    desired = model.DesiredState((model.Topic("orders", (model.Subscription("eu", new_rules),)),))
    rules = operations.Rules(desired, None)
    with Target.connect(emulator.connection_string) as target:
        plan = operations.plan(target, rules, bystanders=True)
    report = operations.impact(rules, plan, str(out)).report.to_json()
    (eu,) = report["subscriptions"]
    assert eu["current_rules"] == "live" and report["messages"] == 12
    messages = [row_to_message(r) for r in pq.read_table(out).to_pylist()]
    live = ORDERS.topics[0].subscriptions[1].rules
    new = [any(matches(r, m).matched for r in new_rules) for m in messages]
    old = [any(matches(r, m).matched for r in live) for m in messages]
    # eu: orders 0, 3, 6, 9; big adds the fr orders 8 (amount 80) and 11 (amount 110).
    assert eu["delivered"] == sum(new) == 6
    assert eu["gained"] == sum(n and not o for n, o in zip(new, old)) == 2
    assert eu["lost"] == 0 and eu["delivered_before"] == 4


def test_current_rules_come_live_and_the_changes_are_the_plans_own(emulator):
    from reconciler.app import operations
    from reconciler.app.target import Target
    from reconciler.traffic.analysis.impact import CurrentSource, _scopes

    rule = model.Rule("all", model.TrueFilter())
    desired = model.DesiredState((model.Topic("orders", (model.Subscription("eu", (rule,)),)),))
    with Target.connect(emulator.connection_string) as target:
        plan = operations.plan(target, operations.Rules(desired, None))
    (scope,), _ = _scopes(desired, plan, CurrentSource.LIVE)
    assert (scope.current_source, scope.current) == ("live", ORDERS.topics[0].subscriptions[1].rules)
    assert scope.changes == plan.subscriptions[0].changes and {c.kind for c in scope.changes} == {"create", "delete"}


@pytest.mark.spark
def test_plan_with_traffic_adds_the_impact_of_the_plan_it_read(spark, emulator, run_cli, output_schema, tmp_path):
    """`sbrules plan --traffic`: the plan read from the namespace, then its impact; --format json is
    the plan document with the report as its "traffic" member, and the saved plan stays a plan."""
    _send(emulator, [_order(i, ["eu", "us", "fr"][i % 3], i * 10) for i in range(12)])
    conn = ["--connection-string", emulator.connection_string]
    out = tmp_path / "sample"
    code, _, stderr = run_cli("sample", "--topic", "orders", "--subscription", "all", "--out", out, *conn)
    assert code == 0, stderr
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(
        "topic: orders\nsubscriptions:\n  all: {}\n  eu:\n    rules:\n"
        "      - {name: eu, correlation: {properties: {region: eu}}}\n"
        "      - {name: big, sql: \"amount >= 80 AND region <> 'us'\"}\n"
    )
    saved = tmp_path / "plan.json"
    code, stdout, stderr = run_cli("plan", rules, "--traffic", out, "--format", "json", "--out", saved, *conn)
    assert code == 0, stderr
    doc = json.loads(stdout)
    output_schema("plan").validate(doc)
    (eu,) = doc["traffic"]["subscriptions"]
    assert (eu["current_rules"], eu["delivered_before"], eu["delivered"], eu["gained"]) == ("live", 4, 6, 2)
    assert doc["summary"]["create"] == 1 and "traffic" not in json.loads(saved.read_text())

    code, stdout, stderr = run_cli("plan", rules, "--traffic", out, *conn)
    assert code == 0, stderr
    assert "+ create" in stdout or "create" in stdout
    assert "compared with the live rules" in stdout

    # The same impact from the saved plan, with no namespace.
    code, stdout, stderr = run_cli("impact", saved, rules, "--traffic", out, "--format", "json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["subscriptions"][0]["current_rules"] == "plan"
    assert {k: report["subscriptions"][0][k] for k in ("delivered", "gained", "lost")} == {
        k: eu[k] for k in ("delivered", "gained", "lost")
    }


def _numbered(emulator, count: int) -> None:
    emulator.publish("orders", [
        model.Message(sys={"MessageId": model.TypedValue(model.ValueType.STRING, f"m{i}")}, body=b"x") for i in range(count)
    ])


def test_pages_shorter_than_asked_are_not_the_end(emulator, run_cli, tmp_path):
    # The service may return fewer messages than a peek asks for while more are there.
    _numbered(emulator, 700)
    emulator.faults.update(peek_limit=120)
    code, stdout, stderr = run_cli(
        "sample", "--topic", "orders", "--subscription", "all", "--out", tmp_path / "s", "--format", "json",
        "--page-size", "250", "--connection-string", emulator.connection_string,
    )
    assert code == 0, stderr
    stats = json.loads(stdout)["subscriptions"][0]
    assert (stats["peeked"], stats["written"]) == (700, 700)
    assert sorted(r["message_id"] for r in pq.read_table(tmp_path / "s").to_pylist()) == sorted(f"m{i}" for i in range(700))


def test_a_cap_below_a_page_peeks_no_more_than_it_stores(emulator, run_cli, tmp_path):
    _numbered(emulator, 300)
    emulator.faults.update(credits_per_second=1_000_000)  # metered, never throttled: counts what peeks cost
    before = emulator.credits.stats().credits
    code, stdout, stderr = run_cli(
        "sample", "--topic", "orders", "--subscription", "all", "--out", tmp_path / "s", "--format", "json",
        "--max", "3", "--max-credits", "1000", "--connection-string", emulator.connection_string,
    )
    spent = emulator.credits.stats().credits - before
    assert code == 0, stderr
    assert json.loads(stdout)["written"] == 3
    assert spent == 3  # one credit per message a peek returns: three, not a page of 250


def test_a_damaged_part_file_is_one_error_line(emulator, run_cli, check, tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    (out / "part-abc-00000.parquet").write_bytes(b"PAR1 cut short by an upload")
    code, stdout, stderr = run_cli("sample", "--topic", "orders", "--subscription", "all", "--out", out,
                                   "--connection-string", emulator.connection_string)
    check.one_error(code, stdout, stderr, 1, r"part-abc-00000\.parquet is not a readable part of an sbrules sample")


def test_a_sample_directory_that_cannot_be_made_is_one_error_line(emulator, run_cli, check, tmp_path):
    (tmp_path / "a-file").write_text("x")
    code, stdout, stderr = run_cli("sample", "--topic", "orders", "--subscription", "all",
                                   "--out", tmp_path / "a-file" / "s", "--connection-string", emulator.connection_string)
    check.one_error(code, stdout, stderr, 1, r"cannot make the sample directory .*a-file/s: .*[Nn]ot a directory")


def test_a_rerun_on_a_partitioned_topic_samples_what_came_to_every_partition(run_cli, tmp_path):
    # Sequence numbers carry the partition in their top 16 bits and a peek answers one message, as
    # at the service; the second run must see the new messages of every partition, not only of the
    # partition the first run ended in.
    from reconciler.emulator import Emulator

    with Emulator(model.DesiredState(())) as emu:
        emu.namespace.create_topic("parted", partitions=4)
        emu.namespace.create_subscription("parted", "all")
        args = ["sample", "--topic", "parted", "--subscription", "all", "--out", tmp_path / "s", "--format", "json",
                "--connection-string", emu.connection_string]

        def publish(first: int, count: int) -> None:
            emu.publish("parted", [
                model.Message(sys={"MessageId": model.TypedValue(model.ValueType.STRING, f"m{i}")}, body=b"x")
                for i in range(first, first + count)
            ])

        publish(0, 12)
        code, stdout, stderr = run_cli(*args)
        assert code == 0, stderr
        assert json.loads(stdout)["written"] == 12
        publish(12, 8)
        code, stdout, stderr = run_cli(*args)
        assert code == 0, stderr
        assert json.loads(stdout)["written"] == 8
    rows = pq.read_table(tmp_path / "s").to_pylist()
    assert sorted(r["message_id"] for r in rows) == sorted(f"m{i}" for i in range(20))
    assert {r["sequence_number"] >> PARTITION_SHIFT for r in rows} == {0, 1, 2, 3}
