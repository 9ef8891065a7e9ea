"""``sbrules test``: run the routing test files beside the rule files, offline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from reconciler.app import operations
from reconciler.cli.common import collector_paused, env_option, format_option
from reconciler.cli.output import ExitCode, echo_json, echo_text
from reconciler.json_text import json_text
from reconciler.rulefiles.loader import is_test_file
from reconciler.ruletests import coverage, report
from reconciler.ruletests import mutate as mutation

if TYPE_CHECKING:
    from reconciler.model import DesiredState
    from reconciler.rulefiles.project import Environment


@click.command("test")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--coverage", "show_coverage", is_flag=True,
              help="Report which rule branches the cases exercise, and list the uncovered ones with file:line.")
@click.option("--min-coverage", type=click.FloatRange(0, 100), metavar="PERCENT",
              help="Fail (exit 1) when branch coverage is below PERCENT (implies --coverage).")
@click.option("--coverage-report", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Write the coverage to FILE: Cobertura XML when it ends in .xml, else JSON (implies --coverage).")
@click.option("--mutate", is_flag=True,
              help="Mutation testing: change one rule at a time and report the mutants no case kills, and the score.")
@click.option("--record", "sample", type=click.Path(exists=True, path_type=Path), metavar="SAMPLE",
              help="Write golden cases pinning how the rules route the messages of this traffic sample (Parquet, "
              "from `sbrules sample`) to --out, instead of running the tests.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="With --record: the test file to write (*.test.yaml).")
@click.option("--per-outcome", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --record: at most this many cases per distinct (topic, receivers, copies), smallest messages first.")
@click.option("--update", is_flag=True,
              help="Rewrite the expectations of failing cases to what the rules do now (after review; the rest of the file, "
              "comments included, is kept as written).")
@click.option("--against", type=click.Choice(["emulator"]),
              help="Also publish each case's message to a built-in emulator started for the run, and fail a case "
              "where what its subscriptions receive differs from the offline routing.")
@format_option(*report.FORMATS)
@env_option
def test(
    paths: tuple[Path, ...], show_coverage: bool, min_coverage: float | None, coverage_report: Path | None, mutate: bool,
    sample: Path | None, out: Path | None, per_outcome: int, update: bool, against: str | None, fmt: str,
    env: str | None,
) -> None:
    """Run the routing tests (*.test.yaml) named in PATH, or else found under the rule paths
    (default: ./rules), against the declared rules, offline: each case's message is routed as `sbrules route`
    routes it and its expectations checked. With --env, under that environment's variables,
    overlays and topic names (cases limited by `env:` to other environments are skipped).

    Exit 0 when every case passes, 1 when a case fails or a test or rule file has an error."""
    rule_paths = tuple(p for p in paths if not is_test_file(p))
    named_tests = [p for p in paths if is_test_file(p)]
    # The rules, cases and results: millions of objects kept until the command ends; what comes
    # after (coverage, mutants) runs with the collector on and them frozen out of its sight.
    with collector_paused():
        rules = operations.load_rules(rule_paths, env)
        if sample is not None:
            _record(sample, out, rules.state, rules.environment, per_outcome)
            return
        if out is not None:
            raise click.UsageError("--out goes with --record SAMPLE")
        run = operations.run_tests(named_tests, rules, rule_paths=rule_paths, against=against)
    cases, results, diags, environment = run.cases, run.results, run.findings, rules.environment
    branches = None
    if show_coverage or min_coverage is not None or coverage_report is not None:
        actual = environment.actual_topic if environment is not None else str
        branches = coverage.measure(results, rules.state, actual)
        if coverage_report is not None:
            xml = coverage_report.suffix == ".xml"
            text = coverage.render_cobertura(branches) + "\n" if xml else json_text(coverage.to_json(branches))
            coverage_report.write_text(text, encoding="utf-8")
    if update:
        from reconciler import golden

        for file in golden.update(results):
            click.echo(f"updated the failing cases' expectations in {file}", err=True)
    mutated = mutation.run_mutants(cases, rules.state, environment) if mutate else None
    if fmt == "json":
        document = report.to_document(results, diags)
        if branches is not None:
            document["coverage"] = coverage.to_json(branches)
        if mutated is not None:
            document["mutation"] = mutation.to_json(mutated)
        echo_json(document)
    else:
        echo_text(report.RENDERERS[fmt](results, diags))
        if branches is not None and fmt in ("text", "markdown"):
            echo_text(coverage.render_text(branches))
        if mutated is not None and fmt in ("text", "markdown"):
            echo_text(mutation.render_text(mutated))
    below = min_coverage is not None and branches is not None and coverage.percent(branches) < min_coverage
    if below:
        click.echo(f"error: coverage {coverage.percent(branches or []):.1f}% is below --min-coverage {min_coverage:g}", err=True)
    if below or not report.succeeded(results, diags):
        raise SystemExit(ExitCode.ERROR)


def _record(sample: Path, out: Path | None, state: DesiredState, environment: Environment | None, per_outcome: int) -> None:
    from reconciler import golden

    if out is None:
        raise click.UsageError("--record SAMPLE needs --out FILE (a *.test.yaml file)")
    if not is_test_file(out):
        raise click.UsageError(f"--out {out}: name it *.test.yaml, so that rule-file commands skip it")
    doc = golden.record(sample, state, environment, per_outcome)
    out.write_text(golden.dump(doc), encoding="utf-8")
    echo_text(f"recorded {len(doc['cases'])} cases in {out}")
