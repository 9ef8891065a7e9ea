"""Concurrent `sbrules apply` runs on the same subscriptions, against the emulator; prints JSON.

The scenario of issue 30: ``--subs`` subscriptions (default 40), each with ``$Default`` and an old
version of a rule; ``--runs`` applies (default 3) of conflicting rule files start at once, paced at
``--max-rate`` requests per second each. A watcher inside the emulator records, at every change
and under its lock, the fewest rules that deliver (lock rules do not) each subscription had.

The attacks on the lock's lease, as options: ``--skew S`` runs the last apply with its wall clock
S seconds off (its SAS tokens excepted: the service judges those by its own clock); ``--stall S``
suspends the first apply (SIGSTOP) for S seconds once it has written a rule, then resumes it
(SIGCONT), with every run on a ``--lock-lease`` of 4 s unless given.

Reported: each run's exit code, seconds and requests; the lock's share of the requests; locks taken
over and subscriptions reported LOCK LOST; how many subscriptions were ever left without a
delivering rule (a false filter delivers nothing; must be 0), how many end in a state no run
declared although every run reported them applied (must be 0), and how many reports disagree
with the run's journal (must be 0).

    python benchmarks/concurrent_apply.py [--subs 40] [--runs 3] [--max-rate 20] [--skew 150] [--stall 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reconciler.emulator import Emulator
from reconciler.model import CorrelationFilter, DesiredState, FalseFilter, Rule, SqlFilter, Subscription, Topic, TrueFilter

TOPIC = "orders"
ROOT = Path(__file__).resolve().parents[1]
#: sbrules with its wall clock off by argv[1] seconds (but for its SAS tokens).
SKEWED = ("import sys, time; import reconciler.namespace.credentials; skew = float(sys.argv.pop(1)); "
          "wall = time.time; time.time = lambda: wall() + skew; from reconciler.cli import main; main(sys.argv[1:])")


def delivering(rules: list[Rule]) -> int:
    """Rules that can deliver a message: any but a false filter."""
    return sum(not isinstance(r.filter, FalseFilter)
               and not (isinstance(r.filter, SqlFilter) and r.filter.expression.replace(" ", "") == "1=0") for r in rules)


def wrote(entries: list[dict], sub: str) -> bool:
    return any(e.get("subscription") == sub and e.get("op") in ("add-rule", "remove-rule") and e.get("outcome") == "ok"
               and not str(e.get("step", "")).startswith("lock:") for e in entries)


def journal_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


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
    parser.add_argument("--skew", type=float, default=0.0, help="the last run's wall clock is off by this many seconds")
    parser.add_argument("--stall", type=float, default=0.0, help="SIGSTOP the first run this long after its first write")
    parser.add_argument("--lock-lease", type=float, default=None)
    args = parser.parse_args()
    lease = args.lock_lease or (4.0 if args.stall else None)
    subs = [f"s{i:02d}" for i in range(args.subs)]
    old = (Rule("$Default", TrueFilter()), Rule("r", CorrelationFilter(subject="old")))
    initial = DesiredState((Topic(TOPIC, tuple(Subscription(s, old) for s in subs)),))
    with tempfile.TemporaryDirectory() as tmp, Emulator(initial) as emu:
        ns = emu.namespace
        fewest = dict.fromkeys(subs, 2)

        def watch() -> None:
            for s in subs:
                fewest[s] = min(fewest[s], delivering(ns.rules(TOPIC, s)))

        ns.on_change(watch)
        env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": emu.connection_string, "PYTHONPATH": str(ROOT)}
        if lease:
            env["SBRULES_LOCK_LEASE"] = str(lease)
        runs = []
        for k in range(args.runs):
            folder = Path(tmp) / f"run{k}"
            _write(folder, _declared(k, subs))
            journal = Path(tmp) / f"journal{k}.jsonl"
            skewed = args.skew and k == args.runs - 1
            start = [sys.executable, "-c", SKEWED, str(args.skew)] if skewed else [sys.executable, "-m", "reconciler"]
            command = [*start, "apply", str(folder), "--auto-approve", "--max-rate", str(args.max_rate),
                       "--journal", str(journal)]
            runs.append((time.monotonic(), journal, subprocess.Popen(command, env=env, cwd=ROOT, text=True,
                                                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
            if args.stall and k == 0:
                first = runs[0][2]
                while first.poll() is None and not any(wrote(journal_of(journal), s) for s in subs):
                    time.sleep(0.02)  # polling the journal the run appends to
                first.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
        if args.stall:
            time.sleep(max(0.0, args.stall - (time.monotonic() - stopped)))  # the benchmark's own stall length
            runs[0][2].send_signal(signal.SIGCONT)
        results = []
        outputs = []
        for started, journal, proc in runs:
            out, _ = proc.communicate()
            outputs.append(out)
            seconds = time.monotonic() - started
            entries = journal_of(journal)
            attempts = [e for e in entries if "attempt" in e]
            lock = [e for e in attempts if str(e.get("step", "")).startswith("lock:")]
            lines = {s: next((x for x in out.splitlines() if x.startswith(f"{TOPIC}/{s}:")), "") for s in subs}
            results.append({
                "exit_code": proc.returncode,
                "seconds": round(seconds, 2),
                "requests": len(attempts),
                "lock_requests": len(lock),
                "lock_waits": sum(e["step"] == "lock:read" for e in lock) - args.subs,
                "locks_taken_over": sum(e["step"] == "lock:clear" and e.get("outcome") == "ok" for e in lock),
                "lock_lost": sum(e.get("outcome") == "lock-lost" for e in entries),
                "lock_problems": sum(e.get("outcome") == "lock-problem" for e in entries),
                "replanned": sum(e.get("outcome") == "replanned" for e in entries),
                "already_applied": sum(e.get("outcome") == "already-applied" for e in entries),
                "reports_disagreeing_with_journal": sum(
                    (": applied" in lines[s] and not wrote(entries, s))
                    or (("already in the planned state" in lines[s] or "nothing was changed" in lines[s]) and wrote(entries, s))
                    for s in subs),
            })
        declared = [_declared(k, subs) for k in range(args.runs)]
        settled = [s for s in subs if all("LOCK LOST" not in out and "FAILED" not in out
                                          for out in (next((x for x in o.splitlines() if x.startswith(f"{TOPIC}/{s}:")), "")
                                                      for o in outputs))]
        undeclared_end = sum(
            {r.name: getattr(r.filter, "subject", None) for r in ns.rules(TOPIC, s)} not in [d[s] for d in declared]
            for s in settled
        )
    print(json.dumps({
        "benchmark": "concurrent_apply",
        "subscriptions": args.subs,
        "runs": args.runs,
        "max_rate": args.max_rate,
        "skew_seconds": args.skew,
        "stall_seconds": args.stall,
        "lock_lease": lease,
        "per_run": results,
        "ever_without_a_delivering_rule": sum(n < 1 for n in fewest.values()),
        "ending_in_no_declared_state": undeclared_end,
        "reported_lock_lost_or_failed": len(subs) - len(settled),
    }, indent=2))


if __name__ == "__main__":
    main()
