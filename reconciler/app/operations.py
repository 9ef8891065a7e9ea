"""The use cases, once: what ``sbrules validate | plan | apply | drift | export | sample | impact |
analyze | test | show`` do, each taking rule paths, loaded rules or a saved file and, when it reads the namespace, a
:class:`~reconciler.app.target.Target`, and returning the domain's result for its caller to render.

The command line adds only options and renderers; the demo and library users call these too, so
that there is one way to get a plan, one way to report its traffic, and one way to apply it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Generic, Sequence, TypeVar

from reconciler import diagnostics as diag
from reconciler.errors import InputError, SbrulesError, UsageError

if TYPE_CHECKING:
    from reconciler.app.target import Target
    from reconciler.apply import ApplyOptions, ApplyReport
    from reconciler.export import Export
    from reconciler.model import DesiredState
    from reconciler.observe import LiveRules
    from reconciler.owners import Owners
    from reconciler.plan import Plan
    from reconciler.rulefiles import LoadResult
    from reconciler.rulefiles.project import Environment
    from reconciler.ruletests.cases import Case
    from reconciler.ruletests.run import CaseResult
    from reconciler.traffic.report.model import ImpactReport
    from reconciler.traffic.report.routing import Analysis
    from reconciler.traffic.report.saved import Saved
    from reconciler.traffic.sample.sampler import SampleStats


# ------------------------------------------------------------------------------------------------
# Rule files
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    """The rules a command works on, the environment they were rendered for, and how many errors
    they have (only ever non-zero when the command was told to go on despite them)."""

    state: "DesiredState"
    environment: "Environment | None"
    errors: int = 0

    @property
    def env_name(self) -> str | None:
        return self.environment.name if self.environment else None

    def planned(self, plan: "Plan") -> "DesiredState":
        """These rules as ``plan`` made them: with the fall-through rules it derived from the live
        rules of the subscriptions no file mentions (what apply writes and the impact counts)."""
        from reconciler.rulefiles.loader import with_bystanders

        return with_bystanders(self.state, plan.bystanders)


def load_rules(
    paths: Sequence[Path] = (), env: str | None = None, *, lint_errors: bool = True, allow_invalid: bool = False
) -> Rules:
    """The rule files (default ./rules) for ``env``, loaded and linted in one pass, and refused with
    every error (schema, model and, with ``lint_errors``, lint alike) when ``validate`` would call
    them invalid — unless ``allow_invalid``: then the rules that could be built, and the count."""
    from reconciler.lint import lint
    from reconciler.rulefiles import RuleFileErrors
    from reconciler.rulefiles.environment import load_rules as load_environment
    from reconciler.rulefiles.environment import locate

    source = locate(tuple(paths))
    result = load_environment(source, env)
    findings = [*result.diagnostics, *(lint(result.state) if lint_errors else ())]
    errors = sorted((d for d in findings if d.severity == "error"), key=diag.sort_key)
    if errors and not allow_invalid:
        raise RuleFileErrors(errors)
    environment = source.project.environment(env) if source.project and env else None
    return Rules(result.state, environment, len(errors))


def project_environment(env: str | None) -> "Environment | None":
    """The environment ``env`` of the project file found from ./rules or the current directory
    (for operations that read no rule files: apply PLAN.json, export, sample)."""
    if env is None:
        return None
    file = _project_file()
    if file is None:
        raise UsageError(f"--env {env}: no sbrules.yaml in ./rules, here or above, so there are no environments")
    from reconciler.rulefiles.project import read_project

    return read_project(file).environment(env)


def project_owners() -> "Owners":
    """sbrules.yaml's ``owners:`` (none without a project file), found as ``project_environment``
    finds it: for export, which reads no rule files but labels what others own."""
    from reconciler.owners import NO_OWNERS
    from reconciler.rulefiles.project import read_project

    file = _project_file()
    return read_project(file).owners if file else NO_OWNERS


def _project_file() -> Path | None:
    from reconciler.rulefiles.environment import DEFAULT_RULES
    from reconciler.rulefiles.project import find_project

    return find_project(DEFAULT_RULES if DEFAULT_RULES.is_dir() else Path.cwd())


# ------------------------------------------------------------------------------------------------
# validate: offline
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Validation:
    """Every checked environment's rules (one None key without a project) and their findings."""

    results: "dict[str | None, LoadResult]"
    findings: list[diag.Diagnostic]
    #: Whether the rules are a project's (sbrules.yaml), whose environments were checked.
    project: bool

    @property
    def summary(self) -> dict[str, int]:
        """Files, topics, subscriptions and rules checked (the largest environment's file count)."""
        results = self.results.values()
        return {
            "files": max(r.files for r in results),
            "topics": sum(len(r.state.topics) for r in results),
            "subscriptions": sum(1 for r in results for _ in r.state.subscriptions()),
            "rules": sum(len(s.rules or ()) for r in results for _, s in r.state.subscriptions()),
        }

    @property
    def valid(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)


