"""Benchmark adopting a whole namespace: ``export --all`` against exporting one subscription at a time.

The namespace: ``--topics`` × ``--subs`` subscriptions × ``--rules`` rules (default 20 × 100 × 10),
served by ``sbrules emulator`` in its own process. Two ways to export all of it as rule files:

- ``export_all``: what ``sbrules export --all --out DIR`` does — one discovery pass over the
  management REST API (topics, then each topic's subscriptions), then every subscription's rules
  read over one AMQP connection, pipelined, and one file written per topic;
- ``one_at_a_time``: the subscription names known in advance, each subscription exported on its
  own (one enumerate-rules round trip after another over one connection), the same files written.

Both produce the same files (checked). Target: ``export_all`` at least 3× faster. Figures are the
best of ``--repeat`` runs, variants interleaved; ``--latency-ms`` adds a delay to every AMQP
management response (a client outside the namespace's region sees ~20 ms).

    python benchmarks/rest.py [--topics 20] [--subs 100] [--rules 10] [--latency-ms 0 20] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from reconcile import best_of, emulator_process, rule  # the sibling benchmark's emulator process and rules

from reconciler.amqp.client import ManagementClient
from reconciler.export import discovered_targets, export_rules, export_topic, write_export
from reconciler.model import DesiredState, Subscription, Topic
from reconciler.rest.client import ManagementRestClient


def namespace(n_topics: int, n_subs: int, n_rules: int) -> DesiredState:
    rules = tuple(rule(j) for j in range(n_rules))
    return DesiredState(tuple(
        Topic(f"topic-{t:02d}", tuple(Subscription(f"sub-{s:03d}", rules) for s in range(n_subs)))
        for t in range(n_topics)
    ))


def export_all(conn: str, out: Path) -> float:
    """sbrules export --all --out DIR, from fresh clients (connect, discover, read, write)."""
    started = time.perf_counter()
    with ManagementClient(conn) as client, ManagementRestClient(conn) as rest:
        result = export_rules(client, discovered_targets(rest), fallback=rest)
    for doc in result.documents:
        write_export(doc, out)
    return time.perf_counter() - started


def one_at_a_time(conn: str, names: dict[str, list[str]], out: Path) -> float:
    """The same files, each subscription read on its own with its name known in advance."""
    started = time.perf_counter()
    with ManagementClient(conn) as client:
        for topic, subs in names.items():
            merged: dict = {"topic": topic, "subscriptions": {}}
            for sub in subs:
                doc, _ = export_topic(client, topic, [sub])
                merged["subscriptions"].update(doc["subscriptions"])
            write_export(merged, out)
    return time.perf_counter() - started


def bench(n_topics: int, n_subs: int, n_rules: int, latency: float, repeat: int) -> dict:
    live = namespace(n_topics, n_subs, n_rules)
    names = {t.name: [s.name for s in t.subscriptions] for t in live.topics}
    with emulator_process(live, latency) as conn, tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "all"), Path(tmp, "one")
        with ManagementClient(conn) as warm:  # the emulator's first connection and SQL caches
            warm.list_rules(live.topics[0].name, live.topics[0].subscriptions[0].name)
        best = best_of(
            repeat, {"export_all": lambda: export_all(conn, a), "one_at_a_time": lambda: one_at_a_time(conn, names, b)}
        )
        same = sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir()) and all(
            (a / p.name).read_text() == (b / p.name).read_text() for p in a.iterdir()
        )
    subscriptions = n_topics * n_subs
    return {
        "added_latency_ms": latency * 1000,
        "topics": n_topics,
        "subscriptions": subscriptions,
        "rules": subscriptions * n_rules,
        "export_all_s": round(best["export_all"], 3),
        "one_at_a_time_s": round(best["one_at_a_time"], 3),
        "export_all_subscriptions_per_s": round(subscriptions / best["export_all"], 1),
        "one_at_a_time_subscriptions_per_s": round(subscriptions / best["one_at_a_time"], 1),
        "speedup": round(best["one_at_a_time"] / best["export_all"], 2),
        "target_speedup": 3.0,
        "same_files": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--subs", type=int, default=100)
    parser.add_argument("--rules", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    load = os.getloadavg()
    runs = [bench(args.topics, args.subs, args.rules, ms / 1000, args.repeat) for ms in args.latency_ms]
    context = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load],
        "emulator": "separate process (sbrules emulator)",
    }
    print(json.dumps(context | {"runs": runs}, indent=2))


if __name__ == "__main__":
    main()
