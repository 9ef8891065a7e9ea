"""Benchmark plan and apply against the emulator; prints JSON.

plan:   200 subscriptions × 50 rules (10,000 rules) read and diffed.
apply:  1,000 changes (100 subscriptions × 4 creates, 3 replaces, 3 deletes).
export: the same 10,000 rules read and written as rule files.
sample: 10,000 messages peeked from a catch-all subscription into a Parquet dataset.

Each is measured three ways in one run: as sbrules does it (pipelined over one connection, many
subscriptions at once), the same work one request at a time, and the emulator's own request
ceiling (the same requests pipelined as one batch, 64 in flight, with no planning work and no
decoding of rules at all), all at the same added latency. The emulator runs in its own process (``sbrules emulator``), as a server
would. With no added latency every variant is CPU-bound, so one request at a time is already close
to the ceiling; with a simulated round trip (20 ms, typical for a client outside the namespace's
region) the difference that pipelining makes shows. Every figure is the best of ``--repeat`` runs.
The pipelined run is measured over AMQP over WebSockets too (``websockets_speed_vs_amqp``: its
speed as a fraction of plain AMQP's, 1.0 = as fast); export and sample are measured that way only.

    python benchmarks/reconcile.py [--latency-ms 0 20] [--subs 200] [--rules 50] [--repeat 2] [--messages 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from proton import int32

from reconciler.amqp import codec
from reconciler.amqp.client import ManagementClient
from reconciler.amqp.requests import OP_PREFIX, entity_path
from reconciler.amqp.rules import ENUMERATE_RULES, RULES_PAGE_SIZE
from reconciler.apply import ApplyOptions, apply_plan
from reconciler.export import rule_file_doc, write_exports
from reconciler.model import CorrelationFilter, DesiredState, Rule, SqlFilter, Subscription, Topic
from reconciler.namespace.network import DIRECT, Network
from reconciler.observe import observe
from reconciler.plan import compute_plan, signature

TOPIC = "bench"
T = TypeVar("T")


def rule(i: int, variant: str = "") -> Rule:
    if i % 2:
        return Rule(f"r{i:02d}", CorrelationFilter(subject=f"s{i}{variant}", properties={"n": i}))
    return Rule(f"r{i:02d}", SqlFilter(f"region = 'r{i}{variant}' AND amount > {i}"))


def state(subs: dict[str, list[Rule]]) -> DesiredState:
    return DesiredState((Topic(TOPIC, tuple(Subscription(name, tuple(rules)) for name, rules in subs.items())),))


@dataclass(frozen=True)
class EmulatorProcess:
    """A running ``sbrules emulator`` child process."""

    connection_string: str
    pid: int

    def cpu_seconds(self) -> float:
        """User + system CPU time the emulator has used so far (Linux ``/proc``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def emulator_process(live: DesiredState, latency: float) -> Iterator[str]:
    """``sbrules emulator`` in a child process seeded with ``live``; yields its connection string."""
    with emulator_server(live, latency) as server:
        yield server.connection_string


@contextlib.contextmanager
def emulator_server(live: DesiredState, latency: float) -> Iterator[EmulatorProcess]:
    """``sbrules emulator`` in a child process seeded with ``live``."""
    with tempfile.TemporaryDirectory() as tmp:
        for topic in live.topics:
            subs = {s.name: s.rules or () for s in topic.subscriptions}
            write_exports([rule_file_doc(topic.name, subs, explicit_types=True)], Path(tmp, "rules"))
        faults = Path(tmp, "faults.json")
        faults.write_text(json.dumps({"latency": latency}))
        cmd = [sys.executable, "-m", "reconciler", "emulator", "--port", "0"]
        cmd += ["--rules", f"{tmp}/rules", "--faults", str(faults)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            connection_string = proc.stdout.readline().strip()
            if not connection_string:
                raise RuntimeError("the emulator did not start")
            yield EmulatorProcess(connection_string, proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def best_of(repeat: int, variants: dict[str, Callable[[], T]], key: Callable[[T], float] = float) -> dict[str, T]:
    """The best run of each variant over ``repeat`` rounds (the smallest ``key``: a run's time),
    variants interleaved within a round so that a burst of load from elsewhere on the machine does
    not land on one variant only."""
    best: dict[str, T] = {}
    for _ in range(repeat):
        for name, run in variants.items():
            result = run()
            if name not in best or key(result) < key(best[name]):
                best[name] = result
    return best


def ceiling(client: ManagementClient, calls: list, ok: tuple[int, ...] = (200,)) -> float:
    """Seconds to pipeline the raw ``calls`` as one batch, 64 in flight (no work beyond the wire)."""
    started = time.perf_counter()
    results = client.request_all(calls, ok=ok, window=64)
    elapsed = time.perf_counter() - started
    assert not [r for r in results if isinstance(r, Exception)]
    return elapsed


def bench_plan(n_subs: int, n_rules: int, latency: float, repeat: int) -> dict:
    desired = state({f"s{i:03d}": [rule(j) for j in range(n_rules)] for i in range(n_subs)})
    requests = n_subs * (n_rules // 100 + 1)
    with emulator_process(desired, latency) as conn, ManagementClient(conn) as client, \
            ManagementClient(conn, network=Network("websockets")) as ws_client:
        for each in (client, ws_client):
            compute_plan(desired, observe(each, desired))  # connect, authenticate every link, warm the SQL caches

        def plan(concurrency: int, over: ManagementClient = client) -> float:
            signature.cache_clear()  # every run pays for the whole diff
            started = time.perf_counter()
            result = compute_plan(desired, observe(over, desired, concurrency=concurrency))
            assert not result.has_changes and result.summary()["unchanged"] == n_subs * n_rules
            return time.perf_counter() - started

        subs = [s.name for s in desired.topics[0].subscriptions]
        timings = best_of(
            repeat,
            {
                "pipelined": lambda: plan(64),
                "websockets": lambda: plan(64, ws_client),
                "one_at_a_time": lambda: plan(1),
                "ceiling": lambda: ceiling(client, [
                    (entity_path(TOPIC, s), ENUMERATE_RULES, {"top": int32(RULES_PAGE_SIZE), "skip": int32(0)})
                    for s in subs
                ], ok=(200, 204)),
            },
        )
    return _result("plan", requests, timings, rules=n_subs * n_rules, subscriptions=n_subs)


def bench_apply(latency: float, repeat: int, n_subs: int = 100) -> dict:
    # keep r00-r02 and r06, replace r03-r05, delete r07-r09, create r10-r13: 10 changes per subscription.
    declared = [rule(i) for i in (0, 1, 2, 6)] + [rule(i, "-v2") for i in (3, 4, 5)] + [rule(i) for i in range(10, 14)]
    live = state({f"s{i:03d}": [rule(i) for i in range(10)] for i in range(n_subs)})
    desired = state({f"s{i:03d}": declared for i in range(n_subs)})
    requests = n_subs * (1 + 4 + 3 * 4 + 3 + 1)  # stale-check read, creates, gapless replaces, deletes, the read after

    def apply(parallel: int, network: Network = DIRECT) -> float:
        with emulator_process(live, latency) as conn, ManagementClient(conn, network=network) as client:
            plan = compute_plan(desired, observe(client, desired))
            expected = {"create": 4 * n_subs, "replace": 3 * n_subs, "delete": 3 * n_subs, "unchanged": 4 * n_subs}
            assert plan.summary() == expected
            started = time.perf_counter()
            assert apply_plan(client, plan, ApplyOptions(parallel=parallel)).ok
            return time.perf_counter() - started

    def apply_ceiling() -> float:
        """As many add-rule requests, then as many remove-rule requests, each batch pipelined."""
        with emulator_process(live, latency) as conn, ManagementClient(conn) as client:
            subs = [entity_path(TOPIC, s.name) for s in desired.topics[0].subscriptions]
            client.list_rules_many([(TOPIC, s.name) for s in desired.topics[0].subscriptions])  # attach links
            names = [(sub, f"c{i}") for sub in subs for i in range(requests // (2 * n_subs))]
            adds = [(sub, OP_PREFIX + "add-rule", codec.encode_add_rule_body(Rule(n, SqlFilter("x = 1"))))
                    for sub, n in names]
            removes = [(sub, OP_PREFIX + "remove-rule", {"rule-name": n}) for sub, n in names]
            return (ceiling(client, adds) + ceiling(client, removes)) * requests / (2 * len(names))

    timings = best_of(
        repeat, {
            "pipelined": lambda: apply(64), "websockets": lambda: apply(64, Network("websockets")),
            "one_at_a_time": lambda: apply(1), "ceiling": apply_ceiling,
        }
    )
    return _result("apply", requests, timings, changes=10 * n_subs, subscriptions=n_subs)


def bench_export(n_subs: int, n_rules: int, latency: float, repeat: int) -> dict:
    """``export`` of every subscription, as sbrules does it, over plain AMQP and over WebSockets."""
    from reconciler.export import export_rules

    desired = state({f"s{i:03d}": [rule(j) for j in range(n_rules)] for i in range(n_subs)})
    targets = {TOPIC: [s.name for s in desired.topics[0].subscriptions]}
    with emulator_process(desired, latency) as conn, ManagementClient(conn) as client, \
            ManagementClient(conn, network=Network("websockets")) as ws_client, tempfile.TemporaryDirectory() as out:

        def export(over: ManagementClient) -> float:
            started = time.perf_counter()
            result = export_rules(over, targets)
            write_exports(result.documents, out)
            assert len(result.documents[0]["subscriptions"]) == n_subs
            return time.perf_counter() - started

        for each in (client, ws_client):
            export(each)  # connect, authenticate every link
        timings = best_of(repeat, {"amqp": lambda: export(client), "websockets": lambda: export(ws_client)})
    return _transport_result("export", timings, rules=n_subs * n_rules, subscriptions=n_subs)


def bench_sample(n_messages: int, latency: float, repeat: int) -> dict:
    """``sample`` of a catch-all subscription holding ``n_messages``, over plain AMQP and over WebSockets."""
    from reconciler.model import Message, TrueFilter, TypedValue, ValueType
    from reconciler.traffic.sample.sampler import sample

    live = state({"all": [Rule("$Default", TrueFilter())]})
    messages = [
        Message(
            sys={"MessageId": TypedValue(ValueType.STRING, f"m{i}"), "Label": TypedValue(ValueType.STRING, "order")},
            user={"n": TypedValue(ValueType.LONG, i), "region": TypedValue(ValueType.STRING, "eu")},
            body=b"{}",
        )
        for i in range(n_messages)
    ]
    with emulator_process(live, latency) as conn, ManagementClient(conn) as client, \
            ManagementClient(conn, network=Network("websockets")) as ws_client:
        for start in range(0, n_messages, 500):
            assert not [e for e in client.send_messages(TOPIC, messages[start:start + 500]) if e is not None]

        def run(over: ManagementClient) -> float:
            with tempfile.TemporaryDirectory() as dataset:
                started = time.perf_counter()
                stats = sample(over, TOPIC, ["all"], dataset)
                elapsed = time.perf_counter() - started
            assert stats.written == n_messages, stats
            return elapsed

        timings = best_of(repeat, {"amqp": lambda: run(client), "websockets": lambda: run(ws_client)})
    return _transport_result("sample", timings, messages=n_messages)


def _transport_result(name: str, timings: dict, **extra) -> dict:
    return {
        "benchmark": name,
        **extra,
        "seconds": round(timings["amqp"], 3),
        "seconds_websockets": round(timings["websockets"], 3),
        "websockets_speed_vs_amqp": round(timings["amqp"] / timings["websockets"], 2),
    }


def _result(name: str, requests: int, timings: dict, **extra) -> dict:
    rps = requests / timings["pipelined"]
    ceiling_rps = requests / timings["ceiling"]
    return {
        "benchmark": name,
        **extra,
        "requests": requests,
        "seconds": round(timings["pipelined"], 3),
        "seconds_one_at_a_time": round(timings["one_at_a_time"], 3),
        "speedup_vs_one_at_a_time": round(timings["one_at_a_time"] / timings["pipelined"], 2),
        "requests_per_second": round(rps, 1),
        "emulator_ceiling_requests_per_second": round(ceiling_rps, 1),
        "fraction_of_ceiling": round(rps / ceiling_rps, 2),
        "seconds_websockets": round(timings["websockets"], 3),
        "websockets_speed_vs_amqp": round(timings["pipelined"] / timings["websockets"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--subs", type=int, default=200)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args()
    load = os.getloadavg()
    runs = []
    for ms in args.latency_ms:
        latency = ms / 1000
        for result in (
            bench_plan(args.subs, args.rules, latency, args.repeat),
            bench_apply(latency, args.repeat),
            bench_export(args.subs, args.rules, latency, args.repeat),
            bench_sample(args.messages, latency, args.repeat),
        ):
            runs.append({"added_latency_ms": ms, **result})
    context = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load],
        "emulator": "separate process (sbrules emulator)",
    }
    print(json.dumps(context | {"runs": runs}, indent=2))


if __name__ == "__main__":
    main()
