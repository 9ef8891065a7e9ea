"""Benchmark: `sbrules test`, routing unit tests, at any rule count (issue 41's targets).

- ``sbrules test`` end to end (a fresh process, start-up included) on 10,000 cases against 2,000
  rules (one topic, 200 subscriptions × 10 rules: SQL with and without actions, correlation);
  target ≤ 3 s wall on the 2-core machine;
- cases per second in process (routed through the topic router and checked; the router's build
  and the reading of the test files timed apart) at 100, 2,000 and 20,000 rules: it should stay
  nearly flat, since only the candidate rules are evaluated;
- the same run with ``--coverage`` (target: at most 30 % more), and ``--mutate`` on the demo's
  rules (target ≤ 30 s);
- the same cases through ``sbrules route`` run case by case (a process per case, as a script
  would), and the ratio of the two per case;
- the floor under the end-to-end time: the interpreter and the CLI's start-up, and composing the
  test files with libyaml alone (the least any YAML reader of them costs), beside the CPU seconds
  the run itself took and the machine's load average (the machine is shared: wall time varies).

Prints one JSON object. Run: python benchmarks/test.py [--cases 10000] [--subscriptions 200] [--route-cases 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Event types and regions grow with the rule count (a topic with more subscriptions carries more
#: kinds of messages), so each message matches about as many rules at every size: ~4 by label, ~4 by region.
LABELS_PER_RULE = 1 / 5
REGIONS_PER_RULE = 1 / 10
#: Cases per test file (a team splits its cases by concern; one file is bounded by the YAML reader's node limit).
CASES_PER_FILE = 1_000


def vocabulary(rules: int) -> tuple[int, list[str]]:
    """How many labels, and the regions, for a topic of ``rules`` rules."""
    return max(1, int(rules * LABELS_PER_RULE)), [f"r{i}" for i in range(max(2, int(rules * REGIONS_PER_RULE)))]


def rule_file(subscriptions: int, rules: int) -> str:
    """One topic's rules: per subscription, SQL rules keyed on the label or region, some with an
    action, and correlation rules."""
    labels, regions = vocabulary(subscriptions * rules)
    lines = ["topic: orders", "subscriptions:"]
    for s in range(subscriptions):
        lines += [f"  sub-{s}:", "    rules:"]
        for r in range(rules):
            i = s * rules + r
            label = f"e{(i * 7) % labels}"
            if r % 5 == 4:
                tier = f"{{tier: {{int: {r % 3}}}}}"
                lines.append(f"      - {{name: corr-{r}, correlation: {{subject: {label}, properties: {tier}}}}}")
            elif r % 5 == 3:
                pair = f"'{regions[i % len(regions)]}', '{regions[(i + 1) % len(regions)]}'"
                lines.append(f"      - {{name: region-{r}, sql: \"region IN ({pair}) AND amount > {i % 500}\"}}")
            else:
                action = f", action: \"SET routed = 'r{i}'\"" if r % 5 == 0 else ""
                lines.append(f"      - {{name: sql-{r}, sql: \"sys.Label = '{label}' AND amount >= {i % 1000}\"{action}}}")
    return "\n".join(lines) + "\n"


def messages(count: int, rules: int, seed: int = 41) -> list[dict]:
    rng = random.Random(seed)
    labels, regions = vocabulary(rules)
    out = []
    for _ in range(count):
        user = {"amount": rng.randrange(0, 1200), "region": rng.choice(regions), "tier": {"int": rng.randrange(3)}}
        out.append({"sys": {"Label": f"e{rng.randrange(labels)}"}, "user": user})
    return out


def write_suite(root: Path, subscriptions: int, count: int) -> list[dict]:
    """The rule file and a test file whose cases pin today's routing (their expectations computed
    with the router outside the timed part); the messages."""
    from reconciler.model import Message
    from reconciler.rulefiles import load
    from reconciler.sql.router import topic_router

    (root / "orders.yaml").write_text(rule_file(subscriptions, 10))
    router = topic_router(load([root]).state.topics[0])
    sample = messages(count, subscriptions * 10)
    for first in range(0, count, CASES_PER_FILE):
        lines = ["topic: orders", "cases:"]
        for n, doc in enumerate(sample[first:first + CASES_PER_FILE], start=first):
            results = router.route(Message.from_json(doc))
            receivers = [router.subscriptions[i][0] for i, result in sorted(results.items()) if result.delivered]
            lines.append(f"  - {{name: case-{n}, given: {json.dumps(doc)}, expect: {{only: {json.dumps(receivers)}}}}}")
        (root / f"orders-{first // CASES_PER_FILE:03d}.test.yaml").write_text("\n".join(lines) + "\n")
    return sample


def end_to_end(root: Path, *options: str, fmt: str = "json") -> tuple[float, dict | None, float]:
    """Wall seconds, the summary (``--format json``), and the CPU seconds (user + system) of one
    ``sbrules test`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "test", str(root), "--format", fmt, *options],
        capture_output=True, text=True, check=False,
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"sbrules test failed ({done.returncode}): {done.stderr or done.stdout[:2000]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, json.loads(done.stdout)["summary"] if fmt == "json" else None, cpu


def best_of(runs: int, root: Path, *options: str, fmt: str = "json") -> tuple[float, dict | None, float]:
    """The fastest of ``runs`` runs (the machine is shared: the others waited for a core)."""
    return min((end_to_end(root, *options, fmt=fmt) for _ in range(runs)), key=lambda run: run[0])


def floor(root: Path) -> dict:
    """What no implementation of the run avoids: start-up (the interpreter alone, and the CLI
    answering --help) and composing the test files with libyaml (C), best of three each."""
    import yaml

    def best(command: list[str]) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times.append(time.perf_counter() - started)
        return min(times)

    texts = [file.read_text() for file in sorted(root.glob("*.test.yaml"))]
    composing = []
    gc.disable()  # as `sbrules test` reads: its collector paused
    try:
        for _ in range(3):
            started = time.perf_counter()
            for text in texts:
                yaml.compose(text, Loader=yaml.CSafeLoader)
            composing.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return {
        "python_start_seconds": round(best([sys.executable, "-c", "pass"]), 3),
        "cli_start_seconds": round(best([sys.executable, "-m", "reconciler", "test", "--help"]), 3),
        "libyaml_compose_seconds": round(min(composing), 3),
    }


def in_process_rate(root: Path) -> dict:
    """Cases per second routed and checked in this process (the fastest of three passes), the
    topic's router built beforehand (its build time reported beside), and the seconds reading the
    test files took."""
    from reconciler.rulefiles import load
    from reconciler.ruletests.cases import read_cases, test_files
    from reconciler.ruletests.run import run_case
    from reconciler.sql.router import topic_router

    state = load([root]).state
    gc.collect()
    gc.disable()  # as `sbrules test` runs: its collector paused while it reads and routes
    try:
        started = time.perf_counter()
        routers = {state.topics[0].name: topic_router(state.topics[0])}
        built = time.perf_counter() - started
        started = time.perf_counter()
        cases = read_cases(test_files([root]), [])
        read = time.perf_counter() - started
        elapsed = float("inf")
        for _ in range(3):  # the fastest of three: the machine is shared
            started = time.perf_counter()
            results = [run_case(case, state, None, routers) for case in cases]
            elapsed = min(elapsed, time.perf_counter() - started)
    finally:
        gc.enable()
    assert all(r.status == "passed" for r in results)
    return {
        "cases_per_second": round(len(cases) / elapsed), "router_build_seconds": round(built, 3),
        "read_seconds": round(read, 3),
    }


def route_case_by_case(root: Path, sample: list[dict], count: int) -> float:
    """Seconds per case for ``sbrules route --message`` run once per case."""
    started = time.perf_counter()
    for doc in sample[:count]:
        subprocess.run(
            [sys.executable, "-m", "reconciler", "route", str(root / "orders.yaml"), "--message", "-", "--format", "json"],
            input=json.dumps(doc), capture_output=True, text=True, check=True,
        )
    return (time.perf_counter() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--subscriptions", type=int, default=200)
    parser.add_argument("--route-cases", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3, help="end-to-end runs of each kind; the fastest is reported")
    args = parser.parse_args()
    result: dict = {"benchmark": "test", "cases": args.cases}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "main"
        root.mkdir()
        sample = write_suite(root, args.subscriptions, args.cases)
        load = os.getloadavg()[0]
        wall, summary, cpu = best_of(args.runs, root)
        text_wall, _, text_cpu = best_of(args.runs, root, fmt="text")
        covered_wall, _, covered_cpu = best_of(args.runs, root, "--coverage")
        demo = Path(__file__).resolve().parents[1] / "rules"
        mutate_wall, _, _ = end_to_end(demo, "--mutate")
        per_case = wall / args.cases
        route_per_case = route_case_by_case(root, sample, args.route_cases)
        result["end_to_end"] = {
            "rules": args.subscriptions * 10, "wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "text_wall_seconds": round(text_wall, 3), "text_cpu_seconds": round(text_cpu, 3),
            "best_of": args.runs, "load_average": round(load, 2), "target_seconds": 3.0,
            "within_target": wall <= 3.0, "summary": summary,
        }
        result["floor"] = floor(root)
        result["coverage"] = {
            "wall_seconds": round(covered_wall, 3), "cpu_seconds": round(covered_cpu, 3),
            "added_percent": round(100 * (covered_wall / wall - 1), 1),
            "added_cpu_percent": round(100 * (covered_cpu / cpu - 1), 1), "target_added_percent": 30,
        }
        result["mutation_of_the_demo_rules"] = {"wall_seconds": round(mutate_wall, 3), "target_seconds": 30}
        result["route_case_by_case"] = {
            "cases": args.route_cases, "seconds_per_case": round(route_per_case, 4),
            "test_seconds_per_case": round(per_case, 6), "ratio": round(route_per_case / per_case, 1),
        }
        rates = {}
        for rules in (100, 2_000, 20_000):
            sized = Path(tmp) / f"r{rules}"
            sized.mkdir()
            write_suite(sized, rules // 10, min(args.cases, 2_000))
            rates[str(rules)] = in_process_rate(sized)
        result["in_process_by_rules"] = rates
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
