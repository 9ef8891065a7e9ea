"""``sbrules demo``: the whole GitOps loop against a local in-process emulator, narrated for a person.

The emulator is seeded with a namespace that has drifted from the rule files in every way a plan
can show — a rule changed out of band (SQL and a correlation property's type), a rule missing, an
extra rule, the service's ``$Default`` catch-all — plus one difference that must *not* show: the
same SQL re-typed with other whitespace, keyword case and parentheses. Then plan, apply and drift
run exactly as the CLI runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from reconciler.apply import ApplyOptions, apply_plan, render_report
from reconciler.errors import SbrulesError
from reconciler.model import (
    DEFAULT_RULE_NAME,
    CorrelationFilter,
    DesiredState,
    Rule,
    SqlFilter,
    Subscription,
    TrueFilter,
    TypedValue,
    ValueType,
)
from reconciler.observe import observe
from reconciler.plan import Plan, compute_plan, render_drift_text, render_text
from reconciler.rulefiles import load_paths

EXTRA_RULE = Rule("legacy-catch-all", SqlFilter("sys.Label LIKE 'order.%'"))
_KEYWORDS = re.compile(r"\b(AND|OR|NOT|IN|LIKE|IS|NULL|EXISTS|ESCAPE|BETWEEN)\b", re.IGNORECASE)
_QUOTED = re.compile(r"('(?:[^']|'')*'|\[[^\]]*\])")


def project_rules_dir() -> Path:
    """The repository's rules/ directory, found relative to the installed package."""
    path = Path(__file__).resolve().parent.parent / "rules"
    if not path.is_dir():
        raise SbrulesError(f"the demo rules are not at {path}; pass --rules DIR")
    return path


def retype_cosmetically(expression: str) -> str:
    """The same SQL written differently: keyword case flipped, spacing changed, wrapped in parentheses."""
    parts = _QUOTED.split(expression)
    for i in range(0, len(parts), 2):  # even parts are outside literals and [identifiers]
        text = _KEYWORDS.sub(lambda m: m.group(0).swapcase(), parts[i])
        parts[i] = re.sub(r"\s+", "   ", text)
    return "(  " + "".join(parts).strip() + "\n)"


@dataclass
class Drift:
    """One out-of-band difference the demo seeds, and what the plan should say about it."""

    where: str
    what: str
    cosmetic_rule: str | None = None  # a rule that differs only cosmetically: the plan must not list it


def _retype_property(value: TypedValue) -> TypedValue | None:
    if value.type is ValueType.INT:
        return TypedValue(ValueType.LONG, value.value)
    if value.type is ValueType.LONG and -(2**31) <= value.value < 2**31:
        return TypedValue(ValueType.INT, value.value)
    return None


def _candidates(desired: DesiredState) -> Iterator[tuple[int, int, Subscription]]:
    for ti, topic in enumerate(desired.topics):
        for si, sub in enumerate(topic.subscriptions):
            if sub.managed:
                yield ti, si, sub


