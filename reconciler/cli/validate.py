"""``sbrules validate``: schema, SQL and limit checks with no network (``--traffic``, deprecated: the traffic impact)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from reconciler import diagnostics as diag
from reconciler import progress
from reconciler.cli import output
from reconciler.cli.common import AUTH_ENV, CONNECTION_ENV, Namespace, collector_paused, env_option
from reconciler.cli.impact import render, spark_master_option, traffic_option, traffic_report, write_report
from reconciler.cli.output import ExitCode, echo_json, echo_text
from reconciler.errors import InputError
from reconciler.lint import STATIC_BUDGET_SECONDS, lint
from reconciler.model import DesiredState
from reconciler.rulefiles import LoadResult
from reconciler.rulefiles.environment import RuleSource, load_every_environment, load_rules, locate

if TYPE_CHECKING:
    from reconciler.rulefiles.project import Environment
    from reconciler.traffic.report.model import ImpactReport


DEPRECATED = (
    "validate --traffic is deprecated: use `sbrules plan --traffic` or `sbrules impact PLAN.json --traffic`"
)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "github", "markdown", "html"]),
    default="text",
    show_default=True,
    help="text: located messages with a caret under SQL; json: stable document; github: Actions annotations; "
    "markdown: a pull-request comment; html (with --traffic and --out): a self-contained traffic report.",
)
@traffic_option()
@click.option(
    "--against",
    default="live",
    show_default=True,
    help="With --traffic: compare with the live rules ('live', read with $SERVICEBUS_CONNECTION_STRING or the "
    "--env's namespace) or with the 'before' side of a PLAN.json.",
)
@spark_master_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --traffic: write the traffic report to this file instead of stdout (needed for --format html).",
)
@click.option(
    "--verbose",
    is_flag=True,
    help="List every note; without it (or sbrules -v), the notes of one code are one line with their count. "
    "--format json always lists them all.",
)
@click.option(
    "--static-budget", type=click.FloatRange(min=0), default=STATIC_BUDGET_SECONDS, show_default=True, metavar="SECONDS",
    help="Seconds the static proofs (unsatisfiable, redundant-rule) may take; 0 skips them.",
)
@click.option(
    "--emulator-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Check this Config.json of Microsoft's Service Bus emulator instead of rule files.",
)
@env_option
def validate(
    paths: tuple[Path, ...],
    fmt: str,
    traffic: str | None,
    against: str,
    spark_master: str | None,
    out: Path | None,
    verbose: bool,
    static_budget: float,
    emulator_config: Path | None,
    env: str | None,
) -> None:
    """Check rule files (default: ./rules) offline. Exit 0 valid, 1 invalid, 64 usage error.

    With an sbrules.yaml, every environment is checked, or only the one named with --env.
    --traffic is deprecated: use `sbrules plan --traffic` or `sbrules impact PLAN.json --traffic`.
    """
    if emulator_config is not None:
        if paths or traffic:
            raise click.UsageError("--emulator-config checks that file alone: drop PATH and --traffic")
        _validate_emulator_config(emulator_config, fmt)
        return
    if fmt == "html" and not (traffic and out):
        raise click.UsageError("--format html writes the traffic report: give --traffic DATASET and --out FILE.html")
    if out and not traffic:
        raise click.UsageError("--out writes the traffic report: give --traffic DATASET")
    if traffic:
        click.echo(DEPRECATED, err=True)
    source = locate(paths)
    named: set[Path] = set()
    if source.project is not None and paths and all(Path(p).is_file() for p in paths):
        # Files named inside a project (pre-commit passes the changed ones): a rule file is valid only
        # together with the rest of the project, so the project is validated, and the findings shown
        # are those in the named files.
        named = {Path(p).resolve() for p in paths}
        source = RuleSource((source.project.root,), source.project)
    results: dict[str | None, LoadResult]
    with collector_paused():  # millions of objects (rules, findings) that live until the command ends
        if env is not None:
            results = {env: load_rules(source, env)}
        else:
            results = load_every_environment(source)
            if traffic and source.project is not None:
                raise click.UsageError("--traffic reports on one environment's rules: name it with --env NAME")
        findings = _findings(results, static_budget)
        if named:
            findings = [f for f in findings if f.origin is not None and Path(f.origin.file).resolve() in named]
        shown = findings if verbose or output.VERBOSE else diag.fold_notes(findings)
        tally = diag.counts(findings)
        summary = {
            "files": max(r.files for r in results.values()),
            "topics": sum(len(r.state.topics) for r in results.values()),
            "subscriptions": sum(1 for r in results.values() for _ in r.state.subscriptions()),
            "rules": sum(len(s.rules or ()) for r in results.values() for _, s in r.state.subscriptions()),
        }
        if fmt == "json":
            doc = diag.to_document(shown, summary, counted=findings)
            if source.project is not None:
                doc["environments"] = list(results)
            if not traffic:
                echo_json(doc)
        elif fmt == "github":
            if shown:
                echo_text(diag.render_github(shown))
        elif fmt == "markdown":
            echo_text(diag.render_markdown(shown))
        else:  # text, and html (whose traffic report goes to a file)
            if shown:  # validate's result, valid or not: stdout, as linters print theirs
                echo_text(diag.render_text(shown))
            verdict = "invalid" if tally["error"] else "valid"
            checked = f" (environments: {', '.join(map(str, results))})" if source.project is not None else ""
            click.echo(
                f"{verdict}{checked}: {summary['files']} files, {summary['subscriptions']} subscriptions, "
                f"{summary['rules']} rules; {tally['error']} errors, {tally['warning']} warnings, {tally['info']} notes"
            )
    result = next(iter(results.values()))
    environment = source.project.environment(env) if source.project is not None and env is not None else None
    if fmt == "json" and traffic:
        # Not computed for invalid rule files (null says so); with --out it goes to that file.
        report = text = None
        if not tally["error"]:
            with progress.task():
                report = _traffic_report(result.state, traffic, against, spark_master, environment)
                text = None if out is None else render(report, "json")
        if out is None:
            doc["traffic"] = None if report is None else report.to_json()
        elif text is not None:
            write_report(out, text)
        echo_json(doc)
    if tally["error"]:
        raise SystemExit(ExitCode.ERROR)
    if traffic and fmt != "json":
        with progress.task():
            report = _traffic_report(result.state, traffic, against, spark_master, environment)
            text = render(report, "text" if fmt == "github" else fmt)
        if out is None:
            click.echo(text)
        else:
            write_report(out, text)


def _validate_emulator_config(path: Path, fmt: str) -> None:
    """Microsoft's emulator's Config.json against what that emulator accepts, and as rules."""
    from reconciler.rulefiles.emulator_config import read_config

    state, findings = read_config(path)
    findings = sorted([*findings, *(d for d in lint(state) if d.severity == "error")], key=diag.sort_key)
    tally = diag.counts(findings)
    summary = {
        "files": 1,
        "topics": len(state.topics),
        "subscriptions": sum(1 for _ in state.subscriptions()),
        "rules": sum(len(s.rules or ()) for _, s in state.subscriptions()),
    }
    if fmt == "json":
        echo_json(diag.to_document(findings, summary))
    elif fmt == "github":
        if findings:
            echo_text(diag.render_github(findings))
    elif fmt == "markdown":
        echo_text(diag.render_markdown(findings))
    else:
        if findings:
            echo_text(diag.render_text(findings))
        verdict = "invalid" if tally["error"] else "valid"
        click.echo(
            f"{verdict} (Microsoft's emulator's Config.json): {summary['topics']} topics, {summary['subscriptions']} "
            f"subscriptions, {summary['rules']} rules; {tally['error']} errors, {tally['warning']} warnings"
        )
    if tally["error"]:
        raise SystemExit(ExitCode.ERROR)


def _findings(results: dict[str | None, LoadResult], static_budget: float) -> list[diag.Diagnostic]:
    """Every environment's findings, once each: one that not every environment shares names its environment."""
    if len(results) == 1:
        (result,) = results.values()
        return sorted([*result.diagnostics, *lint(result.state, static_budget=static_budget)], key=diag.sort_key)
    per_env = {
        name: set(result.diagnostics) | set(lint(result.state, static_budget=static_budget)) for name, result in results.items()
    }
    shared = set.intersection(*per_env.values())
    findings = set(shared)
    for name, found in per_env.items():
        for finding in found - shared:
            if name is not None and not finding.message.startswith("environment "):
                finding = replace(finding, message=f"environment {name!r}: {finding.message}")
            findings.add(finding)
    return sorted(sorted(findings, key=lambda d: d.message), key=diag.sort_key)


def _traffic_report(
    state: DesiredState, dataset: str, against: str, spark_master: str | None, environment: "Environment | None"
) -> "ImpactReport":
    """The impact report (Spark), computed only once the rule files are known to be valid: against a
    plan file, or against the namespace of ``environment`` or $SERVICEBUS_CONNECTION_STRING."""
    from reconciler.plan import read_plan_file
    from reconciler.plan.live import plan_declared
    from reconciler.traffic.spark import failures

    if against != "live":
        return traffic_report(
            state, read_plan_file(against), dataset, against=against, spark_master=spark_master, environment=environment
        )
    failures.check_sample(dataset)  # a missing sample is known before any network
    namespace = Namespace(os.environ.get(CONNECTION_ENV), os.environ.get(AUTH_ENV) or "sas")
    namespace = namespace.for_environment(environment)
    if not namespace.connection_string:
        raise InputError(
            f"--against live needs a connection string (${CONNECTION_ENV} or --env NAME); "
            "or compare with a plan file: --against PLAN.json"
        )
    with namespace.clients.amqp() as client:
        plan, new = plan_declared(client, state)
    return traffic_report(state, plan, dataset, against="live", spark_master=spark_master, new=new, environment=environment)
