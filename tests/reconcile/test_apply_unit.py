"""apply's safety rules on an in-memory store: order, gapless replace, stale plans, failures, retries."""

from __future__ import annotations

import io
import json
import os
import signal
import time

import pytest

from reconciler.apply import ApplyOptions, ReplaceStrategy, apply_plan, render_report
from reconciler.apply.interrupts import CtrlC
from reconciler.namespace.errors import BadRequestError, ServerBusyError
from reconciler.plan import Plan, compute_plan, is_temp_rule_name

pytestmark = pytest.mark.unit

T = "orders"


def _setup(kit, live, declared):
    client = kit.FakeClient({(T, sub): rules for sub, rules in live.items()})
    desired = kit.desired_of({(T, sub): rules for sub, rules in declared.items()})
    return client, desired


def _plan(client, desired) -> Plan:
    actual = {key: client.list_rules(*key) for key in client.subs}
    return compute_plan(desired, actual)


def test_apply_converges_in_safe_order(kit):
    a, b, b2, c = kit.corr("a", "A"), kit.corr("b", "B"), kit.corr("b", "B2"), kit.corr("c", "C")
    client, desired = _setup(kit, {"s": [kit.DEFAULT, b]}, {"s": [a, b2, c]})
    plan = _plan(client, desired)
    assert [(ch.kind, ch.rule) for ch in plan.changes] == [
        ("create", "a"), ("create", "c"), ("replace", "b"), ("delete", "$Default")
    ]
    report = apply_plan(client, plan)
    assert report.ok
    assert client.rules(T, "s") == {"a": a, "b": b2, "c": c}
    lock = "sbrules-lock.1"  # taken before the first write, released after the last
    assert client.ops == [
        ("add", T, "s", lock),
        ("add", T, "s", "a"),
        ("add", T, "s", "c"),
        ("add", T, "s", "b.sbrules-tmp"),
        ("remove", T, "s", "b"),
        ("add", T, "s", "b"),
        ("remove", T, "s", "b.sbrules-tmp"),
        ("remove", T, "s", "$Default"),
        ("remove", T, "s", lock),
    ]
    assert client.min_rules[(T, "s")] >= 1


def test_apply_twice_second_does_nothing(kit):
    client, desired = _setup(kit, {"s": [kit.DEFAULT]}, {"s": [kit.corr("a", "A")]})
    plan = _plan(client, desired)
    assert apply_plan(client, plan).ok
    before = list(client.rule_ops)
    again = apply_plan(client, plan)  # the same saved plan: already in its end state
    assert again.ok and again.results[0].status == "already-applied"
    assert client.rule_ops == before
    assert not _plan(client, desired).has_changes


def test_stale_plan_is_refused_naming_the_subscription(kit):
    client, desired = _setup(
        kit, {"s": [kit.DEFAULT], "t": [kit.DEFAULT]}, {"s": [kit.corr("a", "A")], "t": [kit.corr("x", "X")]}
    )
    plan = _plan(client, desired)
    client.add_rule(T, "s", kit.corr("sneaky", "Z"))  # someone changes s after the plan was made
    client.ops.clear()
    report = apply_plan(client, plan, ApplyOptions(parallel=1))
    assert not report.ok
    by_sub = {r.plan.subscription: r for r in report.results}
    assert by_sub["s"].status == "stale" and "stale plan" in by_sub["s"].error
    assert by_sub["t"].status == "applied"
    assert all(op[2] == "t" for op in client.rule_ops)
    text = render_report(report)
    assert "orders/s: REFUSED" in text and "NOT applied: create rule 'a'" in text


def test_direct_replace_of_only_rule_stays_gapless(kit):
    client, desired = _setup(kit, {"s": [kit.corr("only", "A")]}, {"s": [kit.corr("only", "B")]})
    report = apply_plan(client, _plan(client, desired), ApplyOptions(strategy=ReplaceStrategy.DIRECT))
    assert report.ok
    assert client.min_rules[(T, "s")] == 1
    assert client.rules(T, "s")["only"].filter.subject == "B"


def test_direct_replace_removes_then_adds(kit):
    keep = kit.corr("k", "K")
    client, desired = _setup(kit, {"s": [kit.corr("a", "A"), keep]}, {"s": [kit.corr("a", "A2"), keep]})
    assert apply_plan(client, _plan(client, desired), ApplyOptions(strategy=ReplaceStrategy.DIRECT)).ok
    assert client.rule_ops == [("remove", T, "s", "a"), ("add", T, "s", "a")]


