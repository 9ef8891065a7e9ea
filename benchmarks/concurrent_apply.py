"""Concurrent `sbrules apply` runs on the same subscriptions, against the emulator; prints JSON.

The scenario of issue 30: ``--subs`` subscriptions (default 40), each with ``$Default`` and an old
version of a rule; ``--runs`` applies (default 3) of conflicting rule files start at once, paced at
``--max-rate`` requests per second each. A watcher inside the emulator records, at every change
and under its lock, the fewest rules that deliver (lock rules do not) each subscription had.

Reported: each run's exit code, seconds and requests; the lock's share of the requests; how many
subscriptions were ever left without a delivering rule (must be 0) and how many end in a state
no run declared (must be 0).

    python benchmarks/concurrent_apply.py [--subs 40] [--runs 3] [--max-rate 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reconciler.emulator import Emulator
from reconciler.limits import is_lock_rule_name
from reconciler.model import CorrelationFilter, DesiredState, Rule, Subscription, Topic, TrueFilter

TOPIC = "orders"
ROOT = Path(__file__).resolve().parents[1]


def _declared(run: int, subs: list[str]) -> dict[str, dict[str, str]]:
    return {s: {"r": f"run{run}", f"own{run}": f"O{run}"} for s in subs}


def _write(folder: Path, declared: dict[str, dict[str, str]]) -> None:
    folder.mkdir(parents=True)
    lines = [f"topic: {TOPIC}", "subscriptions:"]
    for sub, rules in declared.items():
        lines += [f"  {sub}:", "    rules:"]
        lines += [f"      - name: {n}\n        correlation: {{subject: {v}}}" for n, v in rules.items()]
    (folder / f"{TOPIC}.yaml").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subs", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-rate", type=float, default=20)
    args = parser.parse_args()
    subs = [f"s{i:02d}" for i in range(args.subs)]
    old = (Rule("$Default", TrueFilter()), Rule("r", CorrelationFilter(subject="old")))
    initial = DesiredState((Topic(TOPIC, tuple(Subscription(s, old) for s in subs)),))
    with tempfile.TemporaryDirectory() as tmp, Emulator(initial) as emu:
        ns = emu.namespace
        fewest = dict.fromkeys(subs, 2)

        def watch() -> None:
            for s in subs:
                fewest[s] = min(fewest[s], sum(not is_lock_rule_name(r.name) for r in ns.rules(TOPIC, s)))

        ns.on_change(watch)
        env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": emu.connection_string, "PYTHONPATH": str(ROOT)}
        runs = []
        for k in range(args.runs):
            folder = Path(tmp) / f"run{k}"
            _write(folder, _declared(k, subs))
            journal = Path(tmp) / f"journal{k}.jsonl"
            command = [sys.executable, "-m", "reconciler", "apply", str(folder), "--auto-approve",
                       "--max-rate", str(args.max_rate), "--journal", str(journal)]
            runs.append((time.monotonic(), journal, subprocess.Popen(command, env=env, cwd=ROOT, text=True,
                                                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
        results = []
        for started, journal, proc in runs:
            proc.communicate()
            seconds = time.monotonic() - started
            entries = [json.loads(line) for line in journal.read_text().splitlines()]
            attempts = [e for e in entries if "attempt" in e]
            lock = [e for e in attempts if str(e.get("step", "")).startswith("lock:")]
            results.append({
                "exit_code": proc.returncode,
                "seconds": round(seconds, 2),
                "requests": len(attempts),
                "lock_requests": len(lock),
                "lock_waits": sum(e["step"] == "lock:read" for e in lock) - args.subs,
                "replanned": sum(e.get("outcome") == "replanned" for e in entries),
                "already_applied": sum(e.get("outcome") == "already-applied" for e in entries),
            })
        declared = [_declared(k, subs) for k in range(args.runs)]
        undeclared_end = sum(
            {r.name: r.filter.subject for r in ns.rules(TOPIC, s)} not in [d[s] for d in declared] for s in subs
        )
    print(json.dumps({
        "benchmark": "concurrent_apply",
        "subscriptions": args.subs,
        "runs": args.runs,
        "max_rate": args.max_rate,
        "per_run": results,
        "ever_without_a_delivering_rule": sum(n < 1 for n in fewest.values()),
        "ending_in_no_declared_state": undeclared_end,
    }, indent=2))


if __name__ == "__main__":
    main()