def drifted_namespace(desired: DesiredState) -> tuple[DesiredState, list[Drift]]:
    """A live state differing from ``desired`` in each way a plan can show (spread over the subscriptions)."""
    topics = [list(t.subscriptions) for t in desired.topics]
    rules = {(ti, si): list(s.rules or ()) for ti, si, s in _candidates(desired)}
    used: set[tuple[int, int]] = set()
    touched: set[tuple[tuple[int, int], str]] = set()
    drifts: list[Drift] = []

    def path(key: tuple[int, int]) -> str:
        return f"{desired.topics[key[0]].name}/{topics[key[0]][key[1]].name}"

    def pick(test: Callable[[Rule, list[Rule]], bool]) -> tuple[tuple[int, int], int] | None:
        fresh = [k for k in rules if k not in used] + [k for k in rules if k in used]
        for key in fresh:
            for i, rule in enumerate(rules[key]):
                if (key, rule.name) not in touched and test(rule, rules[key]):
                    used.add(key)
                    touched.add((key, rule.name))
                    return key, i
        return None

    is_sql = lambda r, _: isinstance(r.filter, SqlFilter)  # noqa: E731
    if found := pick(is_sql):
        key, i = found
        rule = rules[key][i]
        rules[key][i] = replace(rule, filter=SqlFilter(retype_cosmetically(rule.filter.expression)))
        what = f"rule {rule.name!r} re-typed with other spacing and keyword case — must NOT show"
        drifts.append(Drift(path(key), what, cosmetic_rule=rule.name))
    retypable = lambda r, _: isinstance(r.filter, CorrelationFilter) and any(  # noqa: E731
        _retype_property(v) for _, v in r.filter.properties
    )
    if found := pick(retypable):
        key, i = found
        rule = rules[key][i]
        name, value = next((k, v) for k, v in rule.filter.properties if _retype_property(v))
        props = dict(rule.filter.properties) | {name: _retype_property(value)}
        rules[key][i] = replace(rule, filter=replace(rule.filter, properties=tuple(props.items())))
        what = f"rule {rule.name!r}: property {name!r} is {props[name].describe()} live → replace"
        drifts.append(Drift(path(key), what))
    if found := pick(lambda r, _: isinstance(r.filter, SqlFilter) and _QUOTED.search(r.filter.expression) is not None):
        key, i = found
        rule = rules[key][i]
        literal = _QUOTED.search(rule.filter.expression).group(0)
        changed = rule.filter.expression.replace(literal, literal[:-1] + "-old'", 1)
        rules[key][i] = replace(rule, filter=SqlFilter(changed))
        drifts.append(Drift(path(key), f"rule {rule.name!r} edited by hand in the portal → replace, with a SQL diff"))
    if found := pick(lambda _, rs: len(rs) >= 2):
        key, _ = found
        missing = rules[key].pop()
        drifts.append(Drift(path(key), f"rule {missing.name!r} is missing → create"))
    if found := pick(lambda _, rs: all(r.name != EXTRA_RULE.name for r in rs)):
        key, _ = found
        rules[key].append(EXTRA_RULE)
        drifts.append(Drift(path(key), f"extra rule {EXTRA_RULE.name!r} added out of band → delete"))
    if found := pick(lambda _, rs: all(r.name != DEFAULT_RULE_NAME for r in rs)):
        key, _ = found
        rules[key].insert(0, Rule(DEFAULT_RULE_NAME, TrueFilter()))
        drifts.append(Drift(path(key), "the service's $Default catch-all is there but not declared → delete (last)"))
    for (ti, si), live in rules.items():
        topics[ti][si] = replace(topics[ti][si], rules=tuple(live))
    state = DesiredState(tuple(replace(t, subscriptions=tuple(subs)) for t, subs in zip(desired.topics, topics)))
    return state, drifts


def run_demo(rules_dir: Path | None, echo: Callable[[str], None], traffic: bool = True) -> bool:
    """Seed an emulator, then plan → (traffic impact) → apply → drift; True when it ends in sync."""
    from reconciler.amqp.client import ManagementClient
    from reconciler.emulator import Emulator

    rules_dir = rules_dir or project_rules_dir()
    desired = load_paths([rules_dir])
    live, drifts = drifted_namespace(desired)
    with Emulator(live) as emulator:
        echo(f"Started a local Service Bus emulator (AMQP on {_endpoint(emulator.connection_string)}).")
        echo(f"Its namespace was seeded to drift from the rule files in {rules_dir}:")
        for drift in drifts:
            echo(f"  • {drift.where}: {drift.what}")
        with ManagementClient(emulator.connection_string) as client:
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
    in_sync = cosmetic_ok and report.ok and not after.has_changes
    echo(
        "\nThe loop is closed: plan showed the differences, apply converged, drift is clean."
        if in_sync
        else "\nThe namespace did not converge; see above."
    )
    return in_sync


def _traffic(emulator, client, desired: DesiredState, live: DesiredState, echo: Callable[[str], None]) -> None:
    """Step 2: what the plan would do to real messages (Spark), when Spark can run here."""
    from reconciler.demo_traffic import run_traffic_step, spark_available

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
