"""Traffic validation benchmark (JSON on stdout): every ratio issue 18's targets name, from one run.

1. Impact report on Spark, for each ``--rules`` count: N synthetic sampled messages × R rules
   (subscriptions of ten). ``native_report_s`` is the product's own path (``impact._evaluate``:
   translate the filters, plan, run, group, fold, resolve example ids) from the Parquet files to the
   finished report; ``scan_and_count_s`` a plain full scan touching the same columns (the props map
   decoded). Each is timed fresh three times: the first run (JIT cold) and the best of the other
   two. ``plain_spark_filters_tally_s`` is the cost floor: the same rules written in Spark's own SQL
   (wrong for Service Bus: implicit casts, no errors), grouped and folded by the same
   :func:`tally` — what any native evaluation of these filters pays on this engine and layout;
   ``native_vs_plain_spark_filters`` is the report's warm time over it. The Python-UDF side
   evaluates every rule with the Python evaluator in one UDF per row and groups the outcomes the
   same way; with ``--udf-fraction`` < 1 it runs on that sample and the speed-up compares
   per-message cost.
2. Cold start, at ``--small-messages`` × 50 rules: ``sbrules impact PLAN.json --traffic`` in a fresh process
   (JVM start included) against a plain PySpark scan of the same dataset in a fresh process.
3. Spark Connect, with a server started from the installed pyspark on loopback: the same report at
   ``--small-messages`` × 50 rules warm, against the local warm report on the same dataset; and a
   report of ``--connect-filters`` distinct filters (subscriptions of ten) over Connect.
4. Sampling throughput: peek from the emulator through ``ManagementClient`` + decode + Parquet
   write, in messages/s (and the decode-free row conversion + write alone).
5. ``analyze_vs_report`` (issue 32): the impact report of ``--analyze-rules`` rules on the
   ``--messages`` dataset with its routing-health section (the analysis's filters, questions and
   unrouted breakdown in the same pass) against the same report without it, warm; target ≤ 1.3×.
   Routing health counts the first subscription (ten rules) as the topic's receiver, so that a
   share of the messages (about 3.5%) is unrouted and broken down by sys.Label and sys.To; the
   report's own pass evaluates every rule either way.

``targets`` lists each target with its measured value and whether it is met.

    python benchmarks/traffic.py [--messages 1000000] [--rules 50,200] [--master local[2]]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from reconciler.model import Message, Rule, SqlFilter, TypedValue
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset

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


#: Each rule shape in Service Bus SQL and, for the engine-floor measurement, in Spark's own SQL
#: over the looked-up property cells (``p_<name>``): Spark semantics, not Service Bus' — no type
#: guards, no evaluation errors, implicit casts — so only as a cost reference, never as a result.
SHAPES = [
    ("region = '{r}'", "p_region.s = '{r}'"),
    ("amount > {a}", "p_amount.d > {a}"),
    ("quantity >= {q} AND quantity < {q2}", "p_quantity.l >= {q} AND p_quantity.l < {q2}"),
    ("customer LIKE 'c{d}%'", "p_customer.s LIKE 'c{d}%'"),
    ("region IN ('{r}', '{r2}', 'xx')", "p_region.s IN ('{r}', '{r2}', 'xx')"),
    ("priority = TRUE AND region <> '{r}'", "p_priority.b = TRUE AND p_region.s <> '{r}'"),
    ("sys.Label = 'order' AND amount >= {a}", "subject = 'order' AND p_amount.d >= {a}"),
    ("EXISTS(coupon) OR quantity > {q2}", "p_coupon IS NOT NULL OR p_quantity.l > {q2}"),
    ("amount * quantity > {big}", "p_amount.d * p_quantity.l > {big}"),
    ("NOT (region = '{r}') AND version = 2", "NOT (p_region.s = '{r}') AND p_version.l = 2"),
]
PROPERTIES = ["region", "amount", "quantity", "customer", "priority", "version", "coupon"]


def rule_texts(count: int) -> list[tuple[str, str]]:
    """``count`` filters as (Service Bus SQL, Spark SQL) pairs, the same every run."""
    rng = random.Random(7)
    out = []
    for i in range(count):
        values = {
            "r": rng.choice(REGIONS), "r2": rng.choice(REGIONS), "a": rng.randint(1, 999), "q": rng.randint(0, 50),
            "q2": rng.randint(50, 100), "d": rng.randint(1, 9), "big": rng.randint(1000, 50000),
        }
        out.append(tuple(text.format(**values) for text in SHAPES[i % len(SHAPES)]))
    return out


def rules(count: int) -> list[Rule]:
    return [Rule(f"r{i}", SqlFilter(text)) for i, (text, _) in enumerate(rule_texts(count))]


def write_dataset(path: str, messages: int) -> float:
    rng = random.Random(1)
    started = time.perf_counter()
    store = Dataset(path, batch_rows=100_000)
    for i in range(messages):
        store.add(message_to_row(synthetic_message(rng, i), topic="orders", subscription="all"))
    store.flush()
    return time.perf_counter() - started


def timed(fn) -> tuple[float, float]:
    """(first run, best of the next two): a CLI run pays the first; a long-lived session the second."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times[0], min(times[1:])