def test_failure_stops_that_subscription_and_reports_what_was_not_applied(kit):
    client, desired = _setup(
        kit,
        {"s": [kit.DEFAULT], "t": [kit.DEFAULT]},
        {"s": [kit.corr("a", "A"), kit.corr("bad", "B")], "t": [kit.corr("x", "X")]},
    )
    plan = _plan(client, desired)
    client.fault = lambda op, topic, sub, name, phase: (
        BadRequestError("rule bad is invalid", status=400) if (name, phase) == ("bad", "before") else None
    )
    journal = io.StringIO()
    report = apply_plan(client, plan, ApplyOptions(parallel=1, journal=journal))
    assert not report.ok
    s = next(r for r in report.results if r.plan.subscription == "s")
    assert s.status == "failed" and [c.rule for c in s.applied] == ["a"]
    assert [c.rule for c in s.not_applied] == ["bad", "$Default"]
    assert "$Default" in client.rules(T, "s")  # the deletion never ran: no loss
    assert "x" in client.rules(T, "t") and "$Default" not in client.rules(T, "t")
    lines = [json.loads(line) for line in journal.getvalue().splitlines()]
    assert any(e.get("outcome") == "error" and e.get("target") == "bad" for e in lines)
    assert all("time" in e for e in lines)
    text = render_report(report)
    assert "FAILED" in text and "NOT applied: create rule 'bad'" in text and "incomplete" in text


def test_fail_fast_stops_the_rest(kit):
    client, desired = _setup(
        kit, {"s": [kit.DEFAULT], "t": [kit.DEFAULT]}, {"s": [kit.corr("bad", "B")], "t": [kit.corr("x", "X")]}
    )
    plan = _plan(client, desired)
    client.fault = lambda op, topic, sub, name, phase: BadRequestError("no", status=400) if name == "bad" else None
    report = apply_plan(client, plan, ApplyOptions(parallel=1, fail_fast=True))
    statuses = {r.plan.subscription: r.status for r in report.results}
    assert statuses == {"s": "failed", "t": "not-started"}
    assert client.rules(T, "t") == {"$Default": kit.DEFAULT}


def test_transient_errors_and_lost_responses_count_as_done(kit):
    client, desired = _setup(
        kit, {"s": [kit.DEFAULT, kit.corr("r", "R")]}, {"s": [kit.corr("a", "A"), kit.corr("r", "R2")]}
    )
    plan = _plan(client, desired)
    calls = {"n": 0}

    def fault(op, topic, sub, name, phase):
        calls["n"] += 1
        if op != "list" and phase == "after" and calls["n"] % 3 == 0:
            return kit.lost_response()  # the change happened, the response did not arrive
        if op != "list" and phase == "before" and calls["n"] % 5 == 0:
            return ServerBusyError("busy", status=503)
        return None

    client.fault = fault
    journal = io.StringIO()
    report = apply_plan(client, plan, ApplyOptions(journal=journal))
    assert report.ok, render_report(report)
    client.fault = lambda *a: None
    assert client.rules(T, "s") == {"a": kit.corr("a", "A"), "r": kit.corr("r", "R2")}
    assert not any(is_temp_rule_name(n) for n in client.rules(T, "s"))
    outcomes = {json.loads(line)["outcome"] for line in journal.getvalue().splitlines()}
    assert {"retry", "already-done"} <= outcomes


def test_crash_mid_replace_is_repaired_by_the_next_plan(kit):
    client, desired = _setup(kit, {"s": [kit.corr("r", "R")]}, {"s": [kit.corr("r", "R2")]})
    plan = _plan(client, desired)

    class Crash(Exception):
        pass

    def crash(op, topic, sub, name, phase):
        if (op, name, phase) == ("remove", "r", "after"):
            raise Crash()  # the process dies after removing the old rule: only the temporary one is left

    client.fault = crash
    with pytest.raises(Crash):
        apply_plan(client, plan)
    client.fault = lambda *a: None
    assert set(client.rules(T, "s")) == {"r.sbrules-tmp"}
    repair = _plan(client, desired)
    assert [(c.kind, c.rule) for c in repair.changes] == [("create", "r"), ("delete", "r.sbrules-tmp")]
    assert "leftover temporary rule" in repair.changes[1].reasons[0]
    assert apply_plan(client, repair).ok
    assert client.rules(T, "s") == {"r": kit.corr("r", "R2")}
    assert client.min_rules[(T, "s")] >= 1


def test_leftover_temporary_rule_with_other_content_is_replaced(kit):
    stale_temp = kit.corr("r.sbrules-tmp", "OLD")
    client, desired = _setup(kit, {"s": [kit.corr("r", "R"), stale_temp]}, {"s": [kit.corr("r", "R2")]})
    report = apply_plan(client, _plan(client, desired))
    assert report.ok, render_report(report)
    assert client.rules(T, "s") == {"r": kit.corr("r", "R2")}


def test_ctrl_c_while_apply_waits_is_counted_not_raised():
    # Raised, a KeyboardInterrupt could land inside concurrent.futures.wait while it holds the
    # futures' locks, and the worker finishing one would then block the interpreter's exit for ever.
    before = signal.getsignal(signal.SIGINT)
    with CtrlC() as ctrl_c:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # a signal's handler runs at the main thread's next bytecode
        assert ctrl_c.presses == 2
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):  # outside, Ctrl-C is Python's again
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
