"""`sbrules test --against emulator`: the demo suite and 2,000 generated cases, routed offline and
published to a built-in emulator, with no disagreement."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from reconciler.against import _compared, dead_lettered, run_against_emulator
from reconciler.emulator.routing import FILTER_ERROR_REASON
from reconciler.golden import expectation
from reconciler.model import Message, Origin, TypedValue, ValueType
from reconciler.rulefiles import load
from reconciler.ruletests.cases import Case, Expectation
from reconciler.ruletests.run import run_cases

RULES = Path(__file__).resolve().parents[2] / "rules"


def generated_cases(count: int, seed: int = 41) -> list[Case]:
    rng = random.Random(seed)
    state = load([RULES]).state
    cases = []
    for n in range(count):
        topic = rng.choice(["orders", "payments"])
        user: dict[str, object] = {}
        for name, choices in {
            "amount": [{"double": 1500.0}, {"long": 20}, {"int": 6000}, "many", {"double": 999.5}],
            "currency": ["EUR", "USD", "GBP", {"int": 1}], "region": ["eu-west", "eu-north", "us-east", "eu"],
            "tier": [{"int": 3}, {"long": 3}], "express": [True, False], "priority": [{"int": 1}, {"long": 1}],
            "risk_score": [{"double": 0.9}, {"double": 0.1}], "country": ["DE", "US"], "test": [True],
        }.items():
            if rng.random() < 0.5:
                user[name] = rng.choice(choices)
        sys = {"Label": rng.choice(["order.placed", "order.paid", "order.amended", "refund", "chargeback", "x"])}
        if rng.random() < 0.3:
            sys["ContentType"] = "application/json"
        if rng.random() < 0.1:
            sys["To"] = "somewhere"
        message = Message.from_json({"sys": sys, "user": user})
        placeholder = Case(f"generated {n}", topic, message, Expectation(unrouted=False), Origin("generated", n + 1, 1))
        (result,) = run_cases([placeholder], state)
        expect = expectation(result.routed, message)
        cases.append(Case(f"generated {n}", topic, message, _expectation(expect), Origin("generated", n + 1, 1)))
    return cases


def _expectation(doc: dict) -> Expectation:
    return Expectation(only=tuple(doc["only"])) if "only" in doc else Expectation(unrouted=True)


@pytest.mark.slow
def test_the_demo_suite_and_2000_generated_cases_agree_with_the_emulator(run_cli):
    code, out, err = run_cli("test", RULES, "--against", "emulator")
    assert code == 0 and out.strip() == "7 passed, 0 failed, 0 skipped", out + err
    state = load([RULES]).state
    cases = generated_cases(2000)
    results = run_against_emulator(cases, state)
    failed = [(r.case.name, r.findings, r.note) for r in results if r.status != "passed"]
    assert not failed, failed[:5]
    assert sum(len(result.copies) for r in results for result in r.routed.values()) > 2000


@pytest.mark.unit
def test_a_difference_in_what_a_subscription_received_fails_the_case():
    state = load([RULES]).state
    message = Message.from_json({"sys": {"Label": "order.paid", "MessageId": "m1"}, "user": {"region": "eu-west"}})
    (result,) = run_cases([Case("paid", "orders", message, Expectation(includes=("shipping",)), Origin("t", 1, 1))], state)
    copies = {name: [copy for _rule, copy in r.copies] for name, r in result.routed.items()}
    same = {("m1", name): listed for name, listed in copies.items()}
    assert _compared(result, same).status == "passed"
    other = dict(same)
    other[("m1", "shipping")] = [message]  # the unchanged message where paid-eu's action sets the carrier
    compared = _compared(result, other)
    assert compared.status == "failed"
    assert [(f.subscription, f.expected, f.actual) for f in compared.findings] == [
        ("shipping", "1 copy (offline routing)", "the emulator delivered 1 with other properties")
    ]


def _dead_letter(message: Message) -> Message:
    return Message(sys=message.sys, user={**message.user, "DeadLetterReason": TypedValue(ValueType.STRING, FILTER_ERROR_REASON)})


@pytest.mark.unit
def test_dead_lettering_is_compared_both_ways():
    """A filter that raises (`amount > 1000` on the string 'many') dead-letters the message in
    billing, which still receives nothing else; offline routing predicts it, and a broker that does
    not dead-letter it, or dead-letters it elsewhere, fails the case."""
    state = load([RULES]).state
    message = Message.from_json({"sys": {"Label": "order.placed", "MessageId": "m1"}, "user": {"amount": "many"}})
    (result,) = run_cases([Case("raises", "orders", message, Expectation(unrouted=False), Origin("t", 1, 1))], state)
    assert list(dead_lettered(result.routed)) == ["billing"]
    assert "high-value" in dead_lettered(result.routed)["billing"]
    copies = {("m1", name): [copy for _rule, copy in r.copies] for name, r in result.routed.items()}
    assert _compared(result, copies, {("m1", "billing"): [_dead_letter(message)]}).status == "passed"

    missing = _compared(result, copies, {})
    assert missing.status == "failed"
    ((subscription, expected, actual),) = [(f.subscription, f.expected, f.actual) for f in missing.findings]
    assert subscription == "billing" and expected.startswith("dead-lettered (rule 'high-value': ")
    assert actual == "the emulator did not dead-letter it"

    elsewhere = _compared(result, copies, {("m1", "billing"): [_dead_letter(message)], ("m1", "audit"): [_dead_letter(message)]})
    assert [(f.subscription, f.expected, f.actual) for f in elsewhere.findings] == [
        ("audit", "not dead-lettered (offline routing)", f"the emulator dead-lettered it 1 time with reason {FILTER_ERROR_REASON}")
    ]


@pytest.mark.slow
def test_a_case_whose_filter_raises_is_dead_lettered_by_the_emulator_as_predicted():
    state = load([RULES]).state
    message = Message.from_json({"sys": {"Label": "order.placed"}, "user": {"amount": "many", "currency": "EUR"}})
    case = Case("raises", "orders", message, Expectation(includes=("audit",)), Origin("t", 1, 1))
    (result,) = run_against_emulator([case], state)
    assert result.status == "passed", (result.findings, result.note)
    assert list(dead_lettered(result.routed)) == ["billing"]
