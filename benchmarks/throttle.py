"""Benchmark sbrules on a throttled namespace and sampling throughput; prints JSON.

Every emulator runs in its own process (``sbrules emulator``), as a server would; so does the
"production" sender (Microsoft's SDK), so that neither shares a GIL with sbrules.

1. apply under Standard throttling (``--throttle standard``: 1,000 credits/s for the namespace):
   ``--changes`` rule creations (10 credits each) with ``--credit-share 0.4``, while a production
   sender sends to another topic of the namespace at half its credits. Reports the credits apply
   spent per second as a share of its budget, its failed changes, the share of its requests that
   were throttled, and the share of the production sends that were.
2. sampling without throttling: ``sbrules sample`` (a process of its own: start-up, peek, decode,
   Parquet) against a sequential loop of the SDK's ``peek_messages`` (250 per call) over the same
   ``--messages``, at 0 ms and with a simulated 20 ms round trip (the emulator's latency fault).
   The floor at 0 ms: the emulator's raw peek rate (pipelined, messages left undecoded) and the
   client's CPU per message to decode and build a row, each added to the CLI's start-up (a run over
   an empty subscription), which the SDK loop's timing leaves out.
3. sampling under Standard throttling with ``--max-credits 400``: credits spent per second as a
   share of the budget, and messages lost or stored twice.
4. "bursts": part 1 again, the production sender adding two isolated bursts (``BURST_TIMES``): what
   a throttling event costs apply, and how production fares (keys prefixed ``bursts_``).

    python benchmarks/throttle.py [--changes 1000] [--messages 20000] [--throttled-messages 5000]
                                  [--only apply,sampling,throttled,bursts]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import yaml

STANDARD = 1000
SHARE = 0.4
PRODUCTION_SHARE = 0.5
#: Seconds of sends the production sender may send at once to catch up after a stall.
PRODUCTION_BURST = 0.1
#: The "bursts" part: the production sender also sends this many messages at once (300 credits,
#: 0.3 s of the whole namespace) at these seconds after it starts: isolated bursts, as another client
#: catching up after an outage would send, which throttle the namespace for the rest of their second.
BURST_SENDS = 150
BURST_TIMES = (8.0, 22.0)
SAMPLE_BUDGET = 400
PAGE = 250
#: The parts of the benchmark, in the order they run (``--only`` picks some).
PARTS = ("apply", "sampling", "throttled", "bursts")


@contextlib.contextmanager
def emulator(tmp: Path, rules: dict, *, throttle: bool = False, latency: float = 0.0,
             state: Path | None = None) -> Iterator[str]:
    """``sbrules emulator`` in a child process with ``rules`` (topic → subscription → rule names);
    yields its connection string."""
    rules_dir = tmp / "emulator-rules"
    rules_dir.mkdir(exist_ok=True)
    for topic, subs in rules.items():
        doc = {"topic": topic, "subscriptions": {
            sub: {"rules": [{"name": name, "sql": "1=1"} for name in names]} for sub, names in subs.items()
        }}
        (rules_dir / f"{topic}.yaml").write_text(yaml.safe_dump(doc))
    faults = tmp / "faults.json"
    faults.write_text(json.dumps({"latency": latency}))
    cmd = [sys.executable, "-m", "reconciler", "emulator", "--port", "0", "--rules", str(rules_dir),
           "--faults", str(faults), "--throttle", "standard" if throttle else "none"]
    if state is not None:
        cmd += ["--state", str(state)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        connection_string = proc.stdout.readline().strip()
        if not connection_string:
            raise RuntimeError("the emulator did not start")
        yield connection_string
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def sbrules(*args: str, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "reconciler", *args], capture_output=True, text=True, env=env)
    return time.perf_counter() - started, done


def seed(connection_string: str, topic: str, count: int) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(connection_string, retry_total=0) as sb:
        with sb.get_topic_sender(topic) as sender:
            for start in range(0, count, 500):
                batch = sender.create_message_batch()
                for i in range(start, min(count, start + 500)):
                    batch.add_message(ServiceBusMessage(
                        "x" * 64, message_id=f"m{i}",
                        application_properties={"region": ["eu", "us", "apac"][i % 3], "amount": i * 1.5},
                    ))
                sender.send_messages(batch)


# -- 1. apply under throttling -------------------------------------------------------------------
def production_sender(connection_string: str, credits_per_second: float, bursts: list[float]) -> None:
    """Child process: send to topic 'production' at ``credits_per_second`` (each send is one message
    and one filter evaluation), and ``BURST_SENDS`` at once at each of ``bursts`` seconds after the
    start, until stdin closes; print sends and throttled sends as JSON."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.exceptions import ServiceBusServerBusyError

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    interval = 2 / credits_per_second
    sent = throttled = 0
    with ServiceBusClient.from_connection_string(connection_string, retry_total=0) as sb:
        with sb.get_topic_sender("production") as sender:
            sender.send_messages(ServiceBusMessage("warm-up"))
            print("ready", flush=True)
            due = started = time.monotonic()
            while not stop.is_set():
                burst = bool(bursts) and time.monotonic() - started >= bursts[0]
                for _ in range(1 + BURST_SENDS * burst):
                    try:
                        sender.send_messages(ServiceBusMessage("order"))
                    except ServiceBusServerBusyError:
                        throttled += 1
                    sent += 1
                if burst:
                    bursts.pop(0)
                # Paced as a rate limiter paces: behind schedule (a stall: this machine is shared), it
                # catches up at most PRODUCTION_BURST seconds of sends at once, not its whole backlog.
                due = max(due + interval, time.monotonic() - PRODUCTION_BURST)
                stop.wait(max(0.0, due - time.monotonic()))
    print(json.dumps({"sent": sent, "throttled": throttled}), flush=True)