def validate(paths: Sequence[Path] = (), env: str | None = None, *, static_budget: float | None = None) -> Validation:
    """Schema, SQL and limit checks of the rule files, with no network: every environment of an
    sbrules.yaml, or only ``env``; ``static_budget``: seconds the static proofs may take (0 skips
    them; None: ``lint.STATIC_BUDGET_SECONDS``). Files named inside a project (pre-commit passes the
    changed ones) are valid only together with the rest of the project: the project is checked, and
    the findings kept are those in the named files."""
    from reconciler.lint import STATIC_BUDGET_SECONDS
    from reconciler.rulefiles.environment import RuleSource, load_every_environment, locate
    from reconciler.rulefiles.environment import load_rules as load_environment

    source = locate(tuple(paths))
    named: set[Path] = set()
    if source.project is not None and paths and all(Path(p).is_file() for p in paths):
        named = {Path(p).resolve() for p in paths}
        source = RuleSource((source.project.root,), source.project)
    results: dict[str | None, LoadResult] = (
        {env: load_environment(source, env)} if env is not None else dict(load_every_environment(source))
    )
    findings = _findings(results, STATIC_BUDGET_SECONDS if static_budget is None else static_budget)
    if named:
        findings = [f for f in findings if f.origin is not None and Path(f.origin.file).resolve() in named]
    return Validation(results, findings, source.project is not None)


def _findings(results: "dict[str | None, LoadResult]", static_budget: float) -> list[diag.Diagnostic]:
    """Every environment's findings, once each: one that not every environment shares names its environment."""
    from reconciler.lint import lint

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
                finding = dataclasses.replace(finding, message=f"environment {name!r}: {finding.message}")
            findings.add(finding)
    return sorted(sorted(findings, key=lambda d: d.message), key=diag.sort_key)


# ------------------------------------------------------------------------------------------------
# plan, drift, apply, export, sample: the namespace
# ------------------------------------------------------------------------------------------------


def plan(target: "Target", rules: Rules, *, bystanders: bool = False, since: Path | None = None) -> "Plan":
    """The plan of ``rules`` against the target namespace, saying which environment and namespace it
    is for (``bystanders``: with the rules of every undeclared subscription, for a traffic report;
    ``since``: the previous apply's journal or plan, to find the rules another writer re-created since).
    The one way sbrules gets a plan."""
    from reconciler.plan.contest import read_since
    from reconciler.plan.live import plan_live

    last = read_since(since) if since is not None else None
    with target.amqp() as client, target.rest() as rest:
        the_plan = plan_live(client, rest, rules.state, discovery=target.discovery, bystanders=bystanders, since=last)
    return dataclasses.replace(the_plan, environment=rules.env_name, namespace=target.address)


def drift(target: "Target", rules: Rules, *, since: Path | None = None) -> "Plan":
    """What differs between the namespace and the rule files: the plan, read for its drift
    (:meth:`~reconciler.plan.Plan.drifted`)."""
    return plan(target, rules, since=since)


def apply(target: "Target", the_plan: "Plan", options: "ApplyOptions", rules: Rules | None = None) -> "ApplyReport":
    """Apply ``the_plan`` to the target namespace (the caller asked whoever must approve first).
    ``rules``: those the plan was just made from (the gapless replace of a fall-through subscription
    re-derives its rule from them), None for a saved plan. The requests are paced by the target's
    one pacer (``options.pacer`` is set to it: the journal's totals are the target's)."""
    from reconciler.apply import apply_plan

    if rules is not None:
        options = dataclasses.replace(options, desired=rules.planned(the_plan))
    with target.amqp() as client:
        return apply_plan(client, the_plan, dataclasses.replace(options, pacer=client.pacer))


