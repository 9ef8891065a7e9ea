"""The apply lock on an in-memory store: taking, waiting, taking over, renewing; what apply reports
about locked subscriptions, changed ones, and writes whose answer never came."""

from __future__ import annotations

import io
import json
import threading
import time

import pytest

from reconciler.apply import ApplyOptions, apply_plan, render_report
from reconciler.lint import lint
from reconciler.lock import (
    Holder,
    LockBusy,
    LockLost,
    LockWaitInterrupted,
    SubscriptionLock,
    find_locks,
    lock_rule,
    parse_lock,
)
from reconciler.model import Rule, SqlFilter, SqlRuleAction
from reconciler.namespace.errors import QuotaExceededError
from reconciler.plan import PlanError, compute_plan, plan_subscription

pytestmark = pytest.mark.unit

T, S = "orders", "s"
A, B, C = Holder("alice@ci pid 1", "run-a"), Holder("bob@ci pid 2", "run-b"), Holder("carol@ci pid 3", "run-c")
NEVER = threading.Event()


class Clock:
    """The lease clock of one run (monotonic); each run may have its own."""

    def __init__(self, now: float = 1_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Ticking(threading.Event):
    """A stop event whose waits pass on the fake clocks instead of in real time."""

    def __init__(self, *clocks: Clock):
        super().__init__()
        self.clocks = clocks

    def wait(self, timeout=None):
        for clock in self.clocks:
            clock.now += timeout or 0
        return False


def _lock(client, holder, clock, lease=120.0, **kw) -> SubscriptionLock:
    return SubscriptionLock(client, T, S, holder, lease=lease, clock=clock, **kw)


def _store(kit, *rules):
    return kit.FakeClient({(T, S): list(rules) or [kit.DEFAULT]})


def _locks(client):
    return [(lock.name, lock.holder) for lock in find_locks(client.subs[(T, S)].values())]


def test_a_lock_rule_carries_holder_run_and_lease_and_delivers_nothing():
    rule = lock_rule(7, A, 90.0, wall=1_800_000_000.0)
    assert rule.name == "sbrules-lock.7" and rule.filter.__class__.__name__ == "FalseFilter"
    lock = parse_lock(rule)
    assert (lock.generation, lock.holder, lock.run, lock.lease) == (7, A.who, A.run, 90.0)
    assert lock.expires == "2027-01-15T08:01:30Z" and lock.patience == 90.0 * 1.25
    assert parse_lock(Rule("r", SqlFilter("1=0"))) is None
    assert parse_lock(Rule("sbrules-lock.x", SqlFilter("1=0"), SqlRuleAction("SET a = 1"))) is None


def test_holder_names_are_made_safe_for_the_action_text():
    holder = Holder.this_run("o'brien; DROP")
    assert "'" not in holder.who and ";" not in holder.who and len(holder.run) == 12


def test_a_second_run_waits_then_names_the_holder_and_unlock(kit):
    client, clock = _store(kit), Clock()
    rules = _lock(client, A, clock).acquire(10, NEVER)
    assert [r.name for r in rules] == ["$Default"]  # read under the lock, the lock itself left out
    with pytest.raises(LockBusy, match=r"LOCKED by alice@ci pid 1 .*`sbrules unlock orders/s`"):
        _lock(client, B, clock).acquire(0, NEVER)
    assert _locks(client) == [("sbrules-lock.1", A.who)]


def test_a_waiting_run_says_once_who_holds_which_lock_and_for_how_long_it_waits(kit):
    client, clock = _store(kit), Clock()
    _lock(client, A, clock).acquire(10, NEVER)
    told = []
    with pytest.raises(LockBusy):
        _lock(client, B, clock, on_wait=lambda line, lock: told.append(line)).acquire(30, Ticking(clock))
    assert len(told) == 1
    assert told[0].startswith(f"orders/s: locked by {A.who} (sbrules-lock.1); waiting up to 30s, taken over if it "
                              "stays unchanged for 150s more; `sbrules unlock orders/s`")


def test_waiting_ends_at_ctrl_c(kit):
    client, clock = _store(kit), Clock()
    _lock(client, A, clock).acquire(10, NEVER)
    pressed = threading.Event()
    pressed.set()
    with pytest.raises(LockWaitInterrupted):
        _lock(client, B, clock).acquire(3600, pressed)


def test_a_lock_seen_unchanged_for_lease_and_margin_is_taken_over_with_the_next_generation(kit):
    client, a_clock, b_clock = _store(kit), Clock(), Clock(5_000.0)
    first = _lock(client, A, a_clock)
    first.acquire(10, NEVER)
    waiter = _lock(client, B, b_clock)
    with pytest.raises(LockBusy):
        waiter.acquire(149, Ticking(b_clock))  # A's lock seen unchanged for 149 s: not yet
    waiter.acquire(10, Ticking(b_clock))  # the same waiter, having seen it for 150 s: taken over
    assert _locks(client) == [("sbrules-lock.2", B.who)]  # A's lock cleared
    a_clock.now += 30  # A was stalled, but its own clock says 30 s: its renewal finds generation 2 taken
    a_clock.now += 40
    with pytest.raises(LockLost, match="took its lock over"):
        first.keep()


@pytest.mark.parametrize("skew", [150.0, -150.0, 3600.0, -3600.0])
def test_no_wall_clock_decides_a_take_over(kit, skew):
    """The holder's written expiry lies by ``skew``: the waiter still waits for lease + margin."""
    client, clock = _store(kit), Clock()
    client.subs[(T, S)]["sbrules-lock.1"] = lock_rule(1, A, 120.0, wall=time.time() + skew - 120.0)
    with pytest.raises(LockBusy):
        _lock(client, B, clock).acquire(149, Ticking(clock))
    assert _locks(client) == [("sbrules-lock.1", A.who)]


def test_a_renewing_holder_is_never_taken_over(kit):
    client, a_clock, b_clock = _store(kit), Clock(), Clock()
    holder = _lock(client, A, a_clock)
    holder.acquire(0, NEVER)
    waiter = _lock(client, B, b_clock)
    for _ in range(10):  # 600 s on both clocks; A renews every 60 s, which B sees as a change
        with pytest.raises(LockBusy):
            waiter.acquire(60, Ticking(a_clock, b_clock))
        holder.keep()
    assert [name for name, _ in _locks(client)] == ["sbrules-lock.11"]


def test_a_holder_stops_writing_before_its_lease_could_lapse(kit):
    client, clock = _store(kit), Clock()
    lock = _lock(client, A, clock, lease=60)
    lock.acquire(0, NEVER)
    clock.now += 44.9
    assert lock.lapsed() is None
    clock.now += 0.1  # lease 60 - margin 15
    assert "45s since its lock was last renewed" in lock.lapsed()
    with pytest.raises(LockLost):
        lock.keep()


def test_a_lock_is_renewed_before_a_write_once_half_its_lease_is_gone(kit):
    client, clock = _store(kit), Clock()
    lock = _lock(client, A, clock, lease=60)
    lock.acquire(0, NEVER)
    clock.now += 20
    lock.keep()
    assert _locks(client) == [("sbrules-lock.1", A.who)]
    clock.now += 15  # 35 s of 60 since it was taken
    lock.keep()
    assert _locks(client) == [("sbrules-lock.2", A.who)]
    clock.now += 40  # counted from the renewal: 40 of the 45 s it may write
    assert lock.lapsed() is None
    lock.release()
    assert _locks(client) == []


def test_failures_to_renew_and_release_are_reported(kit):
    client, clock = _store(kit), Clock()
    problems = []
    lock = _lock(client, A, clock, lease=60, on_problem=problems.append)
    lock.acquire(0, NEVER)
    client.fault = lambda op, topic, sub, name, phase: (
        QuotaExceededError("refused", status=403) if op in ("add", "remove") and name.startswith("sbrules-lock") else None)
    clock.now += 31
    lock.keep()  # the renewal fails: reported; it may still write for 14 s
    assert "could not be renewed" in problems[0]
    clock.now += 14
    with pytest.raises(LockLost):
        lock.keep()
    lock.release()
    assert "'sbrules-lock.1' could not be removed" in problems[1] and "sbrules unlock orders/s" in problems[1]


def _apply_setup(kit, live, declared):
    client = kit.FakeClient({(T, S): live})
    desired = kit.desired_of({(T, S): declared})
    return client, desired, compute_plan(desired, {(T, S): client.list_rules(T, S)})


def test_apply_reports_a_locked_subscription_and_changes_nothing(kit):
    client, desired, plan = _apply_setup(kit, [kit.DEFAULT], [kit.corr("a", "A")])
    client.subs[(T, S)]["sbrules-lock.4"] = lock_rule(4, B, 120.0)
    journal = io.StringIO()
    report = apply_plan(client, plan, ApplyOptions(lock_timeout=0, journal=journal, holder=A))
    assert not report.ok and report.results[0].status == "locked"
    assert client.rule_ops == []
    text = render_report(report)
    assert f"orders/s: LOCKED by {B.who} (`sbrules unlock orders/s` if that run is gone); nothing was changed" in text
    assert "NOT applied: create rule 'a'" in text and "1 locked by another run" in text
    entry = next(json.loads(x) for x in journal.getvalue().splitlines() if '"locked"' in x)
    assert entry["holder"] == B.who


def test_a_stale_subscription_is_planned_again_under_the_lock_from_the_rule_files(kit):
    client, desired, plan = _apply_setup(kit, [kit.DEFAULT], [kit.corr("a", "A")])
    client.add_rule(T, S, kit.corr("other-run", "X"))  # another run changed it since the plan
    saved = apply_plan(client, plan)
    assert saved.results[0].status == "stale"  # a saved plan is refused
    report = apply_plan(client, plan, ApplyOptions(desired=desired))
    assert report.ok and report.results[0].replanned, render_report(report)
    assert set(client.rules(T, S)) == {"a"}
    assert "planned again under its lock" in render_report(report)


def test_plan_shows_a_lock_as_a_note_never_as_drift(kit):
    live = [kit.corr("a", "A"), lock_rule(3, B, 120.0, wall=2_000_000_000.0)]
    desired = kit.desired_of({(T, S): [kit.corr("a", "A")]})
    plan = compute_plan(desired, {(T, S): live})
    assert not plan.has_changes
    assert plan.notes == (f"orders/s: locked by {B.who}, until about 2033-05-18T03:35:20Z by its holder's clock "
                          "(sbrules-lock.3); an apply is writing it, or left it when killed: the next apply takes it "
                          "over once unchanged for 150s, `sbrules unlock orders/s` removes it now (a lock rule is not "
                          "drift)",)


def test_declared_rules_may_not_use_the_lock_name(kit):
    with pytest.raises(PlanError, match="reserves for its apply lock"):
        plan_subscription(T, S, [kit.corr("sbrules-lock.1", "A")], [])
    found = lint(kit.desired_of({(T, S): [kit.corr("SBRULES-LOCK.x", "A")]}))
    assert [d.message for d in found if d.code == "rule-name" and "apply lock" in d.message]


def _always(op_name, target, phase, error):
    return lambda op, topic, sub, name, ph: error() if (op, name, ph) == (op_name, target, phase) else None


def _lands_unanswered(kit, landed):
    """add-rule 'a' is carried out, and no answer to it or to any retry of it ever comes."""

    def fault(op, topic, sub, name, phase):
        if (op, name) == ("add", "a") and (phase == "after" or landed):
            landed.append(True)
            return kit.lost_response()
        return None

    return fault


def test_an_unanswered_write_that_landed_is_reported_applied_from_a_re_read(kit):
    client, _, plan = _apply_setup(kit, [kit.DEFAULT], [kit.corr("a", "A")])
    client.fault = _lands_unanswered(kit, [])
    journal = io.StringIO()
    report = apply_plan(client, plan, ApplyOptions(journal=journal))
    assert report.ok, render_report(report)
    entries = [json.loads(x) for x in journal.getvalue().splitlines()]
    assert {"target": "a", "outcome": "re-read", "found": "applied"}.items() <= next(
        e for e in entries if e.get("outcome") == "re-read").items()


def test_an_unanswered_write_that_did_not_land_is_reported_not_applied(kit):
    client, _, plan = _apply_setup(kit, [kit.DEFAULT], [kit.corr("a", "A")])
    client.fault = _always("add", "a", "before", kit.lost_response)
    report = apply_plan(client, plan)
    result = report.results[0]
    assert result.status == "failed" and "re-read: not applied" in result.error
    assert [c.rule for c in result.not_applied] == ["a", "$Default"]
    assert set(client.rules(T, S)) == {"$Default"}


def test_an_unanswered_write_is_unknown_when_the_subscription_cannot_be_read(kit):
    client, _, plan = _apply_setup(kit, [kit.DEFAULT], [kit.corr("a", "A")])
    landed = []
    unanswered = _lands_unanswered(kit, landed)

    def fault(op, topic, sub, name, phase):
        if op == "list" and landed:
            return kit.lost_response()
        return unanswered(op, topic, sub, name, phase)

    client.fault = fault
    report = apply_plan(client, plan)
    result = report.results[0]
    assert result.status == "unknown" and result.unknown.rule == "a" and result.applied == []
    assert [c.rule for c in result.not_applied] == ["$Default"]
    text = render_report(report)
    assert "? UNKNOWN: create rule 'a' (unknown: run `sbrules plan`)" in text
    assert "NOT applied: create rule 'a'" not in text and "1 unknown" in text


def test_removing_down_to_one_rule_re_reads_and_refuses_when_it_is_gone(kit):
    """What A would do when B removed r1 meanwhile: remove r2 believing r1 remains."""
    client, _, plan = _apply_setup(kit, [kit.corr("r1", "A"), kit.corr("r2", "B")], [kit.corr("r1", "A")])
    reads = []

    def other_writer(op, topic, sub, name, phase):
        if op == "list" and phase == "before":
            reads.append(True)
            if len(reads) == 3:  # after the lock's read and check: someone without the lock removes r1
                with client.lock:
                    client.subs[(T, S)].pop("r1", None)
        return None

    client.fault = other_writer
    report = apply_plan(client, plan)
    result = report.results[0]
    assert result.status == "failed" and "no longer has r1" in result.error
    assert set(client.rules(T, S)) == {"r2"}  # refused: the subscription kept its rule


def test_a_lock_removed_by_someone_else_while_held_is_reported_at_release(kit):
    client, clock = _store(kit), Clock()
    problems = []
    lock = _lock(client, A, clock, on_problem=problems.append)
    lock.acquire(0, NEVER)
    client.remove_rule(T, S, "sbrules-lock.1")  # `sbrules unlock --yes`, or a run with a broken clock
    lock.release()
    assert len(problems) == 1 and "was already gone when this run removed it" in problems[0]
    quiet = _lock(client, B, clock, on_problem=problems.append)
    quiet.acquire(0, NEVER)
    quiet.release()  # removed by its holder alone: nothing to say
    assert len(problems) == 1


def test_an_apply_waiting_for_one_run_on_many_subscriptions_says_so_once(kit):
    subs = [(T, "s1"), (T, "s2")]
    client = kit.FakeClient({key: [kit.DEFAULT] for key in subs})
    for topic, sub in subs:
        client.add_rule(topic, sub, lock_rule(4, B, 120.0))
    desired = kit.desired_of({key: [kit.corr("a", "A")] for key in subs})
    plan = compute_plan(desired, {key: client.list_rules(*key) for key in subs})
    told = []
    report = apply_plan(client, plan, ApplyOptions(lock_timeout=0.05, holder=A, on_lock_wait=told.append))
    assert [r.status for r in report.results] == ["locked", "locked"]
    assert len(told) == 1 and told[0].startswith("orders/s") and f"locked by {B.who} (sbrules-lock.4)" in told[0]
