"""Reading live state: concurrency over one client, and failures that name their subscription."""

from __future__ import annotations

import threading

import pytest

from reconciler.namespace.errors import BadRequestError, UnauthorizedError
from reconciler.observe import ObserveError, observe_subscriptions

pytestmark = pytest.mark.unit


def test_reads_all_subscriptions_concurrently(kit):
    client = kit.FakeClient({("t", f"s{i}"): [kit.DEFAULT] for i in range(20)})
    active, peak, lock = [0], [0], threading.Lock()
    window_full = threading.Event()

    def hold_until_eight_are_in_flight(op, topic, sub, name, phase):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            if active[0] == 8:
                window_full.set()
        if not window_full.wait(10):
            window_full.set()  # reads are not concurrent: let the rest through, the peak below fails
        with lock:
            active[0] -= 1

    client.fault = hold_until_eight_are_in_flight
    actual = observe_subscriptions(client, list(client.subs), concurrency=8)
    assert set(actual) == set(client.subs) and all(rules == (kit.DEFAULT,) for rules in actual.values())
    assert peak[0] == 8


def test_every_failure_is_reported_with_its_subscription(kit):
    client = kit.FakeClient({("t", "ok"): [kit.DEFAULT], ("t", "fwd"): [kit.DEFAULT]})

    def fault(op, topic, sub, name, phase):
        if sub == "fwd":
            return BadRequestError(
                "enumerate-rules on t/Subscriptions/fwd: refused",
                status=400,
                condition="amqp:not-allowed",
                description="Cannot create a message browser on an entity with auto-forwarding enabled.",
            )
        return None

    client.fault = fault
    with pytest.raises(ObserveError) as exc:
        observe_subscriptions(client, [("t", "ok"), ("t", "fwd"), ("t", "missing"), ("gone", "x")])
    problems = exc.value.problems
    assert len(problems) == 3
    assert problems[0].startswith("t/fwd: auto-forwarding is enabled")
    assert problems[1] == "t/missing: topic 't' or subscription 'missing' does not exist in the namespace"
    assert problems[2].startswith("gone/x:")
    assert str(exc.value).startswith("cannot read the live rules:\n  t/fwd: ")


def test_refused_credentials_are_reported_once(kit):
    client = kit.FakeClient({("t", f"s{i}"): [kit.DEFAULT] for i in range(5)})
    client.fault = lambda *a: UnauthorizedError("put-token for t/Subscriptions/x: invalid signature", status=401)
    with pytest.raises(ObserveError) as exc:
        observe_subscriptions(client, list(client.subs))
    (problem,) = exc.value.problems
    assert problem.startswith("access refused for 5 of 5 subscriptions")


def test_a_missing_subscription_is_absent_when_the_caller_says_so(kit):
    client = kit.FakeClient({("t", "ok"): [kit.DEFAULT]})
    targets = [("t", "ok"), ("t", "missing"), ("gone", "x")]
    assert observe_subscriptions(client, targets, missing_ok=True) == {("t", "ok"): (kit.DEFAULT,)}
    with pytest.raises(ObserveError) as exc:
        observe_subscriptions(client, targets)
    assert len(exc.value.problems) == 2


def test_missing_ok_does_not_hide_other_failures(kit):
    client = kit.FakeClient({("t", "ok"): [kit.DEFAULT]})
    client.fault = lambda op, topic, sub, *rest: BadRequestError("refused", status=400) if sub == "ok" else None
    with pytest.raises(ObserveError) as exc:
        observe_subscriptions(client, [("t", "ok"), ("t", "missing")], missing_ok=True)
    (problem,) = exc.value.problems
    assert problem.startswith("t/ok:")


def test_one_failure_is_one_line(kit):
    with pytest.raises(ObserveError) as exc:
        observe_subscriptions(kit.FakeClient({}), [("t", "missing")])
    assert str(exc.value) == (
        "cannot read the live rules: t/missing: topic 't' or subscription 'missing' does not exist in the namespace"
    )
