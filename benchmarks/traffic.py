"""Traffic validation benchmark (JSON on stdout).

1. Filter evaluation on Spark: N synthetic sampled messages × R rules, native translation vs a
   Python-UDF evaluation of the same rules (one UDF per row evaluating every rule with the Python
   evaluator) vs Spark's own scan of the same columns with no filters. ``native_s`` is a fresh
   query (analysis + optimisation + code generation of 50 translated filters + execution, what a
   report costs); ``*_execution_only_s`` re-run an already planned query (the per-message cost). With
   ``--udf-fraction`` < 1 the UDF runs on that sample and the speed-up compares per-message cost.
2. Sampling throughput: peek from the emulator through ``ManagementClient`` + decode + Parquet
   write, in messages/s (and the decode-free row conversion + write alone).

    python benchmarks/traffic.py [--messages 1000000] [--rules 50] [--master local[2]]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import tempfile
import time
import uuid

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from reconciler.model import Message, Rule, SqlFilter, TypedValue  # noqa: E402
from reconciler.traffic.rows import message_to_row  # noqa: E402
from reconciler.traffic.sampler import Dataset  # noqa: E402

REGIONS = ["eu", "us", "fr", "de", "uk", "jp", "br", "in"]
LABELS = ["order", "refund", "ping", None]
UTC = dt.timezone.utc


def synthetic_message(rng: random.Random, i: int) -> Message:
    user = {
        "region": TypedValue("string", rng.choice(REGIONS)),
        "amount": TypedValue("double", round(rng.uniform(0, 1000), 2)),
        "quantity": TypedValue("long", rng.randint(0, 100)),
        "priority": TypedValue("bool", rng.random() < 0.2),
        "customer": TypedValue("string", f"c{rng.randint(0, 9999)}"),
        "version": TypedValue("int", rng.randint(1, 3)),
    }
    if rng.random() < 0.1:
        user["coupon"] = TypedValue("string", "SAVE10")
    if rng.random() < 0.02:
        user["amount"] = TypedValue("string", "n/a")  # a producer bug: type mismatch for numeric rules
    sys_props = {
        "MessageId": TypedValue("string", f"m{i}"),
        "SequenceNumber": TypedValue("long", i + 1),
        "EnqueuedTimeUtc": TypedValue("timestamp", dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i)),
    }
    label = rng.choice(LABELS)
    if label:
        sys_props["Label"] = TypedValue("string", label)
    return Message(sys=sys_props, user=user)


def rules(count: int) -> list[Rule]:
    shapes = [
        "region = '{r}'",
        "amount > {a}",
        "quantity >= {q} AND quantity < {q2}",
        "customer LIKE 'c{d}%'",
        "region IN ('{r}', '{r2}', 'xx')",
        "priority = TRUE AND region <> '{r}'",
        "sys.Label = 'order' AND amount >= {a}",
        "EXISTS(coupon) OR quantity > {q2}",
        "amount * quantity > {big}",
        "NOT (region = '{r}') AND version = 2",
    ]
    rng = random.Random(7)
    out = []
    for i in range(count):
        text = shapes[i % len(shapes)].format(
            r=rng.choice(REGIONS), r2=rng.choice(REGIONS), a=rng.randint(1, 999), q=rng.randint(0, 50),
            q2=rng.randint(50, 100), d=rng.randint(1, 9), big=rng.randint(1000, 50000),
        )
        out.append(Rule(f"r{i}", SqlFilter(text)))
    return out


def write_dataset(path: str, messages: int) -> float:
    rng = random.Random(1)
    started = time.perf_counter()
    store = Dataset(path, batch_rows=100_000)
    for i in range(messages):
        store.add(message_to_row(synthetic_message(rng, i), topic="orders", subscription="all"))
    store.flush()
    return time.perf_counter() - started


def timed(fn, repeat: int = 2) -> float:
    """Best of ``repeat`` runs after one warm-up (JIT, codegen caches, file listing)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def spark_benchmark(path: str, rule_list: list[Rule], master: str, udf_fraction: float) -> dict:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BooleanType, StringType, StructField, StructType

    from reconciler.sql.spark import rule_columns
    from reconciler.traffic.fallback import message_struct
    from reconciler.traffic.session import spark_session

    spark = spark_session(master, app_name="sbrules-bench")
    frame = spark.read.parquet(path)
    rows = frame.count()

    def scan():
        frame.agg(F.sum(F.size("props")), F.count("subject"), F.count("message_id")).collect()

    from reconciler.sql.spark import property_names

    names = sorted({n for r in rule_list for n in property_names(r.filter)})
    cells = {name: F.col(f"_p{i}") for i, name in enumerate(names)}
    frame = frame.select("*", *(F.try_element_at(F.col("props"), F.lit(n)).alias(f"_p{i}") for i, n in enumerate(names)))
    compiled = [rule_columns(r, cells) for r in rule_list]
    native_aggs = []
    for i, rc in enumerate(compiled):
        native_aggs.append(F.sum(F.when(rc.matched, 1).otherwise(0)).alias(f"m{i}"))
        native_aggs.append(F.count(rc.error).alias(f"e{i}"))

    native_result = {}

    def native():
        native_result["row"] = frame.agg(*native_aggs).collect()[0]

    result_type = ArrayType(StructType([StructField("m", BooleanType()), StructField("e", StringType())]))

    def evaluate_all(row):
        from reconciler.sql import matches
        from reconciler.traffic.rows import row_to_message

        message = row_to_message(row.asDict())
        return [(o.matched, o.error) for o in (matches(rule, message) for rule in rule_list)]

    all_rules = F.udf(evaluate_all, result_type)
    udf_frame = frame if udf_fraction >= 1 else frame.sample(fraction=udf_fraction, seed=3)
    udf_rows = udf_frame.count()
    results = all_rules(message_struct())
    udf_aggs = []
    for i in range(len(rule_list)):
        udf_aggs.append(F.sum(F.when(results[i]["m"], 1).otherwise(0)).alias(f"m{i}"))
        udf_aggs.append(F.count(results[i]["e"]).alias(f"e{i}"))
    udf_result = {}

    def python_udf():
        udf_result["row"] = udf_frame.agg(*udf_aggs).collect()[0]

    scan_s = timed(scan)
    native_s = timed(native)
    # The same DataFrames re-run: planning and code generation cached, execution only.
    scan_exec_s = timed(frame.agg(F.sum(F.size("props")), F.count("subject"), F.count("message_id")).collect)
    native_exec_s = timed(frame.agg(*native_aggs).collect)
    started = time.perf_counter()
    python_udf()
    udf_s = time.perf_counter() - started
    if udf_fraction >= 1:
        assert native_result["row"].asDict() == udf_result["row"].asDict(), "native and UDF disagree"
    udf_per_message = udf_s / max(udf_rows, 1)
    native_per_message = native_s / rows
    spark.stop()
    return {
        "messages": rows,
        "rules": len(rule_list),
        "master": master,
        "scan_and_count_s": round(scan_s, 3),
        "native_s": round(native_s, 3),
        "native_messages_per_s": round(rows / native_s),
        "native_vs_scan": round(native_s / scan_s, 2),
        "scan_execution_only_s": round(scan_exec_s, 3),
        "native_execution_only_s": round(native_exec_s, 3),
        "native_vs_scan_execution_only": round(native_exec_s / scan_exec_s, 2),
        "python_udf_messages": udf_rows,
        "python_udf_s": round(udf_s, 3),
        "python_udf_messages_per_s": round(udf_rows / udf_s),
        "native_speedup_vs_python_udf": round(udf_per_message / native_per_message, 1),
        "fallback_rules": [r.name for r, c in zip(rule_list, compiled) if c.fallback],
    }


