"""``sbrules validate``: schema, SQL and limit checks with no network."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler import diagnostics as diag
from reconciler.app import operations
from reconciler.cli import output
from reconciler.cli.common import collector_paused, env_option
from reconciler.cli.output import ExitCode, echo_json, echo_text
from reconciler.lint import STATIC_BUDGET_SECONDS, lint

REMOVED = (
    "validate is offline and no longer reports traffic: use `sbrules plan --traffic DATASET` (the plan just read "
    "from the namespace) or `sbrules impact PLAN.json --traffic DATASET` (a saved plan, offline)"
)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "github", "markdown"]),
    default="text",
    show_default=True,
    help="text: located messages with a caret under SQL; json: stable document; github: Actions annotations; "
    "markdown: a pull-request comment.",
)
@click.option("--traffic", hidden=True, help="Removed: see `sbrules plan --traffic` and `sbrules impact`.")
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
    verbose: bool,
    static_budget: float,
    emulator_config: Path | None,
    env: str | None,
) -> None:
    """Check rule files (default: ./rules) offline. Exit 0 valid, 1 invalid, 64 usage error.

    With an sbrules.yaml, every environment is checked, or only the one named with --env.
    """
    if traffic is not None:
        raise click.UsageError(REMOVED)
    if emulator_config is not None:
        if paths:
            raise click.UsageError("--emulator-config checks that file alone: drop PATH")
        _validate_emulator_config(emulator_config, fmt)
        return
    with collector_paused():  # millions of objects (rules, findings) that live until the command ends
        checked = operations.validate(paths, env, static_budget=static_budget)
        findings = checked.findings
        shown = findings if verbose or output.VERBOSE else diag.fold_notes(findings)
        tally = diag.counts(findings)
        summary = checked.summary
        if fmt == "json":
            doc = diag.to_document(shown, summary, counted=findings)
            if checked.project:
                doc["environments"] = list(checked.results)
            echo_json(doc)
        elif fmt == "github":
            if shown:
                echo_text(diag.render_github(shown))
        elif fmt == "markdown":
            echo_text(diag.render_markdown(shown))
        else:
            if shown:  # validate's result, valid or not: stdout, as linters print theirs
                echo_text(diag.render_text(shown))
            verdict = "invalid" if tally["error"] else "valid"
            checked_envs = f" (environments: {', '.join(map(str, checked.results))})" if checked.project else ""
            click.echo(
                f"{verdict}{checked_envs}: {summary['files']} files, {summary['subscriptions']} subscriptions, "
                f"{summary['rules']} rules; {tally['error']} errors, {tally['warning']} warnings, {tally['info']} notes"
            )
    if tally["error"]:
        raise SystemExit(ExitCode.ERROR)


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
