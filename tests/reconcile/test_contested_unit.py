"""Fights seen right after apply's own writes, in process: another writer (the fake namespace's
fault hook, which runs the moment apply's write lands) changes, removes, re-creates or adds back
a rule; apply's read under its lock reports it contested, journals it, and ``--since JOURNAL``
carries it while the rule stays as found."""

from __future__ import annotations

import datetime as _dt
import io
import json
from dataclasses import replace

import pytest

from reconciler.apply import ApplyOptions, apply_plan, render_report, report_to_json
from reconciler.model import DesiredState, Rule, SqlFilter, Subscription, Topic
from reconciler.owners import Owners
from reconciler.plan import compute_plan
from reconciler.plan.contest import _from_journal, with_contests

pytestmark = pytest.mark.unit

T, S = "orders", "shared"
MINE = Rule("team-a-big", SqlFilter("amount > 100"))
THEIRS = Rule("team-a-big", SqlFilter("amount > 500"))
KEEP = Rule("team-a-keep", SqlFilter("1=1"))
LATER = _dt.datetime(2100, 1, 1, tzinfo=_dt.timezone.utc)


def _desired(*rules: Rule, owners: Owners | None = None) -> DesiredState:
    return DesiredState((Topic(T, (Subscription(S, rules),)),), owners=owners or Owners())


def _other_writer(client, op: str, name: str, then):
    """After apply's ``op`` of rule ``name`` lands, ``then(rules)`` rewrites the subscription's rules
    (a dict by case-folded name), once."""
    done = []

    def fault(seen_op, topic, sub, seen_name, phase):
        if (seen_op, seen_name, phase) == (op, name, "after") and not done:
            done.append(True)
            with client.lock:
                then(client.subs[(T, S)])
        return None

    client.fault = fault


def _apply(client, desired, journal=None):
    with client.lock:
        live = {(T, S): list(client.subs[(T, S)].values())}
    plan = compute_plan(desired, live)
    return plan, apply_plan(client, plan, ApplyOptions(journal=journal, desired=desired))


def test_a_rule_changed_right_after_apply_wrote_it_is_contested_with_its_likely_owner(kit, output_schema):
    client = kit.FakeClient({(T, S): [KEEP]})
    _other_writer(client, "add", MINE.name, lambda rules: rules.update({MINE.name: THEIRS}))
    journal = io.StringIO()
    owners = Owners({"masstransit": ("orders/shared/team-a-big",)})
    _, report = _apply(client, _desired(KEEP, MINE, owners=owners), journal)

    (result,) = report.results
    (contest,) = result.contested
    assert (contest.rule, contest.found, contest.likely_owner) == ("team-a-big", "changed", "masstransit")
    assert report.ok and report.counts()["contested"] == 1  # applied as planned; the fight is reported
    text = render_report(report)
    assert "! contested orders/shared rule 'team-a-big': changed by another writer (created at an unknown time)" in text
    assert "likely owner: masstransit" in text and "1 rule(s) contested" in text
    doc = report_to_json(report)
    output_schema("apply").validate(doc)
    assert doc["summary"]["contested"] == 1
    assert doc["subscriptions"][0]["contested"][0]["found"] == "changed"
    entries = [json.loads(line) for line in journal.getvalue().splitlines()]
    (entry,) = [e for e in entries if e.get("outcome") == "contested"]
    assert entry["rule"] == "team-a-big" and entry["likely_owner"] == "masstransit"
    assert [e["step"] for e in entries if e.get("step") == "verify"]  # the read is journalled as its own step


@pytest.mark.parametrize(
    ("op", "name", "then", "found"),
    [
        ("add", MINE.name, lambda rules: rules.pop(MINE.name), "removed"),
        ("add", MINE.name, lambda rules: rules.update({MINE.name: replace(MINE, created_at=LATER)}), "re-created"),
        ("remove", "stray", lambda rules: rules.update({"stray": replace(KEEP, name="stray", created_at=LATER)}),
         "re-added"),
    ],
)
def test_removed_re_created_and_added_back_are_contested(kit, output_schema, op, name, then, found):
    client = kit.FakeClient({(T, S): [KEEP, replace(KEEP, name="stray")]})
    _other_writer(client, op, name, then)
    _, report = _apply(client, _desired(KEEP, MINE))
    (contest,) = report.results[0].contested
    assert (contest.rule, contest.found) == (name, found)
    assert (contest.created_at is None) == (found == "removed")
    output_schema("apply").validate(report_to_json(report))


def test_nobody_else_writing_means_no_contest(kit):
    client = kit.FakeClient({(T, S): [KEEP, replace(KEEP, name="stray")]})
    _, report = _apply(client, _desired(KEEP, MINE))
    assert report.ok and report.results[0].contested == [] and "contested" not in render_report(report)


def test_since_the_journal_a_contest_stands_while_the_rule_is_as_found(kit):
    client = kit.FakeClient({(T, S): [KEEP]})
    theirs = replace(THEIRS, created_at=_dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc))
    _other_writer(client, "add", MINE.name, lambda rules: rules.update({MINE.name: theirs}))
    journal = io.StringIO()
    desired = _desired(KEEP, MINE)
    _apply(client, desired, journal)

    since = _from_journal("journal", journal.getvalue())
    live = {(T, S): list(client.subs[(T, S)].values())}
    (contest,) = with_contests(compute_plan(desired, live), desired, live, since).contested
    assert (contest.rule, contest.found, contest.created_at) == ("team-a-big", "changed", theirs.created_at)

    client.fault = lambda *a: None
    _apply(client, desired, journal)  # sbrules writes it again; nobody interferes this time
    since = _from_journal("journal", journal.getvalue())
    live = {(T, S): list(client.subs[(T, S)].values())}
    assert with_contests(compute_plan(desired, live), desired, live, since).contested == ()