def scopes(rule_list: list[Rule]) -> list:
    """Subscriptions of ten rules; today each has its last rule swapped for a neighbour's first
    (so there are gains, losses and errors to report) and the filters stay distinct."""
    from reconciler.traffic.analysis.impact import Scope

    out = []
    for k in range(0, len(rule_list), 10):
        mine = tuple(rule_list[k : k + 10])
        neighbour = rule_list[(k + 10) % len(rule_list)]
        out.append(Scope("orders", f"s{k // 10}", mine, mine[:-1] + (neighbour,), "plan"))
    return out


def spark_benchmark(path: str, rule_count: int, master: str, udf_fraction: float) -> dict:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BooleanType, StringType, StructField, StructType

    from reconciler.traffic.analysis.impact import _evaluate, questions
    from reconciler.traffic.spark.fallback import message_struct
    from reconciler.traffic.spark.session import spark_session
    from reconciler.traffic.spark.tally import tally

    spark = spark_session(master, app_name="sbrules-bench")
    rule_list = rules(rule_count)
    plan = scopes(rule_list)
    # The questions the report asks of the groups, for the floor and the UDF side to fold the same way.
    asked = questions(plan, {rule.filter: i for i, rule in enumerate(rule_list)})
    rows = spark.read.parquet(path).count()

    def native():
        """What ``sbrules impact PLAN.json --traffic`` runs: from the Parquet files to the finished report."""
        return _evaluate(spark.read.parquet(path), plan)

    def scan():
        """A full scan touching every column the report reads (props decoded), no filters."""
        frame = spark.read.parquet(path)
        frame.agg(
            F.sum(F.size("props")), F.count("topic"), F.count("subject"), F.count("message_id"), F.count("sequence_number")
        ).collect()

    def plain_spark_filters():
        """The engine's floor: the same rules in Spark's own SQL (see SHAPES) evaluated and grouped
        by the report's :func:`tally` — no translation, no type guards, no error columns."""
        frame = spark.read.parquet(path)
        frame = frame.select("*", *(F.try_element_at("props", F.lit(p)).alias(f"p_{p}") for p in PROPERTIES))
        outcomes = [(F.coalesce(F.expr(plain), F.lit(False)), F.lit(None).cast("string")) for _, plain in rule_texts(rule_count)]
        tally(frame, F.lower(F.col("topic")), F.col("message_id"), outcomes, asked)

    native_first_s, native_s = timed(native)
    scan_first_s, scan_s = timed(scan)
    _, plain_s = timed(plain_spark_filters)
    result_type = ArrayType(StructType([StructField("m", BooleanType()), StructField("e", StringType())]))

    def evaluate_all(row):
        from reconciler.sql import matches
        from reconciler.traffic.sample.rows import row_to_message

        message = row_to_message(row.asDict())
        return [(o.matched, o.error) for o in (matches(rule, message) for rule in rule_list)]

    frame = spark.read.parquet(path)
    udf_frame = frame if udf_fraction >= 1 else frame.sample(fraction=udf_fraction, seed=3)
    udf_rows = udf_frame.count()
    results = F.udf(evaluate_all, result_type)(message_struct())
    outcomes = [(F.coalesce(results[i]["m"], F.lit(False)), results[i]["e"]) for i in range(len(rule_list))]
    started = time.perf_counter()
    tally(udf_frame, F.lower(F.col("topic")), F.col("message_id"), outcomes, asked)
    udf_s = time.perf_counter() - started
    spark.stop()
    return {
        "messages": rows,
        "rules": len(rule_list),
        "master": master,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "scan_and_count_s": round(scan_s, 3),
        "scan_and_count_first_run_s": round(scan_first_s, 3),
        "native_report_s": round(native_s, 3),
        "native_report_first_run_s": round(native_first_s, 3),
        "native_messages_per_s": round(rows / native_s),
        "native_vs_scan": round(native_s / scan_s, 2),
        "native_vs_scan_first_run": round(native_first_s / scan_first_s, 2),
        "plain_spark_filters_tally_s": round(plain_s, 3),
        "plain_spark_filters_vs_scan": round(plain_s / scan_s, 2),
        "native_vs_plain_spark_filters": round(native_s / plain_s, 2),
        "python_udf_messages": udf_rows,
        "python_udf_s": round(udf_s, 3),
        "python_udf_messages_per_s": round(udf_rows / udf_s),
        "native_speedup_vs_python_udf": round((udf_s / max(udf_rows, 1)) / (native_s / rows), 1),
    }


