"""Benchmark: `sbrules validate` over 200 generated rule files with 20 rules each (target < 2 s wall).

With ``--static``, the static proofs instead (reconciler.sql.static, issue 32's target: at most 5 s
added to validate of 2,000 subscriptions × 50 rules): validate end to end on such a tree, and the
time the static checks take within it, measured in process subscription by subscription, as lint
runs them (each subscription's filters parsed first, as validate's own checks do, and with the
cyclic collector paused and the loaded rules frozen, as validate runs). The tree is
measured as the generator writes it (every subscription also keeps ``$Default``) and without
``$Default`` (no true filter settles the redundancy questions).

Prints one JSON object. Run: python benchmarks/validate.py [--files 200] [--rules 20] [--repeat 3]
                             python benchmarks/validate.py --static [--files 2000] [--rules 49]
"""

from __future__ import annotations

import argparse
import gc
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


def generate(root: Path, files: int, rules: int, topics: int = 20, default: bool = True) -> None:
    for f in range(files):
        lines = [f"topic: topic-{f % topics}", "subscriptions:", f"  sub-{f}:", "    rules:"]
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
        if default:
            lines.append("      - {name: $Default, filter: true}")
        (root / f"rules-{f:03d}.yaml").write_text("\n".join(lines) + "\n")


def static_checks(root: Path) -> dict:
    """validate end to end, and the static proofs' share of it, on the tree under ``root``."""
    from reconciler.rulefiles.loader import load
    from reconciler.sql import SqlError, parse_filter
    from reconciler.sql.static import analyse_rules

    command = [sys.executable, "-m", "reconciler", "validate", str(root), "--format", "json"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    report = json.loads(done.stdout)
    state = load([root]).state
    gc.freeze()  # as validate runs the proofs: its collector paused, the loaded rules frozen
    gc.disable()
    static, findings, subscriptions = 0.0, 0, 0
    for _, sub in state.subscriptions():
        for rule in sub.rules or ():
            try:
                parse_filter(rule.filter.expression) if hasattr(rule.filter, "expression") else None
            except SqlError:
                pass
        start = time.perf_counter()
        findings += len(analyse_rules(sub.rules or ()))
        static += time.perf_counter() - start
        subscriptions += 1
    gc.enable()
    gc.unfreeze()
    return {
        "subscriptions": subscriptions,
        "rules": report["summary"]["rules"],
        "validate_wall_seconds": round(wall, 2),
        "static_checks_seconds": round(static, 2),
        "static_findings": findings,
        "target_seconds": 5.0,
        "meets_target": static <= 5.0,
    }


def static_benchmark(files: int, rules: int) -> None:
    out = {"benchmark": "validate-static", "files": files, "rules_per_subscription": rules}
    for name, default in (("with_default", True), ("without_default", False)):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            generate(root, files, rules, topics=max(files // 10, 1), default=default)
            out[name] = static_checks(root)
    print(json.dumps(out, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=None)
    parser.add_argument("--rules", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--static", action="store_true", help="the static proofs at 2,000 subscriptions × 50 rules")
    args = parser.parse_args()
    if args.static:
        static_benchmark(args.files or 2000, args.rules or 49)
        return
    args.files, args.rules = args.files or 200, args.rules or 20
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