def live_rules(target: "Target", targets: Sequence[tuple[str, str]]) -> "LiveRules":
    """The live rules of each (topic, subscription) of ``targets``, read in one pipelined batch (over
    REST where AMQP refuses: auto-forwarding; the result says which)."""
    from reconciler.observe import observe_subscriptions

    with target.amqp() as client, target.rest() as rest:
        return observe_subscriptions(client, targets, fallback=rest)


def export(
    target: "Target", *, topic: str | None = None, subscriptions: Sequence[str] = (), owns: Sequence[str] = (),
    environment: "Environment | None" = None,
) -> "Export":
    """The live rules as rule-file documents: of ``topic`` (only ``subscriptions`` when named, read
    over AMQP with Listen rights), or of every topic (listed over REST). Topics are named as
    ``environment``'s rule files declare them; ``owns``: only the rules matching those patterns."""
    from reconciler.export import discovered_targets, export_rules

    if topic is not None and environment is not None:
        topic = environment.actual_topic(topic)
    with target.amqp() as client, target.rest() as rest:
        targets = {topic: list(subscriptions)} if subscriptions and topic else discovered_targets(rest, topic)
        result = export_rules(client, targets, fallback=rest, owns=tuple(owns) or None, owners=project_owners())
    if environment is not None:
        for doc in result.documents:
            doc["topic"] = environment.declared_topic(doc["topic"])
    return result


def sample(
    target: "Target", topic: str, subscriptions: Sequence[str], dataset: str, *, max_messages: int | None = None,
    page_size: int = 250, on_page: Callable[[str, int], None] | None = None,
) -> "SampleStats":
    """Peek ``subscriptions`` of ``topic`` into the Parquet sample ``dataset``, continuing after what
    it holds, as many pages in flight as the target's credit budget pays for."""
    from reconciler.traffic.sample.sampler import pages_in_flight
    from reconciler.traffic.sample.sampler import sample as run_sample

    pacer = target.pacer()
    with target.amqp() as client:
        return run_sample(
            client, topic, subscriptions, dataset, max_messages=max_messages, page_size=page_size,
            pages_in_flight=lambda: pages_in_flight(pacer.budget, page_size), on_page=on_page,
        )


# ------------------------------------------------------------------------------------------------
# impact, analyze: a traffic sample (Spark)
# ------------------------------------------------------------------------------------------------


Report = TypeVar("Report")


@dataclass(frozen=True)
class Traffic(Generic[Report]):
    """A traffic report and what its reader should be warned of (gaps in the sample, say)."""

    report: Report
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_sample(dataset: str) -> None:
    """Refuse a missing or broken sample in milliseconds, before any network or JVM."""
    from reconciler.traffic.spark import failures

    failures.check_sample(dataset)


def impact(
    rules: Rules, the_plan: "Plan", dataset: str, *, against: str = "live", spark_master: str | None = None
) -> "Traffic[ImpactReport]":
    """What ``the_plan`` does to the sampled traffic in ``dataset`` (``against``: "live" for a plan
    just read from the namespace, else the saved plan's path), reading the plan's own changes; the
    rules after it are ``rules``, with the fall-through rules the plan derived from what it read."""
    from reconciler.traffic.analysis.impact import impact_report

    report = impact_report(
        rules.planned(the_plan), the_plan, dataset, against=against, spark_master=spark_master,
        declared=_declared(rules.environment),
    )
    return Traffic(report, _gap_warnings(dataset, rules.state))


def analyze(
    rules: Rules, dataset: str, *, spark_master: str | None = None, target: "Target | None" = None
) -> "Traffic[Analysis]":
    """Routing health on ``dataset``: of the rule files' rules, or with a ``target``, of the
    namespace's current rules (the declared subscriptions and the others of their topics)."""
    from reconciler.traffic.analysis.analyze import analyze_report
    from reconciler.traffic.analysis.impact import desired_subscribers

    subscribers, complete, notes = desired_subscribers(rules.state), False, list[str]()
    if target is not None:
        subscribers, complete, notes = _live_subscribers(target, rules.state, subscribers)
    document = analyze_report(
        subscribers, "live" if target is not None else "desired", dataset, spark_master, _declared(rules.environment),
        complete=complete,
    )
    return Traffic(document, _gap_warnings(dataset, rules.state), notes)


