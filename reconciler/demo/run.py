"""``sbrules demo``: the whole GitOps loop against a local in-process emulator, narrated for a person.

The routing tests beside the rule files run first, offline. The emulator is seeded with a namespace
that has drifted from the rule files (``drift``); then plan, the traffic impact report
(``traffic``), apply and drift run as the CLI runs them: the same operations
(:mod:`reconciler.app.operations`) over one target.
"""

from __future__ import annotations

import contextlib
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from reconciler.app import operations
from reconciler.app.target import Target
from reconciler.apply import ApplyOptions, render_report
from reconciler.demo.drift import Drift, drifted_namespace
from reconciler.model import DesiredState
from reconciler.plan import Plan, render_drift_text, render_text
from reconciler.rulefiles import load_paths

if TYPE_CHECKING:
    from reconciler.emulator import Emulator


@contextlib.contextmanager
def demo_rules() -> Iterator[Path]:
    """The demo's rule files as a directory: the package's copy of the repository's ``rules/``."""
    with resources.as_file(resources.files("reconciler.demo").joinpath("rules")) as path:
        yield path


def run_demo(
    rules_dir: Path | None, echo: Callable[[str], None], traffic: bool = True, desired: DesiredState | None = None
) -> bool:
    """Seed an emulator, then plan → (traffic impact) → apply → drift; True when it ends in sync.

    ``desired`` is the rules already loaded from ``rules_dir`` (an environment's rendering of them).
    """
    from reconciler.emulator import Emulator

    with demo_rules() if rules_dir is None else contextlib.nullcontext(rules_dir) as rules_dir:
        rules = operations.Rules(load_paths([rules_dir]) if desired is None else desired, None)
        tests_ok = _routing_tests(rules_dir, rules, echo)
    live, drifts = drifted_namespace(rules.state)
    with Emulator(live) as emulator, Target.connect(emulator.connection_string) as target:
        echo(f"Started a local Service Bus emulator (AMQP on {_endpoint(emulator.connection_string)}).")
        echo(f"Its namespace was seeded to drift from the rule files in {rules_dir}:")
        for drift in drifts:
            echo(f"  • {drift.where}: {drift.what}")
        echo("\n━━ 1. sbrules plan — read every declared subscription, diff against the files ━━\n")
        plan = operations.plan(target, rules, bystanders=traffic)
        echo(render_text(plan))
        cosmetic_ok = all(_check_cosmetic(plan, drift, echo) for drift in drifts if drift.cosmetic_rule)
        if traffic:
            _traffic(emulator, target, rules, plan, live, echo)
        echo("\n━━ 3. sbrules apply --auto-approve — creations, then replacements, then deletions ━━\n")
        for warning in plan.warnings:
            echo(f"warning: {warning}")
        report = operations.apply(target, plan, ApplyOptions(), rules)
        echo(render_report(report))
        echo("\n━━ 4. sbrules drift — what a nightly job runs; exit 0 means in sync ━━\n")
        after = operations.drift(target, rules)
        echo(render_drift_text(after))
    in_sync = tests_ok and cosmetic_ok and report.ok and not after.has_changes
    echo(
        "\nThe loop is closed: plan showed the differences, apply converged, drift is clean."
        if in_sync
        else "\nThe namespace did not converge; see above."
    )
    return in_sync


def _routing_tests(rules_dir: Path, rules: operations.Rules, echo: Callable[[str], None]) -> bool:
    """Step 0: the routing tests beside the rule files (``sbrules test``), offline; True when they pass."""
    from reconciler.ruletests import report
    from reconciler.ruletests.cases import test_files

    if not test_files([rules_dir]):
        return True
    echo("━━ 0. sbrules test — the routing promises written beside the rules, checked offline ━━\n")
    run = operations.run_tests((), rules, rule_paths=(rules_dir,))
    echo(report.render_text(run.results, run.findings))
    return report.succeeded(run.results, run.findings)


def _traffic(
    emulator: Emulator, target: Target, rules: operations.Rules, plan: Plan, live: DesiredState,
    echo: Callable[[str], None],
) -> None:
    """Step 2: what the plan would do to real messages (Spark), when Spark can run here."""
    from reconciler.demo.traffic import run_traffic_step, spark_available

    echo("\n━━ 2. sbrules sample + plan --traffic — who gains or loses which messages ━━\n")
    reason = spark_available()
    if reason:
        echo(f"Skipped: {reason}.")
        return
    run_traffic_step(emulator, target, rules, plan, live, echo)


def _check_cosmetic(plan: Plan, drift: Drift, echo: Callable[[str], None]) -> bool:
    """Say whether the plan rightly left a cosmetically different rule alone."""
    listed = any(f"{c.topic}/{c.subscription}" == drift.where and c.rule == drift.cosmetic_rule for c in plan.changes)
    verdict = "LISTS it: that is a bug" if listed else "rightly leaves it alone"
    echo(
        f"\n{drift.where} rule {drift.cosmetic_rule!r}: the live SQL differs only in spacing and keyword "
        f"case, so the plan {verdict}."
    )
    return not listed


def _endpoint(connection_string: str) -> str:
    """Only the host:port of a connection string (never its key)."""
    match = re.search(r"Endpoint=sb://([^/;]+)", connection_string, re.IGNORECASE)
    return match.group(1) if match else "localhost"
