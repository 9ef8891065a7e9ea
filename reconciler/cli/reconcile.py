"""``sbrules plan | apply | drift | export | demo``: the GitOps loop (thin: options, output, exit codes)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path

import click

from reconciler import progress
from reconciler.app import operations
from reconciler.app.target import Target, TargetOptions
from reconciler.apply import ApplyOptions, ApplyReport, ReplaceStrategy, render_report, report_to_json
from reconciler.cli.common import (
    collector_paused,
    env_option,
    format_option,
    namespace_options,
    no_discovery_option,
    open_target,
    progress_bars,
)
from reconciler.cli.impact import spark_master_option, tell, traffic_option
from reconciler.cli.output import ExitCode, echo_json, echo_text, write_output
from reconciler.errors import SbrulesError
from reconciler.lock import DEFAULT_TIMEOUT_SECONDS, LEASE_SECONDS, Holder
from reconciler.plan import RENDERERS, Plan, read_plan_file, render_drift_json, render_drift_text, render_json

strict_option = click.option(
    "--strict", is_flag=True,
    help="Count subscriptions of declared topics that no rule file mentions (undeclared) as drift.",
)


since_option = click.option(
    "--since", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="PLAN|JOURNAL",
    help="The saved plan or apply journal of the previous apply: declared rules re-created after it are reported contested.",
)


paths_argument = click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))


@click.command()
@paths_argument
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also save the plan as JSON (for apply).")
@format_option("text", "json", "markdown")
@click.option("--detailed-exitcode", is_flag=True, help="Exit 2 when there are changes (0 none, 1 error).")
@strict_option
@since_option
@env_option
@namespace_options
@no_discovery_option
@traffic_option()
@spark_master_option
def plan(
    paths: tuple[Path, ...], out: Path | None, fmt: str, detailed_exitcode: bool, strict: bool, since: Path | None,
    env: str | None, namespace: TargetOptions, no_discovery: bool, traffic: str | None, spark_master: str | None,
) -> None:
    """Show what apply would change (default PATH: ./rules). Reads the namespace, never writes it.

    With --traffic, the plan's impact on sampled traffic follows it (--format json: its "traffic" member).
    """
    with collector_paused():  # the declared and live rules live until the command ends
        rules = operations.load_rules(paths, env)
        if traffic:
            operations.check_sample(traffic)  # a missing sample is known before any network
        target = open_target(namespace.without_discovery(no_discovery), rules.environment)
        the_plan = operations.plan(target, rules, bystanders=bool(traffic), since=since)
    if out:
        write_output(out, render_json(the_plan), "the plan")
    if traffic:
        from reconciler.traffic.report.saved import plan_with_traffic

        with progress.task():
            result = operations.impact(rules, the_plan, traffic, spark_master=spark_master)
            tell(result)
            progress.phase("writing the report")
            shown = plan_with_traffic(the_plan, result.report, fmt)
        echo_text(shown.removesuffix("\n"))
    else:
        shown = RENDERERS[fmt](the_plan)
        click.echo(shown, nl=not shown.endswith("\n"))
    if out and fmt == "text":
        click.echo(f"Saved the plan to {out}; apply it with `sbrules apply {out}`.", err=True)
    if detailed_exitcode and the_plan.drifted(strict):
        raise SystemExit(ExitCode.CHANGES)


@click.command()
@click.argument("sources", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--auto-approve", is_flag=True, help="Apply changes computed from rule files without asking.")
@click.option(
    "--replace-strategy",
    type=click.Choice([s.value for s in ReplaceStrategy]),
    default=ReplaceStrategy.GAPLESS.value,
    show_default=True,
    help="gapless: new version under a temporary name first (no moment without the rule); direct: remove, then add.",
)
@click.option(
    "--parallel", type=click.IntRange(1, 256), default=8, show_default=True, help="Subscriptions applied at once."
)
@click.option("--max-rate", type=click.FloatRange(min=0.1), help="At most this many requests per second.")
@click.option(
    "--journal", type=click.Path(dir_okay=False, path_type=Path), help="Append a JSON line per request and outcome."
)
@click.option("--fail-fast", is_flag=True, help="Stop every subscription after the first failure.")
@click.option(
    "--lock-timeout", type=click.FloatRange(min=0), default=DEFAULT_TIMEOUT_SECONDS, show_default=True,
    help="Seconds to wait for a subscription another apply has locked; then it is reported LOCKED (exit 1).",
)
@click.option(
    "--lock-holder", metavar="TEXT", envvar="SBRULES_LOCK_HOLDER", show_envvar=True,
    help="Who the locks name (public to every Listen key; secrets redacted). Default: the CI run's URL, else user@host.",
)
@click.option(
    "--lock-lease", type=click.FloatRange(min=4), default=LEASE_SECONDS, show_default=True, envvar="SBRULES_LOCK_LEASE",
    show_envvar=True, help="Seconds a lock lasts after its last renewal; the safety margin is a quarter of it (docs/locking.md).",
)
@since_option
@format_option("text", "json")
@env_option
@namespace_options
@no_discovery_option
def apply(
    sources: tuple[Path, ...],
    since: Path | None,
    fmt: str,
    auto_approve: bool,
    replace_strategy: str,
    parallel: int,
    max_rate: float | None,
    journal: Path | None,
    fail_fast: bool,
    lock_timeout: float,
    lock_holder: str | None,
    lock_lease: float,
    env: str | None,
    namespace: TargetOptions,
    no_discovery: bool,
) -> None:
    """Apply a saved PLAN.json exactly, or plan PATH... (default ./rules) and apply after confirmation.

    Each subscription is locked while it is written (docs/locking.md): one that another apply
    is writing is waited for. Exit 0 when everything was applied (or nothing was to do), 1 when
    any change failed, a subscription was refused as stale or stayed locked, or a change's
    outcome is unknown; the report lists what was and was not applied (--format json: as one
    document; the plan made from rule files then goes to stderr).
    """
    plans = [source for source in sources if source.is_file() and source.suffix == ".json"]
    if plans and len(sources) > 1:
        raise click.UsageError(
            f"give either a saved plan ({plans[0]}) or rule paths to plan from, not both: "
            f"`sbrules apply {plans[0]}` applies the plan as reviewed"
        )
    saved = bool(plans)
    if saved and since is not None:
        raise click.UsageError(
            "--since is for planning from rule files; a saved plan made with `plan --since` carries its contested rules"
        )
    gapless = replace_strategy == ReplaceStrategy.GAPLESS
    namespace = dataclasses.replace(namespace, max_rate=max_rate)  # it paces the plan's reads too
    if saved:
        target, the_plan = _saved_plan(sources[0], env, namespace, gapless)
        rules = None
    else:
        rules = operations.load_rules(sources, env)
        target = open_target(namespace.without_discovery(no_discovery), rules.environment)
        the_plan = operations.plan(target, rules, since=since)
        # The plan's warnings are about gapless replaces: shown with the plan when they will run.
        shown = RENDERERS["text"](the_plan if gapless else dataclasses.replace(the_plan, warnings=()))
        click.echo(shown, err=fmt == "json")
        if not the_plan.has_changes:
            if fmt == "json":
                echo_json(report_to_json(ApplyReport([])))
            return
        _confirm(auto_approve)
    pacer = target.pacer()
    with contextlib.ExitStack() as stack:
        journal_file = stack.enter_context(journal.open("a", encoding="utf-8")) if journal else None
        advance = stack.enter_context(progress_bars({"applying": len(the_plan.changes)}, pacer))
        options = ApplyOptions(
            strategy=ReplaceStrategy(replace_strategy),
            parallel=parallel,
            fail_fast=fail_fast,
            journal=journal_file,
            on_change=lambda change: advance("applying", 1),
            on_interrupt=_finishing,
            lock_timeout=lock_timeout,
            lock_lease=lock_lease,
            holder=Holder.this_run(lock_holder or None),
            on_lock_wait=lambda line: click.echo(line, err=True),
        )
        report = operations.apply(target, the_plan, options, rules)
    if fmt == "json":
        echo_json(report_to_json(report))
    else:
        click.echo(render_report(report))
    if report.interrupted:
        raise SystemExit(ExitCode.INTERRUPTED)
    if not report.ok:
        raise SystemExit(ExitCode.ERROR)


def _saved_plan(path: Path, env: str | None, namespace: TargetOptions, gapless: bool) -> tuple[Target, Plan]:
    """A saved plan and the target it is for, checked; its warnings (gapless replaces) and contested
    rules said on stderr, since no plan was shown."""
    saved = read_plan_file(path)
    # A plan made with --env names its environment, and so its namespace: `sbrules apply plan.json`
    # works as plan prints it, without repeating --env (a namespace named on the command line wins,
    # and check_target then says whether the plan is for it).
    if env is None and not namespace.explicit:
        env = saved.environment
    target = open_target(namespace, operations.project_environment(env))
    saved.check_target(env, target.address)
    for warning in saved.warnings if gapless else ():
        click.echo(f"warning: {warning}", err=True)
    for contest in saved.contested:
        click.echo(f"warning: {contest.describe()}; writing it anyway", err=True)
    return target, saved


def _finishing() -> None:
    click.echo("interrupted: finishing the requests in flight, then reporting what was applied "
               "(Ctrl-C again to stop at once)", err=True)


def _confirm(auto_approve: bool) -> None:
    confirm(
        auto_approve, "Apply these changes?",
        refused="refusing to apply without confirmation: input is not a terminal. Pass --auto-approve, "
        "or save a reviewed plan with `sbrules plan --out plan.json` and run `sbrules apply plan.json`",
        cancelled="apply cancelled: nothing was changed",
    )


def confirm(approved: bool, question: str, *, refused: str, cancelled: str) -> None:
    """Go on when ``approved`` or a person at the terminal says yes; else one clear error line (no
    terminal to ask and no approving flag is a usage error: the command line lacks the flag)."""
    if approved:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(refused)
    if not click.confirm(question, default=False):
        raise SbrulesError(cancelled)


@click.command()
@paths_argument
@format_option("text", "json")
@strict_option
@since_option
@env_option
@namespace_options
@no_discovery_option
def drift(
    paths: tuple[Path, ...], fmt: str, strict: bool, since: Path | None, env: str | None, namespace: TargetOptions,
    no_discovery: bool,
) -> None:
    """Report live rules that differ from the files. Exit 0 in sync, 2 drift, 1 error."""
    with collector_paused():  # the declared and live rules live until the command ends
        rules = operations.load_rules(paths, env)
        target = open_target(namespace.without_discovery(no_discovery), rules.environment)
        the_plan = operations.drift(target, rules, since=since)
    shown = render_drift_json(the_plan, strict) if fmt == "json" else render_drift_text(the_plan, strict)
    click.echo(shown, nl=not shown.endswith("\n"))
    if the_plan.drifted(strict):
        raise SystemExit(ExitCode.CHANGES)


@click.command()
@click.option("--topic", help="Export this topic (every subscription, unless --subscription names some).")
@click.option("--all", "all_topics", is_flag=True, help="Export every topic of the namespace, one file per topic.")
@click.option("--subscription", "subscriptions", multiple=True,
              help="Only this subscription of --topic (repeatable; needs no Manage rights).")
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path),
    help="Write <topic>.yaml files here (default: stdout, one YAML document per topic).",
)
@click.option(
    "--owns", "owns", multiple=True, metavar="PATTERN",
    help="Export only the rules matching these rule-name patterns (repeatable), under owns: (the rest are foreign).",
)
@format_option("yaml", "json")
@env_option
@namespace_options
def export(
    topic: str | None, all_topics: bool, subscriptions: tuple[str, ...], out: Path | None, owns: tuple[str, ...],
    fmt: str, env: str | None, namespace: TargetOptions,
) -> None:
    """Write live rules as rule files: --topic T (all its subscriptions), or --all topics.

    Listing subscriptions uses the management REST API (Manage rights); naming them with
    --subscription reads only those, over AMQP (Listen rights are enough). With --env, topics are
    named as the rule files declare them (sbrules.yaml's topic renames undone). With --format json,
    stdout is one document: the rule-file documents, the files written, warnings and notes.
    """
    from reconciler.export import to_yaml, write_exports

    if all_topics == bool(topic):
        raise click.UsageError("give either --topic TOPIC or --all")
    if subscriptions and not topic:
        raise click.UsageError("--subscription narrows --topic; it cannot be used with --all")
    environment = operations.project_environment(env)
    target = open_target(namespace, environment)
    result = operations.export(target, topic=topic, subscriptions=subscriptions, owns=owns, environment=environment)
    for line in result.warnings:
        click.echo(f"warning: {line}", err=True)
    for line in result.notes:
        click.echo(f"note: {line}", err=True)
    written = [str(path) for path in write_exports(result.documents, out)] if out else []
    if fmt == "json":
        echo_json({"format_version": 1, "topics": result.documents, "files": written,
                   "warnings": result.warnings, "notes": result.notes})
    elif out:
        for path in written:
            click.echo(f"wrote {path}", err=True)
    else:
        click.echo("---\n".join(to_yaml(doc) for doc in result.documents), nl=False)


@click.command()
@click.option(
    "--rules",
    "rules_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Rule files (default: the project's rules/).",
)
@click.option(
    "--traffic/--no-traffic",
    default=True,
    show_default=True,
    help="Also sample published messages and show the Spark impact report (starts a local JVM).",
)
@env_option
def demo(rules_dir: Path | None, traffic: bool, env: str | None) -> None:
    """Plan → traffic impact → apply → drift against a local in-process emulator, narrated. Needs no Azure.

    With --env, the demo runs on that environment's rendered rules (of --rules, default ./rules).
    """
    from reconciler.demo import run_demo

    rules = None
    if env is not None:
        rules = operations.load_rules((rules_dir,) if rules_dir else (), env)
        rules_dir = rules_dir or Path("rules")
    if not run_demo(rules_dir, click.echo, traffic=traffic, rules=rules):
        raise SystemExit(ExitCode.ERROR)