def _live_subscribers(target: "Target", desired: "DesiredState", subscribers: list) -> tuple[list, bool, list[str]]:
    """The declared subscriptions with their current rules (those missing from the namespace left
    out), and the subscriptions of the declared topics that no file mentions, with theirs; whether
    discovery listed them all; and its note."""
    from reconciler.discovery import discover, undeclared_subscriptions
    from reconciler.observe import observe_subscriptions
    from reconciler.plan.live import read_bystanders
    from reconciler.traffic.analysis.health import Subscriber

    with target.amqp() as client, target.rest() as rest:
        live = observe_subscriptions(client, [(s.topic, s.subscription) for s in subscribers], missing_ok=True)
        inventory = discover(rest, [t.name for t in desired.topics], enabled=target.discovery)
        undeclared = undeclared_subscriptions(desired, inventory)
        others = read_bystanders(client, desired, undeclared, every=True, fallback=rest)
    declared = [
        dataclasses.replace(s, rules=live[(s.topic, s.subscription)]) for s in subscribers if (s.topic, s.subscription) in live
    ]
    found = [
        Subscriber(t, s, others.get((t, s)), declared=False, owner=desired.owners.of_subscription(t, s))
        for t, s in undeclared
    ]
    return declared + found, inventory.listed, [inventory.note] if inventory.note else []


def _declared(environment: "Environment | None") -> Callable[[str], str]:
    """A topic's declared name from its name in the namespace (``environment`` may rename topics)."""
    return environment.declared_topic if environment is not None else str


def _gap_warnings(dataset: str, desired: "DesiredState") -> list[str]:
    """A warning for each declared topic whose sampled messages have gaps (the sample's manifest)."""
    from reconciler.traffic.sample.manifest import gap_warnings

    return list(gap_warnings(dataset, [t.name for t in desired.topics]))


def show(path: Path) -> "Saved":
    """A saved plan, impact report or routing-health document read back, to render again in any of its
    formats with no namespace and no Spark; anything else is one InputError line naming the file."""
    import json

    from reconciler.traffic.report.saved import read_saved

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a JSON document ({exc})") from None
    try:
        return read_saved(doc)
    except SbrulesError as exc:  # the readers' errors are all the input's (code input)
        raise InputError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------------------------------
# test: routing expectations, offline (or against a built-in emulator)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoutingTests:
    """The cases read, their results, and the test files' findings (errors fail the run)."""

    cases: "list[Case]"
    results: "list[CaseResult]"
    findings: list[diag.Diagnostic]


def run_tests(
    test_paths: Sequence[Path], rules: Rules, *, rule_paths: Sequence[Path] = (), against: str | None = None
) -> RoutingTests:
    """Run the routing test files ``test_paths`` (else those found under ``rule_paths``, default
    ./rules) against ``rules``: each case's message routed as ``route`` routes it, offline, or with
    ``against="emulator"`` also through a built-in emulator started for the run."""
    from reconciler.rulefiles.environment import locate
    from reconciler.rulefiles.variables import Substitution
    from reconciler.ruletests.cases import read_cases, test_files
    from reconciler.ruletests.run import run_cases
    from reconciler.ruletests.typos import typo_warnings

    files = test_files(list(test_paths) or list(locate(tuple(rule_paths)).paths))
    findings: list[diag.Diagnostic] = []
    if not files:
        where = ", ".join(map(str, list(test_paths) or locate(tuple(rule_paths)).paths))
        findings.append(diag.Diagnostic("error", "no-tests", f"no routing test files (*.test.yaml) found in {where}"))
    environment = rules.environment
    cases = read_cases(files, findings, Substitution(environment.vars).test_file if environment is not None else None)
    findings += typo_warnings(cases, rules.state, environment)
    findings.sort(key=diag.sort_key)
    if against == "emulator":
        from reconciler.against import run_against_emulator

        results = run_against_emulator(cases, rules.state, environment)
    else:
        results = run_cases(cases, rules.state, environment)
    return RoutingTests(cases, results, findings)

