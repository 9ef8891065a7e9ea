"""``sbrules demo``: the whole GitOps loop against a local in-process emulator, narrated for a person.

The routing tests beside the rule files run first, offline. The emulator is seeded with a namespace
that has drifted from the rule files (``drift``); then plan, the traffic impact report
(``traffic``), apply and drift run exactly as the CLI runs them, through the same public APIs.
"""

from __future__ import annotations

import contextlib
import re
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator

from reconciler.apply import ApplyOptions, apply_plan, render_report
from reconciler.demo.drift import Drift, drifted_namespace
from reconciler.model import DesiredState
from reconciler.observe import observe
from reconciler.plan import Plan, compute_plan, render_drift_text, render_text
from reconciler.rulefiles import load_paths


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
    from reconciler.namespace.clients import Clients

    with demo_rules() if rules_dir is None else contextlib.nullcontext(rules_dir) as rules_dir:
        if desired is None:
            desired = load_paths([rules_dir])
        tests_ok = _routing_tests(rules_dir, desired, echo)
    live, drifts = drifted_namespace(desired)
    with Emulator(live) as emulator:
        echo(f"Started a local Service Bus emulator (AMQP on {_endpoint(emulator.connection_string)}).")
        echo(f"Its namespace was seeded to drift from the rule files in {rules_dir}:")
        for drift in drifts:
            echo(f"  • {drift.where}: {drift.what}")
        with Clients(emulator.connection_string) as clients, clients.amqp() as client:
            echo("\n━━ 1. sbrules plan — read every declared subscription, diff against the files ━━\n")
            plan = compute_plan(desired, observe(client, desired))
            echo(render_text(plan))
            cosmetic_ok = all(_check_cosmetic(plan, drift, echo) for drift in drifts if drift.cosmetic_rule)
            if traffic:
                _traffic(emulator, client, desired, live, echo)
            echo("\n━━ 3. sbrules apply --auto-approve — creations, then replacements, then deletions ━━\n")
            for warning in plan.warnings:
                echo(f"warning: {warning}")
            report = apply_plan(client, plan, ApplyOptions())
            echo(render_report(report))
            echo("\n━━ 4. sbrules drift — what a nightly job runs; exit 0 means in sync ━━\n")
            after = compute_plan(desired, observe(client, desired))
            echo(render_drift_text(after))
    in_sync = tests_ok and cosmetic_ok and report.ok and not after.has_changes
    echo(
        "\nThe loop is closed: plan showed the differences, apply converged, drift is clean."
        if in_sync
        else "\nThe namespace did not converge; see above."
    )
    return in_sync


def _routing_tests(rules_dir: Path, desired: DesiredState, echo: Callable[[str], None]) -> bool:
    """Step 0: the routing tests beside the rule files (``sbrules test``), offline; True when they pass."""
    from reconciler.ruletests import report
    from reconciler.ruletests.cases import read_cases, test_files
    from reconciler.ruletests.run import run_cases

    files = test_files([rules_dir])
    if not files:
        return True
    echo("━━ 0. sbrules test — the routing promises written beside the rules, checked offline ━━\n")
    diags: list = []
    results = run_cases(read_cases(files, diags), desired)
    echo(report.render_text(results, diags))
    return report.succeeded(results, diags)


def _traffic(emulator, client, desired: DesiredState, live: DesiredState, echo: Callable[[str], None]) -> None:
    """Step 2: what the plan would do to real messages (Spark), when Spark can run here."""
    from reconciler.demo.traffic import run_traffic_step, spark_available

    echo("\n━━ 2. sbrules sample + validate --traffic — who gains or loses which messages ━━\n")
    reason = spark_available()
    if reason:
        echo(f"Skipped: {reason}.")
        return
    run_traffic_step(emulator, client, desired, live, echo)


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