def sampling_benchmark(messages: int) -> dict:
    """Peek through the AMQP client from the emulator into Parquet; and conversion + write alone."""
    from reconciler.amqp.client import ManagementClient
    from reconciler.emulator import Emulator
    from reconciler.model import DesiredState, Subscription, Topic
    from reconciler.traffic.sampler import sample

    desired = DesiredState((Topic("orders", (Subscription("all"),)),))
    rng = random.Random(2)
    originals = [synthetic_message(rng, i) for i in range(messages)]
    out: dict = {"messages": messages}
    with tempfile.TemporaryDirectory() as tmp, Emulator(desired) as emu:
        from azure.servicebus import ServiceBusClient, ServiceBusMessage

        with ServiceBusClient.from_connection_string(emu.connection_string, retry_total=0) as sb:
            with sb.get_topic_sender("orders") as sender:
                for start in range(0, messages, 500):
                    batch = sender.create_message_batch()
                    for m in originals[start : start + 500]:
                        props = {k: v.value for k, v in m.user.items()}
                        batch.add_message(ServiceBusMessage("x" * 64, application_properties=props, message_id=str(uuid.uuid4())))
                    sender.send_messages(batch)
        with ManagementClient(emu.connection_string) as client:
            started = time.perf_counter()
            stats = sample(client, "orders", ["all"], os.path.join(tmp, "peeked"), page_size=250)
            elapsed = time.perf_counter() - started
        out["peek_decode_write_messages_per_s"] = round(stats.written / elapsed)
        out["peeked"] = stats.written
        started = time.perf_counter()
        store = Dataset(os.path.join(tmp, "direct"), batch_rows=10_000)
        for m in originals:
            store.add(message_to_row(m, topic="orders", subscription="all"))
        store.flush()
        out["row_conversion_and_write_messages_per_s"] = round(messages / (time.perf_counter() - started))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--udf-fraction", type=float, default=1.0, help="Evaluate the Python UDF on this fraction only.")
    parser.add_argument("--sampling-messages", type=int, default=20_000)
    args = parser.parse_args()
    report: dict = {"benchmark": "traffic", "python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sample")
        generate_s = write_dataset(path, args.messages)
        report["dataset"] = {"messages": args.messages, "generate_and_write_s": round(generate_s, 1)}
        report["evaluation"] = spark_benchmark(path, rules(args.rules), args.master, args.udf_fraction)
    if args.sampling_messages:
        report["sampling"] = sampling_benchmark(args.sampling_messages)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
