"""The GitOps loop against the in-process emulator over real AMQP: plan, apply, drift, faults."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.amqp.client import ManagementClient
from reconciler.apply import ApplyOptions, apply_plan, render_report
from reconciler.demo import drifted_namespace
from reconciler.emulator import Emulator
from reconciler.model import CorrelationFilter, Rule, SqlFilter, TrueFilter
from reconciler.observe import ObserveError, managed_subscriptions, observe, observe_subscriptions
from reconciler.plan import compute_plan, is_temp_rule_name, temp_rule_name
from reconciler.rulefiles import load_paths

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.fixture(scope="module")
def desired():
    return load_paths([RULES])


def _plan(client, desired):
    return compute_plan(desired, observe(client, desired))


def test_plan_shows_every_category_and_hides_cosmetic_sql(desired):
    live, drifts = drifted_namespace(desired)
    with Emulator(live) as emu, ManagementClient(emu.connection_string) as client:
        plan = _plan(client, desired)
    actions = {(c.subscription, c.rule): c for c in plan.changes}
    kinds = {c.kind for c in plan.changes}
    assert kinds == {"create", "replace", "delete"}
    cosmetic = next(d for d in drifts if "NOT show" in d.what)
    cosmetic_rule = cosmetic.what.split("'")[1]
    assert all(c.rule != cosmetic_rule for c in plan.changes)
    retyped = [c for c in plan.changes if any("property" in r and "→" in r for r in c.reasons)]
    assert retyped and any("long 1 → int 1" in r or "long 3 → int 3" in r for r in retyped[0].reasons)
    assert any(c.rule == "$Default" and c.kind == "delete" for c in plan.changes)
    assert any(c.diff for c in plan.changes if c.kind == "replace")
    assert [s.subscription for s in plan.skipped] == ["legacy-export"]
    assert plan.summary()["unchanged"] > 0
    assert len(actions) == len(plan.changes)


def test_apply_converges_and_is_idempotent(desired):
    live, _ = drifted_namespace(desired)
    with Emulator(live) as emu, ManagementClient(emu.connection_string) as client:
        plan = _plan(client, desired)
        report = apply_plan(client, plan)
        assert report.ok, render_report(report)
        assert not _plan(client, desired).has_changes
        again = apply_plan(client, plan)
        assert again.ok and {r.status for r in again.results} <= {"already-applied", "unchanged"}
        for topic, sub in desired.subscriptions():
            names = {r.name for r in emu.namespace.rules(topic.name, sub.name)}
            if sub.managed:
                assert names == {r.name for r in sub.rules}
            else:
                assert names == {"$Default"}  # unmanaged: untouched


def test_stale_plan_is_refused(desired):
    live, _ = drifted_namespace(desired)
    with Emulator(live) as emu, ManagementClient(emu.connection_string) as client:
        plan = _plan(client, desired)
        target = plan.subscriptions[0]
        emu.namespace.add_rule(target.topic, target.subscription, Rule("out-of-band", SqlFilter("x = 1")))
        report = apply_plan(client, plan)
        stale = [r for r in report.results if r.status == "stale"]
        assert [r.plan.path for r in stale] == [target.path]
        assert "stale plan" in render_report(report)
        assert "out-of-band" in {r.name for r in emu.namespace.rules(target.topic, target.subscription)}


def test_missing_subscription_is_an_error_naming_it(desired):
    with Emulator(desired) as emu, ManagementClient(emu.connection_string) as client:
        with pytest.raises(ObserveError, match="orders/nope"):
            observe_subscriptions(client, [("orders", "billing"), ("orders", "nope")])


class Watcher:
    """Records the fewest rules each subscription ever had, checked after every change to the
    namespace, inside its lock: exact, where polling could miss a moment (and a polling loop
    starved the emulator and the client of the GIL, making the test minutes long)."""

    def __init__(self, emu, targets):
        self.emu, self.targets = emu, targets
        self.fewest = {t: len(emu.namespace.rules(*t)) for t in targets}
        emu.namespace.on_change(self._check)

    def _check(self):
        for target in self.targets:
            self.fewest[target] = min(self.fewest[target], len(self.emu.namespace.rules(*target)))


def _many_changes_state(desired):
    """A live state in which every managed subscription needs a replace, a create and a delete."""
    live, _ = drifted_namespace(desired)
    topics = []
    for topic in live.topics:
        subs = []
        for sub in topic.subscriptions:
            if sub.rules:
                first = sub.rules[0]
                swapped = first if first.name == "$Default" else replace(first, filter=CorrelationFilter(subject="x"))
                junk = Rule("junk", TrueFilter())
                subs.append(replace(sub, rules=(swapped, *sub.rules[1:-1], junk)))
            else:
                subs.append(sub)
        topics.append(replace(topic, subscriptions=tuple(subs)))
    return replace(live, topics=tuple(topics))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_apply_under_faults_converges_without_loss_or_gaps(desired, seed, caplog):
    caplog.set_level(logging.INFO, logger="reconciler.amqp")
    live = _many_changes_state(desired)
    targets = managed_subscriptions(desired)
    with Emulator(live) as emu:
        watcher = Watcher(emu, targets)
        emu.faults.update(seed=seed, busy_fraction=0.25, close_after_ops=7)
        with ManagementClient(emu.connection_string) as client:
            for _ in range(6):
                try:
                    plan = _plan(client, desired)
                except ObserveError:
                    continue
                if not plan.has_changes:
                    break
                apply_plan(client, plan, ApplyOptions(parallel=4))
            emu.faults.clear()
            final = _plan(client, desired)
        assert any("retry" in r.getMessage() for r in caplog.records), "no fault was injected"
        assert not final.has_changes, [c.rule for c in final.changes]
        for target in targets:
            names = {r.name for r in emu.namespace.rules(*target)}
            assert not any(is_temp_rule_name(n) for n in names)
            assert watcher.fewest[target] >= 1, f"{target} was empty at some moment"


@pytest.mark.parametrize("crashed_after", ["add-temporary", "remove-old"])
def test_rerun_after_a_crash_mid_replace_converges(desired, crashed_after):
    """A gapless replace interrupted after its first or second request is finished by the next apply."""
    declared = next(r for r in desired.topic("orders").subscription("billing").rules if r.name == "refunds")
    old = replace(declared, filter=CorrelationFilter(subject="old-refund"))
    with Emulator(desired) as emu, ManagementClient(emu.connection_string) as client:
        ns = emu.namespace
        ns.remove_rule("orders", "billing", "refunds")
        ns.add_rule("orders", "billing", old)
        ns.add_rule("orders", "billing", replace(declared, name=temp_rule_name("refunds")))
        if crashed_after == "remove-old":
            ns.remove_rule("orders", "billing", "refunds")
        plan = _plan(client, desired)
        expected = {"add-temporary": [("replace", "refunds")], "remove-old": [("create", "refunds")]}[crashed_after]
        assert [(c.kind, c.rule) for c in plan.changes] == expected + [("delete", "refunds.sbrules-tmp")]
        report = apply_plan(client, plan)
        assert report.ok, render_report(report)
        assert not _plan(client, desired).has_changes
        assert declared in ns.rules("orders", "billing")
