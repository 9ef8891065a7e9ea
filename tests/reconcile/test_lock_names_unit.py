"""Lock names are exact and the holder says nothing secret; a lost lock is reported or taken again."""

from __future__ import annotations

import io
import json
import threading

import pytest

from reconciler.apply import ApplyOptions, apply_plan, render_report
from reconciler.export import export_rules
from reconciler.limits import is_lock_rule, is_lock_rule_name, lock_generation
from reconciler.lock import Holder, LockError, SubscriptionLock, default_holder, find_locks, lock_rule
from reconciler.model import FalseFilter, Rule, SqlFilter, SqlRuleAction, TrueFilter
from reconciler.plan import compute_plan, fingerprint

pytestmark = pytest.mark.unit

T, S = "orders", "s"
A = Holder("alice@ci", "run-a")
NEVER = threading.Event()
ACTION = SqlRuleAction("SET sbrules_lock_holder = 'x'; SET sbrules_lock_run = 'r1'")


@pytest.mark.parametrize(
    ("rule", "lock"),
    [
        (Rule("sbrules-lock.1", FalseFilter(), ACTION), True),
        (Rule("SBRULES-LOCK.12", SqlFilter("1 = 0"), ACTION), True),
        (Rule("sbrules-lock.²", FalseFilter(), ACTION), False),  # '²'.isdigit() is true; it is no ASCII digit
        (Rule("sbrules-lock.١", FalseFilter(), ACTION), False),  # an Arabic-Indic one
        (Rule("ſbrules-lock.1", FalseFilter(), ACTION), False),  # the long s folds to s, but not in ASCII matching
        (Rule("sbrules-lock.1", TrueFilter(), ACTION), False),  # a delivering rule
        (Rule("sbrules-lock.1", SqlFilter("1=1"), ACTION), False),
        (Rule("sbrules-lock.1", FalseFilter()), False),  # no action
        (Rule("sbrules-lock.1", FalseFilter(), SqlRuleAction("SET sbrules_lock_holder = 'x'")), False),  # no run
        (Rule("sbrules-lock.1", FalseFilter(), SqlRuleAction(ACTION.expression + "; SET a = 1")), False),
        (Rule("sbrules-lock.", FalseFilter(), ACTION), False),
        (Rule("sbrules-lock.1x", FalseFilter(), ACTION), False),
        (Rule("sbrules-lock." + "9" * 37, FalseFilter(), ACTION), True),  # 50 characters
    ],
)
def test_only_a_false_filter_with_sbrules_action_and_an_ascii_generation_is_a_lock(rule, lock):
    assert is_lock_rule(rule) is lock
    assert (find_locks([rule]) != []) is lock


def test_a_generation_never_makes_a_name_longer_than_the_limit():
    assert lock_generation("sbrules-lock." + "9" * 37) == int("9" * 37)
    assert not is_lock_rule_name("sbrules-lock." + "1" * 38)


def _client(kit, *rules):
    return kit.FakeClient({(T, S): [kit.DEFAULT, *rules]})


@pytest.mark.parametrize("name", ["sbrules-lock.²", "sbrules-lock.1", "sbrules-lock.x"])
def test_a_rule_that_looks_like_a_lock_is_an_ordinary_rule_in_plan_drift_export_and_apply(kit, name):
    lookalike = Rule(name, TrueFilter())
    client = _client(kit, lookalike)
    live = {(T, S): client.list_rules(T, S)}
    desired = kit.desired_of({(T, S): [kit.DEFAULT]})
    plan = compute_plan(desired, live)
    assert [(c.rule, c.kind) for c in plan.changes] == [(name, "delete")]  # undeclared: shown, and removed
    assert any("looks like an sbrules lock but is not one" in note and name in note for note in plan.notes)
    assert fingerprint(live[(T, S)]) != fingerprint([kit.DEFAULT])
    exported = export_rules(client, {T: [S]})
    assert name in json.dumps(exported.documents, ensure_ascii=False) and any("looks like an sbrules lock" in w for w in exported.warnings)
    report = apply_plan(client, plan, ApplyOptions(holder=A))
    assert report.ok, render_report(report)
    assert set(client.rules(T, S)) == {"$Default"}


def test_a_rule_holding_the_next_generation_is_stepped_over(kit):
    client = _client(kit, Rule("sbrules-lock.1", TrueFilter()))
    lock = SubscriptionLock(client, T, S, A)
    lock.acquire(0, NEVER)
    assert lock.held.name == "sbrules-lock.2"


