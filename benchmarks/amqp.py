"""Benchmark the `$management` client over loopback AMQP against the emulator; prints JSON.

round_trips: enumerate-rules round trips per second (each response decoded into rules), one at a
             time (sequential) versus ``--threads`` in flight on the same connection: pipelined
             as a batch from one thread (``list_rules_many``, what sbrules uses) and, for
             comparison, from ``--threads`` caller threads each waiting for its own response;
             with no added latency and with a simulated service latency (``--latency-ms``).
enumerate:   list 10,000 rules across 200 subscriptions (50 each), sequential vs pipelined.

The emulator runs in a separate process so that client and server do not share one GIL.

    python benchmarks/amqp.py [--requests 2000] [--threads 64] [--latency-ms 0 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

from reconciler.amqp.client import ManagementClient
from reconciler.model import CorrelationFilter, DesiredState, Rule, SqlFilter, Subscription, Topic

TOPIC = "bench"


def _rule(i: int) -> Rule:
    if i % 2:
        return Rule(f"r{i:02d}", CorrelationFilter(subject=f"s{i}", properties={"n": i}))
    return Rule(f"r{i:02d}", SqlFilter(f"region = 'r{i}' AND amount > {i}"))


def _desired(subs: int, rules: int) -> DesiredState:
    subscriptions = tuple(Subscription(f"sub{s:03d}", tuple(_rule(i) for i in range(rules))) for s in range(subs))
    return DesiredState((Topic(TOPIC, subscriptions + (Subscription("one", (_rule(0),)),)),))


def _serve(subs: int, rules: int, latency: float, conn: Connection) -> None:
    from reconciler.emulator import Emulator

    with Emulator(_desired(subs, rules)) as emu:
        emu.faults.update(latency=latency)
        conn.send(emu.connection_string)
        conn.recv()  # wait for "stop"


class ServerProcess:
    def __init__(self, subs: int, rules: int, latency: float) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(subs, rules, latency, child), daemon=True)

    def __enter__(self) -> str:
        self._proc.start()
        return self._conn.recv()

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        self._proc.join(10)


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1)


def round_trips(connection_string: str, requests: int, threads: int) -> dict[str, float]:
    with ManagementClient(connection_string, window=threads) as client:
        client.list_rules(TOPIC, "one")  # connect + authorise outside the timing
        seq_n = max(50, requests // 10)
        started = time.perf_counter()
        for _ in range(seq_n):
            client.list_rules(TOPIC, "one")
        sequential = _rate(seq_n, time.perf_counter() - started)
        started = time.perf_counter()
        results = client.list_rules_many([(TOPIC, "one")] * requests, window=threads)
        pipelined = _rate(requests, time.perf_counter() - started)
        assert all(len(r) == 1 for r in results)
        with ThreadPoolExecutor(threads) as pool:
            started = time.perf_counter()
            list(pool.map(lambda _: client.list_rules(TOPIC, "one"), range(requests)))
            threaded = _rate(requests, time.perf_counter() - started)
    return {
        "sequential_per_s": sequential,
        "pipelined_per_s": pipelined,
        "speedup": round(pipelined / sequential, 2),
        "pipelined_from_threads_per_s": threaded,
        "speedup_from_threads": round(threaded / sequential, 2),
    }


def enumerate_all(connection_string: str, subs: int, threads: int) -> dict[str, float]:
    names = [f"sub{s:03d}" for s in range(subs)]
    out: dict[str, float] = {}
    for label, window in (("sequential", 1), ("pipelined", threads)):
        with ManagementClient(connection_string, window=threads) as client:
            started = time.perf_counter()
            counts = [len(rules) for rules in client.list_rules_many([(TOPIC, n) for n in names], window=window)]
            elapsed = time.perf_counter() - started
        out[f"{label}_seconds"] = round(elapsed, 3)
        out[f"{label}_rules_per_s"] = _rate(sum(counts), elapsed)
        out["rules"] = sum(counts)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 2.0])
    parser.add_argument("--subs", type=int, default=200)
    parser.add_argument("--rules", type=int, default=50)
    args = parser.parse_args()
    result: dict[str, object] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": mp.cpu_count(),
        "threads": args.threads,
        "round_trips": {},
    }
    for latency_ms in args.latency_ms:
        with ServerProcess(args.subs, args.rules, latency_ms / 1000) as cs:
            result["round_trips"][f"latency_{latency_ms:g}ms"] = round_trips(cs, args.requests, args.threads)
            if latency_ms == args.latency_ms[0]:
                result["enumerate"] = {"subscriptions": args.subs, **enumerate_all(cs, args.subs, args.threads)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