def analyze_benchmark(path: str, rule_count: int, master: str) -> dict:
    """The report with and without routing health, each timed fresh three times (first, best of two)."""
    from reconciler.traffic.analysis.health import Health, Subscriber
    from reconciler.traffic.analysis.impact import _evaluate
    from reconciler.traffic.spark.session import spark_session

    spark = spark_session(master, app_name="sbrules-bench-analyze")
    plan = scopes(rules(rule_count))
    subscribers = [Subscriber(s.topic, s.subscription, s.desired) for s in plan[:1]]
    found: dict = {}

    def report():
        return _evaluate(spark.read.parquet(path), plan)

    def with_health():
        health = lambda types: Health(subscribers, "desired", dict(types))  # noqa: E731
        found.update(_evaluate(spark.read.parquet(path), plan, None, health).to_json())

    report_first_s, report_s = timed(report)
    health_first_s, health_s = timed(with_health)
    rows = spark.read.parquet(path).count()
    spark.stop()
    section = found.get("routing_health", {})
    return {
        "messages": rows,
        "rules": rule_count,
        "master": master,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "report_s": round(report_s, 3),
        "report_first_run_s": round(report_first_s, 3),
        "report_with_routing_health_s": round(health_s, 3),
        "report_with_routing_health_first_run_s": round(health_first_s, 3),
        "analyze_vs_report": round(health_s / report_s, 3),
        "findings": len(section.get("findings", ())),
        "unrouted": [t["unrouted"]["count"] for t in section.get("topics", ())],
    }


def sampling_benchmark(messages: int) -> dict:
    """Peek through the AMQP client from the emulator into Parquet; and conversion + write alone."""
    from reconciler.amqp.client import ManagementClient
    from reconciler.emulator import Emulator
    from reconciler.model import DesiredState, Subscription, Topic
    from reconciler.traffic.sample.sampler import sample

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


# -- cold start: fresh processes ------------------------------------------------------------------

#: A plain PySpark scan of the columns the report reads, as a fresh process runs it.
COLD_SCAN = """
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master(sys.argv[1]).config("spark.ui.enabled", "false").getOrCreate()
frame = spark.read.parquet(sys.argv[2])
frame.agg(F.sum(F.size("props")), F.count("topic"), F.count("subject"), F.count("message_id"),
          F.count("sequence_number")).collect()
"""
NO_CHANGES_PLAN = {"format_version": 2, "changes": [], "subscriptions": [], "skipped": [], "warnings": []}


def write_rule_files(directory: Path, rule_list: list[Rule]) -> Path:
    """The rules as a rule file (subscriptions of ten) and a plan that changes nothing, for the CLI."""
    import yaml

    rules_dir = directory / "rules"
    rules_dir.mkdir(parents=True, exist_ok=True)
    subs = {
        f"s{k // 10}": {"rules": [{"name": r.name, "sql": r.filter.expression} for r in rule_list[k : k + 10]]}
        for k in range(0, len(rule_list), 10)
    }
    (rules_dir / "orders.yaml").write_text(yaml.safe_dump({"topic": "orders", "subscriptions": subs}, sort_keys=False))
    (directory / "plan.json").write_text(json.dumps(NO_CHANGES_PLAN))
    return rules_dir


