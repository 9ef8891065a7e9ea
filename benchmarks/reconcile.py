"""Benchmark plan and apply on the in-process emulator; prints JSON.

plan:  200 subscriptions × 50 rules (10,000 rules) read and diffed.
apply: 1,000 changes (100 subscriptions × 4 creates, 3 replaces, 3 deletes).

Each is measured three ways in one run: as sbrules does it (pipelined over one connection, many
subscriptions at once), the same work one request at a time, and the emulator's own request
ceiling (the same request kind fired from many threads with no planning work at all). Run with no
added latency (everything in one process: CPU-bound) and with a simulated network round trip.

    python benchmarks/reconcile.py [--latency-ms 0 5] [--subs 200] [--rules 50]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from concurrent.futures import ThreadPoolExecutor

from reconciler.amqp.client import ManagementClient
from reconciler.apply import ApplyOptions, apply_plan
from reconciler.emulator import Emulator
from reconciler.model import CorrelationFilter, DesiredState, Rule, SqlFilter, Subscription, Topic
from reconciler.observe import observe
from reconciler.plan import compute_plan, signature

TOPIC = "bench"


def rule(i: int, variant: str = "") -> Rule:
    if i % 2:
        return Rule(f"r{i:02d}", CorrelationFilter(subject=f"s{i}{variant}", properties={"n": i}))
    return Rule(f"r{i:02d}", SqlFilter(f"region = 'r{i}{variant}' AND amount > {i}"))


def state(subs: dict[str, list[Rule]]) -> DesiredState:
    return DesiredState((Topic(TOPIC, tuple(Subscription(name, tuple(rules)) for name, rules in subs.items())),))


def ceiling(client: ManagementClient, calls: list, threads: int = 64) -> float:
    """Requests per second when the emulator is simply kept busy with ``calls``."""
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda call: call(), calls))
    return len(calls) / (time.perf_counter() - started)


def bench_plan(n_subs: int, n_rules: int, latency: float) -> dict:
    desired = state({f"s{i:03d}": [rule(j) for j in range(n_rules)] for i in range(n_subs)})
    with Emulator(desired) as emu, ManagementClient(emu.connection_string) as client:
        compute_plan(desired, observe(client, desired))  # connect, authenticate, warm the SQL caches
        emu.faults.update(latency=latency)
        timings = {}
        for label, concurrency in (("pipelined", 64), ("one_at_a_time", 1)):
            signature.cache_clear()  # both runs pay for the whole diff
            started = time.perf_counter()
            plan = compute_plan(desired, observe(client, desired, concurrency=concurrency))
            timings[label] = time.perf_counter() - started
            assert not plan.has_changes and plan.summary()["unchanged"] == n_subs * n_rules
        calls = [lambda s=s: client.list_rules(TOPIC, s.name) for s in desired.topics[0].subscriptions] * 2
        ceiling_rps = ceiling(client, calls)
    requests = n_subs * (n_rules // 100 + 1)
    return _result("plan", requests, timings, ceiling_rps, rules=n_subs * n_rules, subscriptions=n_subs)


def bench_apply(latency: float, n_subs: int = 100) -> dict:
    live_rules = [rule(i) for i in range(10)]
    # keep r00-r02 and r06, replace r03-r05, delete r07-r09, create r10-r13: 10 changes per subscription.
    declared = [rule(i) for i in (0, 1, 2, 6)] + [rule(i, "-v2") for i in (3, 4, 5)] + [rule(i) for i in range(10, 14)]
    live = state({f"s{i:03d}": live_rules for i in range(n_subs)})
    desired = state({f"s{i:03d}": declared for i in range(n_subs)})
    timings, requests = {}, 0
    for label, parallel in (("pipelined", 64), ("one_at_a_time", 1)):
        with Emulator(live) as emu, ManagementClient(emu.connection_string) as client:
            client.list_rules(TOPIC, "s000")
            plan = compute_plan(desired, observe(client, desired))
            assert plan.summary() == {"create": 4 * n_subs, "replace": 3 * n_subs, "delete": 3 * n_subs, "unchanged": 4 * n_subs}
            emu.faults.update(latency=latency)
            started = time.perf_counter()
            report = apply_plan(client, plan, ApplyOptions(parallel=parallel))
            timings[label] = time.perf_counter() - started
            assert report.ok
            requests = n_subs * (1 + 4 + 3 * 4 + 3)
            if label == "pipelined":
                extra = Rule("ceiling", SqlFilter("x = 1"))
                calls = []
                for s in desired.topics[0].subscriptions:
                    calls += [lambda s=s: client.add_rule(TOPIC, s.name, extra), lambda s=s: client.remove_rule(TOPIC, s.name, "ceiling")]
                # add/remove pairs must stay ordered per subscription: one thread per subscription.
                started = time.perf_counter()
                with ThreadPoolExecutor(64) as pool:
                    list(pool.map(lambda i: (calls[2 * i](), calls[2 * i + 1]()), range(len(calls) // 2)))
                ceiling_rps = len(calls) / (time.perf_counter() - started)
    return _result("apply", requests, timings, ceiling_rps, changes=10 * n_subs, subscriptions=n_subs)


def _result(name: str, requests: int, timings: dict, ceiling_rps: float, **extra) -> dict:
    rps = requests / timings["pipelined"]
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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 5.0])
    parser.add_argument("--subs", type=int, default=200)
    parser.add_argument("--rules", type=int, default=50)
    args = parser.parse_args()
    runs = []
    for ms in args.latency_ms:
        for result in (bench_plan(args.subs, args.rules, ms / 1000), bench_apply(ms / 1000)):
            runs.append({"added_latency_ms": ms, **result})
    print(json.dumps({"python": platform.python_version(), "machine": platform.machine(), "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
