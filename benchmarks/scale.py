"""Benchmark: validate, plan and drift at 10,000 and 100,000 rules, next to PyYAML's C loader; prints JSON.

The rules: 200 or 2,000 subscriptions × 50 rules over 10 topics (10 rule files per topic at 100,000
rules, 1 at 10,000; 20 subscriptions per file), each subscription with 10 SQL filters (one with
an action) and 40 correlation filters, half of them with a typed property (``{int: n}``, an info
note each); every other subscription declares no ``$Default`` (another note). Each topic stays
within the service's 2,000 SQL filters.

Each command runs as ``python -m reconciler`` in a child process, as a user runs it; its wall and CPU time
and peak RSS (``ru_maxrss`` from ``wait4``) are reported. ``plan`` and ``drift`` run against
``sbrules emulator`` in its own process, seeded with the same files, so they find no changes.
``validate`` runs twice: as a user runs it (with the static proofs, bounded by ``--static-budget``)
and with ``--static-budget 0`` (the checks every other command needs too). The baseline is PyYAML's
C loader (``yaml.load(..., CSafeLoader)``) reading the same files, in a child process too, in the
same run. Times are the best of ``--repeat`` runs (each clock on its own),
peak RSS the largest.

    python benchmarks/scale.py [--rules 10000 100000] [--repeat 2] [--skip-network]
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
from typing import Iterator

TOPICS = 10
RULES_PER_SUBSCRIPTION = 50
SQL_PER_SUBSCRIPTION = 10
SUBSCRIPTIONS_PER_FILE = 20
SQL_SHAPES = (
    "amount > {i} AND currency = 'EUR'",
    "sys.Label IN ('order.placed', 'order.paid', 'x{i}') AND region LIKE 'eu-%'",
    "NOT EXISTS(test) AND (priority >= {i} OR sys.CorrelationId = 'c{i}')",
    "quantity * price > {i}.5 AND status <> 'cancelled' AND customer IS NOT NULL",
)

#: Wall time, and the CPU time of the command's process alone: on a shared machine the wall time
#: also counts the waits for a core, and the ratios are given by both.
CLOCKS = ("seconds", "cpu_seconds")

YAML_LOAD = """
import sys, yaml
for name in sys.argv[1:]:
    with open(name, encoding="utf-8") as f:
        yaml.load(f, Loader=yaml.CSafeLoader)
"""


def subscription_lines(s: int) -> list[str]:
    """One subscription's YAML: 10 SQL rules, 40 correlation rules, and $Default on every other one."""
    lines = [f"  sub-{s:04d}:", "    rules:"]
    for r in range(RULES_PER_SUBSCRIPTION - (s % 2)):
        i = s * RULES_PER_SUBSCRIPTION + r
        if r < SQL_PER_SUBSCRIPTION - (s % 2):
            lines += [f"      - name: sql-{r:02d}", f'        sql: "{SQL_SHAPES[r % len(SQL_SHAPES)].format(i=i)}"']
            if r == 0:
                lines.append(f"        action: \"SET sys.Label = 'l{i}'; SET routed = TRUE\"")
        elif r % 2:
            lines += [
                f"      - name: corr-{r:02d}",
                f"        correlation: {{subject: s{i}, properties: {{tier: {{int: {r}}}, region: eu}}}}",
            ]
        else:
            lines += [
                f"      - name: corr-{r:02d}",
                "        correlation:",
                f"          correlation_id: c{i}",
                "          properties:",
                f"            region: eu-{r}",
            ]
    if s % 2:
        lines.append("      - {name: $Default, filter: true}")
    return lines


def generate(root: Path, rules: int) -> list[Path]:
    """Rule files declaring ``rules`` rules (a multiple of 500); returns them."""
    subscriptions = rules // RULES_PER_SUBSCRIPTION
    per_topic = subscriptions // TOPICS
    files = []
    for t in range(TOPICS):
        for first in range(0, per_topic, SUBSCRIPTIONS_PER_FILE):
            lines = [f"topic: topic-{t:02d}", "subscriptions:"]
            for s in range(t * per_topic + first, t * per_topic + min(first + SUBSCRIPTIONS_PER_FILE, per_topic)):
                lines += subscription_lines(s)
            file = root / f"topic-{t:02d}" / f"subs-{first:04d}.yaml"
            file.parent.mkdir(exist_ok=True)
            file.write_text("\n".join(lines) + "\n", encoding="utf-8")
            files.append(file)
    return files