def fresh_process_s(args: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{args[:4]} failed:\n{done.stderr[-3000:]}")
    return elapsed


def cold_floor(path: str, master: str) -> None:
    """What a fresh process pays for the benchmark's rules in Spark's own SQL, grouped and folded
    by the report's code (the warm floor's work, cold; run as ``--cold-floor PATH``)."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from reconciler.traffic.analysis.impact import questions
    from reconciler.traffic.spark.tally import tally

    spark = SparkSession.builder.master(master).config("spark.ui.enabled", "false").getOrCreate()
    rule_list = rules(50)
    asked = questions(scopes(rule_list), {rule.filter: i for i, rule in enumerate(rule_list)})
    frame = spark.read.parquet(path)
    frame = frame.select("*", *(F.try_element_at("props", F.lit(p)).alias(f"p_{p}") for p in PROPERTIES))
    outcomes = [(F.coalesce(F.expr(plain), F.lit(False)), F.lit(None).cast("string")) for _, plain in rule_texts(50)]
    tally(frame, F.lower(F.col("topic")), F.col("message_id"), outcomes, asked)


def cold_benchmark(path: str, work: Path, master: str, runs: int = 2) -> dict:
    """``sbrules impact PLAN.json --traffic`` in a fresh process against a fresh-process PySpark scan, and
    against the same rules in Spark's own SQL in a fresh process (:func:`cold_floor`), in turn."""
    rules_dir = write_rule_files(work, rules(50))
    cli = [sys.executable, "-m", "reconciler", "impact", str(work / "plan.json"), str(rules_dir), "--traffic", path,
           "--format", "json", "--spark-master", master]
    scan = [sys.executable, "-c", COLD_SCAN, master, path]
    floor = [sys.executable, __file__, "--cold-floor", path, "--master", master]
    cli_s, scan_s, floor_s = [], [], []
    for _ in range(runs):
        cli_s.append(fresh_process_s(cli))
        scan_s.append(fresh_process_s(scan))
        floor_s.append(fresh_process_s(floor))
    return {
        "rules": 50,
        "cold_cli_report_s": [round(t, 2) for t in cli_s],
        "cold_pyspark_scan_s": [round(t, 2) for t in scan_s],
        "cold_plain_spark_filters_s": [round(t, 2) for t in floor_s],
        "cold_cli_vs_cold_scan": round(min(cli_s) / min(scan_s), 2),
        "cold_cli_vs_cold_plain_spark_filters": round(min(cli_s) / min(floor_s), 2),
        "cold_plain_spark_filters_vs_cold_scan": round(min(floor_s) / min(scan_s), 2),
    }


# -- Spark Connect ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ConnectServer:
    """A Spark Connect server (``local[2]`` inside) from the installed pyspark, on loopback, in its
    own process group; ``url`` once it says it serves."""

    def __init__(self, master: str = "local[2]"):
        import pyspark

        home = Path(pyspark.__file__).parent
        port = _free_port()
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        self.url = f"sc://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
             # A Connect server is a shared service sized for its clients' plans; spark-submit's 1 GB
             # default heap runs out analysing a 2,000-filter report.
             "--master", master, "--driver-memory", "4g", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", f"spark.connect.grpc.binding.port={port}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.ready, self.output = threading.Event(), []
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(600) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("the Spark Connect server did not start:\n" + "".join(self.output[-40:]))

    def _read(self) -> None:
        for line in self.proc.stdout:
            text = line.decode(errors="replace")
            self.output.append(text)
            if re.search(r"Spark Connect server started", text):
                self.ready.set()
        self.ready.set()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def report_session(master: str) -> Any:
    from reconciler.traffic.spark.session import spark_session

    return spark_session(master, app_name="sbrules-bench")


def report_s(spark: Any, path: str, rule_list: list[Rule], warm: bool = True) -> tuple[float, dict]:
    """The report's time on ``spark``: the best of two runs after a first one (``warm``), or one run."""
    from reconciler.traffic.analysis.impact import _evaluate

    plan = scopes(rule_list)
    report: dict = {}

    def run() -> None:
        report.update(_evaluate(spark.read.parquet(os.path.abspath(path)), plan).to_json())

    if warm:
        return timed(run)[1], report
    started = time.perf_counter()
    run()
    return time.perf_counter() - started, report


def connect_benchmark(path: str, master: str, filters: int) -> dict:
    """Local warm vs Connect warm (same dataset, 50 rules), and ``filters`` filters over Connect."""
    spark = report_session(master)
    local_s, local_report = report_s(spark, path, rules(50))
    spark.stop()
    server = ConnectServer()
    try:
        spark = report_session(server.url)
        connect_s, connect_report = report_s(spark, path, rules(50))
        many_s, many = report_s(spark, path, rules(filters), warm=False)
        spark.stop()
    finally:
        server.stop()
    return {
        "rules": 50,
        "local_warm_report_s": round(local_s, 3),
        "connect_warm_report_s": round(connect_s, 3),
        "connect_warm_vs_local_warm": round(connect_s / local_s, 2),
        "connect_report_equals_local": connect_report == local_report,
        "connect_many_filters": filters,
        "connect_many_filters_report_s": round(many_s, 3),
        "connect_many_filters_completed": len(many.get("subscriptions", ())) == len(scopes(rules(filters))),
    }


def targets(report: dict) -> list[dict]:
    """Issue 18's targets, each with the value measured and whether it is met."""
    out = []

    def target(name: str, value: float | bool | None, limit: float | None, met: bool | None) -> None:
        out.append({"target": name, "value": value, "limit": limit, "met": met})

    for run in report.get("evaluation", []):
        if "error" in run:
            target(f"evaluation: {run['error'][:200]}", None, None, False)
            continue
        ratio = run["native_vs_plain_spark_filters"]
        target(f"warm report / plain_spark_filters_tally_s at {run['messages']} x {run['rules']} rules", ratio, 2.0, ratio <= 2.0)
        speedup = run["native_speedup_vs_python_udf"]
        target(f"native vs Python UDF at {run['rules']} rules", speedup, 10.0, speedup >= 10.0)
    if "error" in report.get("cold", {}) or "error" in report.get("connect", {}):
        for name in ("cold", "connect"):
            if "error" in report.get(name, {}):
                target(f"{name}: {report[name]['error'][:200]}", None, None, False)
    analyze = report.get("analyze_vs_report", {})
    if "error" in analyze:
        target(f"analyze_vs_report: {analyze['error'][:200]}", None, None, False)
    elif analyze:
        ratio = analyze["analyze_vs_report"]
        target(f"report with routing health / without at {analyze['messages']} x {analyze['rules']} rules", ratio, 1.3,
               ratio <= 1.3)
    if "cold" in report and "error" not in report["cold"]:
        ratio = report["cold"]["cold_cli_vs_cold_scan"]
        target("cold CLI report / cold PySpark scan", ratio, 1.2, ratio <= 1.2)
    if "connect" in report and "error" not in report["connect"]:
        c = report["connect"]
        target("Spark Connect warm / local warm", c["connect_warm_vs_local_warm"], 2.0, c["connect_warm_vs_local_warm"] <= 2.0)
        target(f"{c['connect_many_filters']} filters over Spark Connect complete", c["connect_many_filters_completed"], None,
               c["connect_many_filters_completed"])
    return out


def part(name: str, run: Any, *args: Any) -> dict:
    """One part's results, or its error: a part that fails does not lose the others' figures
    (each is also written to stderr as it completes)."""
    try:
        result = run(*args)
    except Exception as exc:  # reported in the JSON; the other parts still run
        result = {"error": f"{type(exc).__name__}: {str(exc)[:1000]}"}
    print(json.dumps({name: result}), file=sys.stderr, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rules", default="50,200", help="Comma-separated rule counts for the report runs.")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--udf-fraction", type=float, default=1.0, help="Evaluate the Python UDF on this fraction only.")
    parser.add_argument("--small-messages", type=int, default=100_000, help="Dataset of the cold-start and Connect runs.")
    parser.add_argument("--connect-filters", type=int, default=2000)
    parser.add_argument(
        "--skip", default="", help="Comma-separated parts to skip: evaluation, analyze, cold, connect, sampling."
    )
    parser.add_argument("--analyze-rules", type=int, default=200, help="Rules of the analyze_vs_report run.")
    parser.add_argument("--sampling-messages", type=int, default=20_000)
    parser.add_argument("--cold-floor", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_floor:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return cold_floor(args.cold_floor, args.master)
    skip = set(filter(None, args.skip.split(",")))
    report: dict = {"benchmark": "traffic", "python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sample")
        if not {"evaluation", "analyze"} <= skip:
            generate_s = write_dataset(path, args.messages)
            report["dataset"] = {"messages": args.messages, "generate_and_write_s": round(generate_s, 1)}
        if "analyze" not in skip:
            report["analyze_vs_report"] = part("analyze_vs_report", analyze_benchmark, path, args.analyze_rules, args.master)
        if "evaluation" not in skip:
            report["evaluation"] = [
                part(f"evaluation at {count} rules", spark_benchmark, path, int(count), args.master, args.udf_fraction)
                for count in args.rules.split(",")
            ]
        small = os.path.join(tmp, "small")
        if not {"cold", "connect"} <= skip:
            write_dataset(small, args.small_messages)
            report["small_dataset"] = {"messages": args.small_messages}
        if "cold" not in skip:
            report["cold"] = part("cold", cold_benchmark, small, Path(tmp) / "cli", args.master)
        if "connect" not in skip:
            report["connect"] = part("connect", connect_benchmark, small, args.master, args.connect_filters)
    if args.sampling_messages and "sampling" not in skip:
        report["sampling"] = part("sampling", sampling_benchmark, args.sampling_messages)
    report["load_average"] = [round(x, 2) for x in os.getloadavg()]
    report["targets"] = targets(report)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