def bench_apply(tmp: Path, changes: int, bursts: tuple[float, ...] = ()) -> dict:
    subs = max(1, changes // 10)
    per_sub = changes // subs
    live = {"bench": {f"s{i:03d}": ["keep"] for i in range(subs)}, "production": {"all": ["all"]}}
    desired = {"topic": "bench", "subscriptions": {
        f"s{i:03d}": {"rules": [{"name": "keep", "sql": "1=1"}] + [
            {"name": f"r{j:02d}", "sql": f"region = 'r{j}' AND amount > {j}"} for j in range(per_sub)
        ]} for i in range(subs)
    }}
    (tmp / "desired").mkdir()
    (tmp / "desired" / "bench.yaml").write_text(yaml.safe_dump(desired))
    with emulator(tmp, live, throttle=True) as conn:
        env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": conn}
        _, planned = sbrules("plan", str(tmp / "desired"), "--out", str(tmp / "plan.json"), "--max-credits", "500",
                             env=env)
        assert planned.returncode == 0, planned.stderr
        time.sleep(1.0)  # the next second's credits for the measured run
        producer = subprocess.Popen(
            [sys.executable, __file__, "--production-sender", conn, str(PRODUCTION_SHARE * STANDARD),
             *map(str, bursts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert producer.stdout is not None and producer.stdin is not None
        assert producer.stdout.readline().strip() == "ready"
        journal = tmp / "journal.jsonl"
        _, applied = sbrules("apply", str(tmp / "plan.json"), "--journal", str(journal),
                             "--credit-share", str(SHARE), env=env)
        producer.stdin.close()
        production = json.loads(producer.stdout.read().strip().splitlines()[-1])
        producer.wait(timeout=60)
    done = re.search(r"(\d+) change\(s\) applied", applied.stdout)
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    attempts = [e for e in entries if "op" in e and "attempt" in e]
    pacing = entries[-1]
    times = [e["time"] for e in attempts]
    import datetime as dt

    span = (dt.datetime.fromisoformat(max(times)) - dt.datetime.fromisoformat(min(times))).total_seconds()
    credits_per_s = pacing["credits"] / span
    return {
        "apply_changes": subs * per_sub,
        "apply_seconds": round(span, 2),
        "apply_budget_credits_per_s": SHARE * STANDARD,
        "apply_credits_per_s": round(credits_per_s, 1),
        "apply_credit_share_of_budget": round(credits_per_s / (SHARE * STANDARD), 3),
        "apply_failed_changes": subs * per_sub - (int(done.group(1)) if done else 0),
        "apply_requests": len(attempts),
        "apply_throttled_fraction": round(sum(1 for e in attempts if e.get("throttled")) / max(1, len(attempts)), 4),
        "production_sends": production["sent"],
        "production_throttled_fraction": round(production["throttled"] / max(1, production["sent"]), 4),
    }


# -- 2. sampling without throttling ----------------------------------------------------------------
def sdk_peek_loop(connection_string: str, expected: int) -> float:
    from azure.servicebus import ServiceBusClient

    with ServiceBusClient.from_connection_string(connection_string, retry_total=0) as sb:
        with sb.get_subscription_receiver("orders", "all") as receiver:
            receiver.peek_messages(max_message_count=1, sequence_number=1)  # open the link, as sample's start-up does
            started = time.perf_counter()
            seen, sequence = 0, 1
            while True:
                page = receiver.peek_messages(max_message_count=PAGE, sequence_number=sequence)
                if not page:
                    break
                seen += len(page)
                sequence = page[-1].sequence_number + 1
            elapsed = time.perf_counter() - started
    assert seen == expected, (seen, expected)
    return expected / elapsed


def sample_cli(connection_string: str, out: Path, expected: int, *extra: str) -> float:
    elapsed, done = sbrules("sample", "--topic", "orders", "--subscription", "all", "--out", str(out),
                            "--format", "json", "--connection-string", connection_string, *extra)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["written"] == expected
    return expected / elapsed


def raw_peeks(connection_string: str, expected: int) -> tuple[float, list[bytes]]:
    """The floor the emulator sets: pipelined peeks (the sampler's pages in flight) with the
    messages left undecoded; messages/s and their bytes."""
    from proton import int32

    from reconciler.amqp.messaging import PEEK_MESSAGE
    from reconciler.amqp.requests import entity_path
    from reconciler.app.target import Target
    from reconciler.traffic.sample.sampler import PAGES_IN_FLIGHT

    payloads: list[bytes] = []
    with Target.connect(connection_string) as target, target.amqp() as client:
        client.peek_messages("orders", "all", 1, 1)
        started = time.perf_counter()
        sequence = 1
        while True:
            starts = [sequence + k * PAGE for k in range(PAGES_IN_FLIGHT)]
            body = {"message-count": int32(PAGE)}
            calls = [(entity_path("orders", "all"), PEEK_MESSAGE, {**body, "from-sequence-number": s}) for s in starts]
            responses = client.request_all(calls, ok=(200, 204), empty_ok=True)
            pages = [[e["message"] for e in r.body["messages"]] if r.body else [] for r in responses]
            payloads += [p for page in pages for p in page]
            sequence += PAGE * PAGES_IN_FLIGHT
            if sum(map(len, pages)) < PAGE * PAGES_IN_FLIGHT:
                break
        elapsed = time.perf_counter() - started
    assert len(payloads) == expected, (len(payloads), expected)
    return expected / elapsed, payloads


def client_cpu_per_message(payloads: list[bytes]) -> dict:
    """CPU microseconds per message of what the sampler does with a peeked message: decode its
    fields, add it to the batch's columns and build the Arrow table (no network, no Parquet)."""
    from reconciler.amqp.messages import decode_message_fields
    from reconciler.traffic.sample.rows import Columns

    started = time.process_time()
    fields = [decode_message_fields(p) for p in payloads]
    decoded = time.process_time()
    columns = Columns()
    for f in fields:
        columns.add(f.system, f.user, topic="orders", subscription="all", body_size=len(f.body))
    columns.table()
    done = time.process_time()
    return {
        "client_decode_cpu_us_per_msg": round((decoded - started) / len(payloads) * 1e6, 1),
        "client_row_cpu_us_per_msg": round((done - decoded) / len(payloads) * 1e6, 1),
    }


def sample_startup(connection_string: str, out: Path) -> float:
    """Seconds of an ``sbrules sample`` run over an empty subscription: start-up, connecting, one peek."""
    elapsed, done = sbrules("sample", "--topic", "empty", "--subscription", "all", "--out", str(out),
                            "--format", "json", "--connection-string", connection_string)
    assert done.returncode == 0, done.stderr
    return elapsed


def bench_sampling(tmp: Path, messages: int) -> dict:
    """Also the floors at 0 ms, for ``messages`` in one CLI run: its start-up (an empty subscription)
    plus the messages at the emulator's raw peek rate (a client that costs nothing per message),
    plus them at the client's CPU per message (decode and row) on one thread, and plus the
    emulator's and the client's CPU per message shared perfectly by all the machine's cores."""
    out: dict = {}
    for latency_ms in (0, 20):
        run = tmp / f"sampling-{latency_ms}"
        run.mkdir()
        with emulator(run, {"orders": {"all": ["all"]}, "empty": {"all": ["all"]}}, latency=latency_ms / 1000) as conn:
            seed(conn, "orders", messages)
            sdk = sdk_peek_loop(conn, messages)
            ours = sample_cli(conn, run / "sample", messages)
            if latency_ms == 0:
                startup = min(sample_startup(conn, run / f"empty-{i}") for i in range(3))
                raw, payloads = raw_peeks(conn, messages)
                cpu = client_cpu_per_message(payloads)
                client_us = cpu["client_decode_cpu_us_per_msg"] + cpu["client_row_cpu_us_per_msg"]
                out["sample_startup_s"] = round(startup, 2)
                out["emulator_raw_peek_msgs_per_s"] = round(raw)
                out |= cpu
                emulator_floor = messages / (startup + messages / raw)
                client_floor = messages / (startup + messages * max(1 / raw, client_us / 1e6))
                # The emulator's and the client's CPU per message spread perfectly over every core
                # (the emulator serves its raw rate on about one).
                cores_floor = messages / (startup + messages * (1 / raw + client_us / 1e6) / (os.cpu_count() or 1))
                out["sample_floor_emulator_msgs_per_s"] = round(emulator_floor)
                out["sample_floor_emulator_vs_sdk"] = round(emulator_floor / sdk, 2)
                out["sample_floor_one_thread_msgs_per_s"] = round(client_floor)
                out["sample_floor_one_thread_vs_sdk"] = round(client_floor / sdk, 2)
                out["sample_floor_all_cores_msgs_per_s"] = round(cores_floor)
                out["sample_floor_all_cores_vs_sdk"] = round(cores_floor / sdk, 2)
        suffix = "" if latency_ms == 0 else f"_{latency_ms}ms"
        out[f"sample_msgs_per_s{suffix}"] = round(ours)
        out[f"sdk_peek_msgs_per_s{suffix}"] = round(sdk)
        out[f"sample_vs_sdk_{latency_ms}ms"] = round(ours / sdk, 2)
    return out


# -- 3. sampling under throttling ----------------------------------------------------------------
def bench_throttled_sampling(tmp: Path, messages: int) -> dict:
    from reconciler.app import operations
    from reconciler.app.target import Target

    state = tmp / "state.json"
    with emulator(tmp, {"orders": {"all": ["all"]}}, state=state) as conn:
        seed(conn, "orders", messages)
    with emulator(tmp, {"orders": {"all": ["all"]}}, throttle=True, state=state) as conn:
        target = Target.connect(conn, max_credits=SAMPLE_BUDGET)
        pacer = target.pacer()
        started = time.perf_counter()
        before = pacer.stats().credits
        stats = operations.sample(target, "orders", ["all"], str(tmp / "throttled-sample"), page_size=PAGE)
        elapsed = time.perf_counter() - started
        spent = pacer.stats().credits - before
        throttled = pacer.stats().throttled
    ids = [row["message_id"] for row in pq.read_table(tmp / "throttled-sample", columns=["message_id"]).to_pylist()]
    wanted = {f"m{i}" for i in range(messages)}
    return {
        "throttled_sample_messages": messages,
        "throttled_sample_budget_credits_per_s": SAMPLE_BUDGET,
        "throttled_sample_credits_per_s": round(spent / elapsed, 1),
        "throttled_sample_credit_share_of_budget": round(spent / elapsed / SAMPLE_BUDGET, 3),
        "throttled_sample_throttled_requests": throttled,
        "throttled_sample_lost": len(wanted - set(ids)),
        "throttled_sample_duplicated": len(ids) - len(set(ids)) + stats.subscriptions[0].duplicates,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--throttled-messages", type=int, default=5000)
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts to run ({', '.join(PARTS)})")
    parser.add_argument("--production-sender", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.production_sender:
        connection_string, rate, *bursts = args.production_sender
        production_sender(connection_string, float(rate), [float(b) for b in bursts])
        return
    result: dict = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        benches = {"apply": lambda d: bench_apply(d, args.changes),
                   "sampling": lambda d: bench_sampling(d, args.messages),
                   "throttled": lambda d: bench_throttled_sampling(d, args.throttled_messages),
                   "bursts": lambda d: {f"bursts_{key}": value
                                        for key, value in bench_apply(d, args.changes, BURST_TIMES).items()}}
        for name in args.only.split(","):
            if name not in benches:
                parser.error(f"--only: unknown part {name!r} (parts: {', '.join(PARTS)})")
            bench = benches[name]
            (root / name).mkdir()
            result |= bench(root / name)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
