"""Every property type end to end: messages published to the emulator with raw proton (each AMQP
type the .NET SDK sends, the three Microsoft described types included) and with Microsoft's
azure-servicebus SDK (the types it can express) are routed by the emulator; ``sbrules route``'s
evaluator and the traffic report (sample → Parquet → Spark) must agree with what each
subscription actually holds."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import proton
import pyarrow.parquet as pq
import pytest

from reconciler import model
from reconciler.amqp.client import ManagementClient
from reconciler.amqp.wire.decimals import encode_dotnet_decimal128
from reconciler.model import CorrelationFilter, Rule, SqlFilter
from reconciler.sql import matches
from reconciler.traffic.sample.rows import row_to_message
from tests.emulator.raw import RawManagement

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
TICKS_2024 = 638_396_640_000_000_000  # 2024-01-01T00:00:00Z in .NET ticks


def _rules() -> dict[str, Rule]:
    corr = {
        "c-int": {"int": 3}, "c-short": {"short": 3}, "c-long": 3, "c-ulong": {"ulong": 3}, "c-float": {"float": 3},
        "c-decimal": {"decimal": "3.0"}, "c-char": {"char": "\x03"}, "c-string": "3", "c-timespan": {"timespan": "PT3S"},
    }
    sql = {
        "s-plus": "n + 1 = 4",  # ulong + Int64 literal is an error; decimal + 1 works
        "s-double": "n = 3.0",  # decimal with a Double literal is an error
        "s-text": "n LIKE '3%'",
        "s-div": "n / 2 = 1",  # integer division only
        "s-small": "n * n = n + 6 AND n < 2147483648",
        "s-dto": "at < sys.EnqueuedTimeUtc",
    }
    out = {name: Rule(name, CorrelationFilter(properties={"n": value})) for name, value in corr.items()}
    out.update({name: Rule(name, SqlFilter(text)) for name, text in sql.items()})
    return out


RULES = _rules()
STATE = model.DesiredState(
    (model.Topic("typed", (model.Subscription("all"), *(model.Subscription(n, (r,)) for n, r in RULES.items()))),)
)


def _raw_messages() -> list[proton.Message]:
    """One message per AMQP type, its property ``n`` holding three (or what the type holds for it)."""
    described = lambda name, value: proton.Described(proton.symbol(f"com.microsoft:{name}"), value)  # noqa: E731
    values = {
        "byte": proton.byte(3), "ubyte": proton.ubyte(3), "short": proton.short(3), "ushort": proton.ushort(3),
        "int": proton.int32(3), "uint": proton.uint(3), "long": 3, "ulong": proton.ulong(3),
        "float": proton.float32(3.0), "double": 3.0, "decimal": proton.decimal128(encode_dotnet_decimal128(Decimal("3.00"))),
        "char": proton.char("\x03"), "string": "3", "symbol": proton.symbol("3"), "bool": True,
        "uuid": uuid.UUID(int=3), "timestamp": proton.timestamp(3_000),
        "datetimeoffset": described("datetime-offset", TICKS_2024), "timespan": described("timespan", 30_000_000),
        "uri": described("uri", "http://example.com/3"),
    }
    at = described("datetime-offset", TICKS_2024)
    return [
        proton.Message(id=f"raw-{name}", body=b"x", properties={"n": value, "at": at}) for name, value in values.items()
    ]


def _sdk_messages() -> list:
    from azure.servicebus import ServiceBusMessage

    values = {"int": 3, "float": 3.0, "str": "3", "bool": True, "uuid": uuid.UUID(int=3),
              "datetime": dt.datetime(2024, 1, 1, tzinfo=UTC), "decimal": Decimal("3.00")}
    return [
        ServiceBusMessage(b"x", message_id=f"sdk-{name}", application_properties={"n": value}) for name, value in values.items()
    ]


def _delivered(client: ManagementClient, subscription: str) -> set[str]:
    peeked = client.peek_messages("typed", subscription, 1, 100)
    return {p.message.sys["MessageId"].value for p in peeked}


def test_route_and_report_agree_with_the_emulator_for_every_type(spark, run_cli, tmp_path):
    from azure.servicebus import ServiceBusClient

    from reconciler.app import operations
    from reconciler.app.target import Target
    from reconciler.emulator import Emulator

    with Emulator(STATE) as emulator:
        raw = RawManagement(emulator, "typed")  # a bare proton connection with a SAS token for the topic
        try:
            sender = raw.conn.create_sender("typed")
            for message in _raw_messages():
                sender.send(message)
        finally:
            raw.close()
        with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as sb:
            with sb.get_topic_sender("typed") as sender:
                sender.send_messages(_sdk_messages())

        with ManagementClient(emulator.connection_string) as client:
            actual = {name: _delivered(client, name) for name in RULES}
            everything = _delivered(client, "all")
        assert len(everything) == len(_raw_messages()) + len(_sdk_messages())

        out = tmp_path / "sample"
        code, _, stderr = run_cli(
            "sample", "--topic", "typed", "--subscription", "all", "--out", out, "--connection-string", emulator.connection_string
        )
        assert code == 0, stderr
        rows = pq.read_table(out).to_pylist()
        messages = {row["message_id"]: row_to_message(row) for row in rows}
        assert set(messages) == everything
        assert {m.user["n"].type.value for m in messages.values()} >= {
            "byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong", "float", "double", "decimal",
            "char", "string", "symbol", "bool", "uuid", "timestamp", "datetimeoffset", "timespan", "uri",
        }

        # route's evaluator, message by message
        for name, rule in RULES.items():
            routed = {ident for ident, message in messages.items() if matches(rule, message).matched}
            assert routed == actual[name], name

        # the traffic report over the Parquet sample, against the live rules (so nothing changes)
        rules = operations.Rules(STATE, None)
        with Target.connect(emulator.connection_string) as target:
            plan = operations.plan(target, rules, bystanders=True)
        report = operations.impact(rules, plan, str(out)).report.to_json()
    by_sub = {s["subscription"]: s for s in report["subscriptions"]}
    for name in RULES:
        assert by_sub[name]["delivered"] == len(actual[name]), name
    # what the emulator did, spelled out for the cases that surprise people
    assert actual["c-int"] == {"raw-int", "sdk-int"}  # not short, long, ulong, float or decimal 3
    assert actual["c-decimal"] == {"raw-decimal", "sdk-decimal"}  # scale ignored: 3.0 matches 3.00
    assert actual["c-string"] == {"raw-string", "raw-symbol", "sdk-str"}  # a symbol is a string
    assert "raw-ulong" not in actual["s-plus"] and "raw-decimal" in actual["s-plus"]
    assert "raw-decimal" not in actual["s-double"] and "raw-float" in actual["s-double"]
    assert actual["s-div"] >= {"raw-byte", "raw-int", "raw-char"}  # integer division
    assert not actual["s-div"] & {"raw-float", "raw-ulong"}  # 1.5; ulong / Int64 literal is an error