def test_a_generation_at_the_name_limit_is_refused_in_one_line_naming_unlock(kit):
    top = "sbrules-lock." + "9" * 37
    client = _client(kit, Rule(top, FalseFilter(), ACTION))
    with pytest.raises(LockError) as caught:
        SubscriptionLock(client, T, S, A).acquire(0, NEVER)
    assert "`sbrules unlock orders/s`" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("environ", "holder"),
    [
        ({"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "42"},
         "https://github.com/o/r/actions/runs/42"),
        ({"SYSTEM_COLLECTIONURI": "https://dev.azure.com/org/", "SYSTEM_TEAMPROJECT": "p", "BUILD_BUILDID": "7"},
         "https://dev.azure.com/org/p/_build/results?buildId=7"),
        ({"CI_JOB_URL": "https://gitlab.example/g/p/-/jobs/9", "CI_PIPELINE_URL": "https://gitlab.example/x"},
         "https://gitlab.example/g/p/-/jobs/9"),
        ({"CI_PIPELINE_URL": "https://gitlab.example/g/p/-/pipelines/3"}, "https://gitlab.example/g/p/-/pipelines/3"),
        ({"SBRULES_LOCK_HOLDER": "release train", "GITHUB_RUN_ID": "42"}, "release train"),
    ],
)
def test_the_default_holder_names_the_ci_run(environ, holder):
    assert default_holder(environ) == holder


def test_outside_ci_the_holder_is_user_at_host_without_a_pid():
    who = default_holder({})
    assert "@" in who and "pid" not in who


@pytest.mark.parametrize(
    "given",
    [
        "https://bob:hunter2@ci.example/run/1",
        "https://ci.example/run/1?sig=abcdef123456&se=1",
        "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0c2VjcmV0",
        "deploy password=hunter2 token: abc.def",
        "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
    ],
)
def test_secrets_in_the_holder_are_redacted_before_the_lock_is_written(given):
    holder = Holder.this_run(given)
    action = lock_rule(1, holder, 120.0).action.expression
    for secret in ("bob", "hunter2", "abcdef123456", "c2VjcmV0c2VjcmV0", "abc.def", "eyJhbGciOiJIUzI1NiJ9"):
        assert secret not in action, action
    assert "<redacted>" in action


def _setup(kit):
    client = kit.FakeClient({(T, S): [kit.DEFAULT]})
    desired = kit.desired_of({(T, S): [kit.corr("a", "A"), kit.corr("b", "B")]})
    return client, desired, compute_plan(desired, {(T, S): client.list_rules(T, S)})


class StallAfterFirstWrite:
    """This run's lease clock jumps past the lease once its first rule write is done (a SIGSTOP)."""

    def __init__(self, client, jump: float):
        self.now, self.jump, self.client = 0.0, jump, client

    def __call__(self) -> float:
        if self.jump and self.client.rule_ops:
            self.now, self.jump = self.now + self.jump, 0.0
        return self.now


def _apply_stalled(kit, desired):
    client, declared, plan = _setup(kit)
    clock = StallAfterFirstWrite(client, 200.0)
    journal = io.StringIO()
    options = ApplyOptions(holder=A, journal=journal, desired=declared if desired else None, lock_clock=clock)
    report = apply_plan(client, plan, options)
    return client, report, [json.loads(line) for line in journal.getvalue().splitlines()]


def test_a_stalled_holder_of_a_saved_plan_reports_lock_lost_and_writes_nothing_more(kit):
    client, report, journal = _apply_stalled(kit, desired=False)
    result = report.results[0]
    assert result.status == "lock-lost" and [c.rule for c in result.applied] == ["a"], render_report(report)
    assert [op[3] for op in client.rule_ops] == ["a"]
    text = render_report(report)
    assert "orders/s: LOCK LOST after 1 change(s) — 200s since its lock was last renewed" in text
    assert "NOT applied: create rule 'b'" in text and "1 lost its lock" in text
    assert any(e.get("outcome") == "lock-lost" for e in journal)
    assert find_locks(client.subs[(T, S)].values()) == []  # its own lock removed after all


def test_a_stalled_holder_of_rule_files_takes_its_lock_again_and_plans_again(kit):
    client, report, journal = _apply_stalled(kit, desired=True)
    result = report.results[0]
    assert result.status == "applied" and result.replanned, render_report(report)
    assert set(client.rules(T, S)) == {"a", "b"}
    assert [c.rule for c in result.applied] == ["a", "b", "$Default"]
    assert any("took its lock again and planned it again" in note for note in result.notes)


def test_a_secret_written_into_a_lock_by_hand_or_an_older_version_is_never_shown():
    rule = Rule("sbrules-lock.3", FalseFilter(), SqlRuleAction(
        "SET sbrules_lock_holder = 'https://bob:hunter2@ci.example/1'; SET sbrules_lock_run = 'r'"))
    [lock] = find_locks([rule])
    assert lock.describe() == "locked by https://<redacted>@ci.example/1"