@dataclass(frozen=True)
class Run:
    """One child process run to its end."""

    wall: float
    cpu: float
    peak_rss_mb: float
    exit_code: int
    stdout: str


def run_child(command: list[str], env: dict[str, str] | None = None) -> Run:
    """Run ``command``; its wall and CPU seconds and peak RSS come from ``wait4`` on it alone."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode, out.read())


@contextlib.contextmanager
def emulator(rules: Path) -> Iterator[str]:
    """``sbrules emulator`` in a child process seeded with ``rules``; yields its connection string."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "emulator", "--port", "0", "--rules", str(rules)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        connection_string = proc.stdout.readline().strip()
        if not connection_string:
            raise RuntimeError("the emulator did not start")
        yield connection_string
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def measure(root: Path, files: list[Path], repeat: int, network: bool) -> dict:
    """Every command over the rules in ``root``, best of ``repeat``, interleaved within a round."""
    sbrules = [sys.executable, "-m", "reconciler"]
    commands = {
        "yaml_load": [sys.executable, "-c", YAML_LOAD, *map(str, files)],
        "validate": [*sbrules, "validate", str(root)],
        # The offline checks alone: the static proofs (bounded by --static-budget) measured apart.
        "validate_without_proofs": [*sbrules, "validate", str(root), "--static-budget", "0"],
    }
    env = None
    with contextlib.ExitStack() as stack:
        if network:
            env = dict(os.environ, SERVICEBUS_CONNECTION_STRING=stack.enter_context(emulator(root)))
            commands["plan"] = [*sbrules, "plan", str(root)]
            commands["drift"] = [*sbrules, "drift", str(root)]
        runs: dict[str, list[Run]] = {name: [] for name in commands}
        for _ in range(repeat):
            for name, command in commands.items():
                runs[name].append(run_child(command, env))
    out = {}
    for name, tries in runs.items():
        for run in tries:
            if run.exit_code != 0:
                raise RuntimeError(f"{name} exited {run.exit_code}: {run.stdout[-500:]}")
        out[name] = {  # each the best of its own: a burst of load elsewhere inflates one run's wall, or CPU
            "seconds": round(min(r.wall for r in tries), 2),
            "cpu_seconds": round(min(r.cpu for r in tries), 2),
            "peak_rss_mb": round(max(r.peak_rss_mb for r in tries)),
        }
    out["validate"]["output_lines"] = max(len(r.stdout.splitlines()) for r in runs["validate"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip-network", action="store_true", help="Measure the YAML load and validate only.")
    args = parser.parse_args()
    load = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for count in args.rules:
            root = Path(tmp, f"rules-{count}")
            root.mkdir()
            files = generate(root, count)
            results[count] = {"files": len(files), **measure(root, files, args.repeat, not args.skip_network)}
    report: dict = {
        "benchmark": "scale",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load],
        "runs": {str(count): result for count, result in results.items()},
    }
    largest = results[max(results)]
    for name in ("validate", "validate_without_proofs"):
        report[f"{name}_vs_yaml_load"] = {
            clock: round(largest[name][clock] / largest["yaml_load"][clock], 2) for clock in CLOCKS
        }
    report["targets"] = {"validate_vs_yaml_load": 1.5, "scaling_10x": 10.5, "plan_peak_rss_mb": 400}
    if len(results) > 1:
        small, large = min(results), max(results)
        report["scaling"] = {
            f"{name}_{large}_vs_{small}": {
                clock: round(results[large][name][clock] / results[small][name][clock], 2) for clock in CLOCKS
            }
            for name in results[large]
            if name != "files"
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
