"""Benchmark: `sbrules validate` over 200 generated rule files with 20 rules each (target < 2 s wall).

Prints one JSON object. Run: python benchmarks/validate.py [--files 200] [--rules 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SQL_SHAPES = [
    "amount > {i} AND currency = 'EUR'",
    "sys.Label IN ('order.placed', 'order.paid', 'x{i}') AND region LIKE 'eu-%'",
    "NOT EXISTS(test) AND (priority >= {i} OR sys.CorrelationId = 'c{i}')",
    "quantity * price > {i}.5 AND status <> 'cancelled' AND customer IS NOT NULL",
]


def generate(root: Path, files: int, rules: int) -> None:
    for f in range(files):
        lines = [f"topic: topic-{f % 20}", "subscriptions:", f"  sub-{f}:", "    rules:"]
        for r in range(rules):
            i = f * rules + r
            if r % 4 == 3:
                lines += [
                    f"      - name: corr-{r}",
                    f"        correlation: {{subject: s{i}, properties: {{tier: {{int: {r}}}, region: eu}}}}",
                ]
            else:
                lines += [f"      - name: rule-{r}", f"        sql: \"{SQL_SHAPES[r % 3].format(i=i)}\""]
                if r % 5 == 0:
                    lines.append(f"        action: \"SET sys.Label = 'l{i}'; SET routed = TRUE\"")
        lines.append("      - {name: $Default, filter: true}")
        (root / f"rules-{f:03d}.yaml").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rules", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, args.files, args.rules)
        command = [sys.executable, "-m", "reconciler", "validate", str(root), "--format", "json"]
        walls = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            report = json.loads(done.stdout)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import reconciler.cli"], check=True)
        import_wall = time.perf_counter() - start
    print(
        json.dumps(
            {
                "benchmark": "validate",
                "files": args.files,
                "rules": report["summary"]["rules"],
                "exit_code": done.returncode,
                "errors": report["summary"]["errors"],
                "wall_seconds_median": round(statistics.median(walls), 3),
                "wall_seconds_all": [round(w, 3) for w in walls],
                "python_startup_and_cli_import_seconds": round(import_wall, 3),
                "target_seconds": 2.0,
                "meets_target": statistics.median(walls) < 2.0,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
