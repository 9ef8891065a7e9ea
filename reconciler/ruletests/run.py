"""Run routing test cases offline against the declared rules, through the compiled topic router
that ``sbrules route`` and the emulator use, and say for each failure which rule decided what."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from reconciler.model import DesiredState, Message, TypedValue
from reconciler.names import name_key, same_name
from reconciler.rulefiles.project import Environment
from reconciler.ruletests.cases import Case, ExpectedCopy
from reconciler.ruletests.explain import Decision, decide
from reconciler.sql import MessageView, RouteResult, route_rules
from reconciler.sql.router import TopicRouter, topic_router


@dataclass(frozen=True)
class RuleVerdict:
    """How one rule of a subscription evaluated, and the part of its filter that decided it."""

    name: str
    result: str  # true / false / unknown / error (as `sbrules route` labels it)
    error: str | None
    decision: Decision


@dataclass(frozen=True)
class Finding:
    """One subscription where the case's expectation and the routing differ."""

    subscription: str
    expected: str
    actual: str
    rules: tuple[RuleVerdict, ...] = ()


@dataclass
class CaseResult:
    case: Case
    status: str  # passed / failed / skipped
    receivers: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    note: str = ""
    #: What each subscription did (subscription name → result), for coverage and --update.
    routed: dict[str, RouteResult] = field(default_factory=dict)


def run_cases(cases: Sequence[Case], state: DesiredState, environment: Environment | None = None) -> list[CaseResult]:
    """Each case's result, in order (each topic's router compiled once)."""
    routers: dict[str, TopicRouter] = {}
    return [run_case(case, state, environment, routers) for case in cases]


def run_case(
    case: Case, state: DesiredState, environment: Environment | None = None, routers: dict[str, TopicRouter] | None = None
) -> CaseResult:
    if case.envs and (environment is None or not any(same_name(environment.name, e) for e in case.envs)):
        where = "under --env " + " or ".join(case.envs)
        return CaseResult(case, "skipped", note=f"runs only {where}")
    actual_topic = environment.actual_topic(case.topic) if environment is not None else case.topic
    topic = state.topic(actual_topic)
    if topic is None:
        known = ", ".join(t.declared or t.name for t in state.topics) or "none"
        return CaseResult(case, "failed", note=f"topic {case.topic!r} is not declared (declared: {known})")
    routers = {} if routers is None else routers
    router = routers.get(topic.name)
    if router is None:
        router = routers[topic.name] = topic_router(topic)
    view = MessageView.from_message(case.message)
    routed = {router.subscriptions[i][0]: result for i, result in sorted(router.route(case.message, view).items())}
    receivers = [name for name, result in routed.items() if result.delivered]
    findings = [*_receiver_findings(case, router, receivers), *_copy_findings(case, routed)]
    note = ""
    if case.expect.unrouted is False and not receivers:
        note = "expected at least one subscription to receive the message; none did"
    explained = [_explained(f, router, case.message, view) for f in findings]
    status = "failed" if findings or note else "passed"
    return CaseResult(case, status, receivers, explained, note, routed)


def _receiver_findings(case: Case, router: TopicRouter, receivers: list[str]) -> list[Finding]:
    """The subscriptions whose receiving the expectation gets wrong, in the topic's order."""
    expect = case.expect
    received = {name_key(n) for n in receivers}
    should: dict[str, bool] = {}
    if expect.only is not None:
        wanted = {name_key(n) for n in expect.only}
        should.update((key, key in wanted) for key in wanted | received)
    should.update((name_key(n), True) for n in expect.includes)
    should.update((name_key(n), False) for n in expect.excludes)
    if expect.unrouted:
        should.update((key, False) for key in received)
    wrong = {key for key, wanted in should.items() if wanted != (key in received)}
    if not wrong:
        return []
    shown = {name_key(n): n for n in [*expect.named(), *(name for name, _ in router.subscriptions)]}
    order = {key: i for i, key in enumerate(shown)}
    return [
        Finding(shown[key], "receives the message" if should[key] else "does not receive it",
                "receives it" if key in received else "does not receive it")
        for key in sorted(wrong, key=lambda k: order[k])
    ]


def _copy_findings(case: Case, routed: dict[str, RouteResult]) -> list[Finding]:
    findings: list[Finding] = []
    if not case.expect.copies:
        return findings
    by_key = {name_key(n): r for n, r in routed.items()}
    for sub, expected in case.expect.copies.items():
        result = by_key.get(name_key(sub))
        copies = result.copies if result is not None else []
        for want in expected:
            if not any(copy_matches(want, rule, copy) for rule, copy in copies):
                made = "; ".join(_describe_copy(rule, copy, want) for rule, copy in copies) or "no copies"
                findings.append(Finding(sub, f"a copy {_describe_expected(want)}", made))
    return findings


def copy_matches(want: ExpectedCopy, rule: str | None, copy: Message) -> bool:
    """Whether ``copy`` (made by ``rule``) is the expected one: same rule, the listed values."""
    if (want.rule is None) != (rule is None) or (want.rule is not None and rule is not None and not same_name(want.rule, rule)):
        return False
    return all(copy.sys.get(k) == v for k, v in want.sys.items()) and all(
        copy.user_property(k) == v for k, v in want.user.items()
    )


def _describe_expected(want: ExpectedCopy) -> str:
    origin = "unchanged" if want.rule is None else f"from rule {want.rule!r}"
    listed = ", ".join(
        [f"sys.{k} = {v.describe()}" for k, v in want.sys.items()] + [f"{k} = {v.describe()}" for k, v in want.user.items()]
    )
    return origin + (f" with {listed}" if listed else "")


def _describe_copy(rule: str | None, copy: Message, want: ExpectedCopy) -> str:
    origin = "unchanged copy" if rule is None else f"copy from rule {rule!r}"
    listed = [f"sys.{k} = {_held(copy.sys.get(k))}" for k in want.sys] + [
        f"{k} = {_held(copy.user_property(k))}" for k in want.user
    ]
    return origin + (f" with {', '.join(listed)}" if listed else "")


def _held(value: TypedValue | None) -> str:
    return "absent" if value is None else value.describe()


def _explained(finding: Finding, router: TopicRouter, message: Message, view: MessageView) -> Finding:
    rules = next((r for name, r in router.subscriptions if same_name(name, finding.subscription)), None)
    if rules is None:
        return finding
    full = route_rules(rules, message, view)
    verdicts = tuple(
        RuleVerdict(rule_name, outcome.label, outcome.error, decide(rule, message, view))
        for rule, (rule_name, outcome) in zip(rules, full.rule_results)
    )
    return Finding(finding.subscription, finding.expected, finding.actual, verdicts)
