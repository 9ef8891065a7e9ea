"""The apply lock and unanswered changes over real AMQP: the emulator drops the connection after
carrying out a request (or before), a lock held by someone else, and `sbrules unlock`."""

from __future__ import annotations

import io
import json

import pytest

from reconciler.amqp.client import ManagementClient
from reconciler.apply import ApplyOptions, apply_plan, render_report
from reconciler.emulator import Emulator
from reconciler.lock import Holder, lock_rule
from reconciler.model import CorrelationFilter, DesiredState, Rule, Subscription, Topic, TrueFilter
from reconciler.namespace.retry import RetryPolicy
from reconciler.observe import observe
from reconciler.plan import compute_plan

A, B = Rule("a", CorrelationFilter(subject="A")), Rule("b", CorrelationFilter(subject="B"))
DECLARED = DesiredState((Topic("t", (Subscription("s", (A, B)),)),))
LIVE = DesiredState((Topic("t", (Subscription("s", None),)),))  # $Default only
OTHER = Holder("pipeline 42", "other-run")


@pytest.mark.parametrize(
    ("faults", "status", "found", "rules"),
    [
        ({"drop_after_applying": ["add-rule"]}, "applied", "applied", {"a", "b"}),
        ({"drop_before_applying": ["add-rule"]}, "failed", "not applied", {"$Default", "a"}),
        ({"drop_after_applying": ["add-rule"], "drop_before_applying": ["enumerate-rules"]}, "unknown", "unknown",
         {"$Default", "a", "b"}),
    ],
    ids=["landed", "lost", "unreadable"],
)
def test_a_change_whose_answer_never_came_is_reported_from_a_re_read(faults, status, found, rules):
    with Emulator(LIVE) as emu, ManagementClient(emu.connection_string, retry=RetryPolicy(retries=1, backoff=0.01)) as client:
        plan = compute_plan(DECLARED, observe(client, DECLARED))
        journal = io.StringIO()
        # Rule a is created normally; from then on the connection drops around every add-rule.
        options = ApplyOptions(journal=journal, on_change=lambda change: emu.faults.update(**faults))
        report = apply_plan(client, plan, options)
        emu.faults.clear()
        result = report.results[0]
        assert result.status == status, render_report(report)
        assert {r.name for r in emu.namespace.rules("t", "s")} == rules  # and no lock left behind
    entries = [json.loads(line) for line in journal.getvalue().splitlines()]
    reread = [e for e in entries if e.get("outcome") == "re-read"]
    assert [(e["target"], e["found"]) for e in reread] == [("b", found)]
    text = render_report(report)
    if status == "unknown":
        assert "? UNKNOWN: create rule 'b' (unknown: run `sbrules plan`)" in text
        assert "NOT applied: create rule 'b'" not in text
    elif status == "failed":
        assert "re-read: not applied" in text and "NOT applied: create rule 'b'" in text


@pytest.fixture
def locked(monkeypatch):
    """The declared rules in place, and another run's lock on t/s (a lease of ten minutes)."""
    live = DesiredState((Topic("t", (Subscription("s", (A, Rule("$Default", TrueFilter()))),)),))
    with Emulator(live) as emu:
        emu.namespace.add_rule("t", "s", lock_rule(3, OTHER, 600.0))
        monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", emu.connection_string)
        yield emu


def _rules(tmp_path, *names):
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    body = "".join(f"      - name: {n}\n        correlation: {{subject: {n.upper()}}}\n" for n in names)
    (folder / "t.yaml").write_text(f"topic: t\nsubscriptions:\n  s:\n    rules:\n{body}")
    return str(folder)


def test_a_held_lock_is_a_note_in_plan_drift_and_export_and_apply_reports_it_locked(locked, run_cli, tmp_path, check):
    rules = _rules(tmp_path, "a")  # $Default is live, not declared: one change
    code, out, _ = run_cli("plan", rules, "--detailed-exitcode")
    assert code == 2 and "note: t/s: locked by pipeline 42, until about" in out and "sbrules-lock" not in out.split("note:")[0]
    code, out, _ = run_cli("drift", rules, "--format", "json")
    doc = json.loads(out)
    assert [d["rule"] for d in doc["drift"]] == ["$Default"]  # the lock rule is not drift
    assert any("locked by pipeline 42" in n for n in doc["notes"])
    code, out, err = run_cli("export", "--topic", "t")
    assert code == 0 and "sbrules-lock" not in out and "left out 'sbrules-lock.3'" in err

    code, out, err = run_cli("apply", rules, "--auto-approve", "--lock-timeout", "0")
    assert code == 1 and "t/s: LOCKED by pipeline 42 (`sbrules unlock t/s` if that run is gone); nothing was changed" in out, out + err
    assert "t/s: locked by pipeline 42 (sbrules-lock.3); waiting up to 0s" not in err  # no wait, no line
    assert "Traceback" not in err
    assert "$Default" in {r.name for r in locked.namespace.rules("t", "s")}

    code, out, err = run_cli("unlock", "t/s")  # stdin is not a terminal: refused, nothing removed
    check.one_error(code, out, err, 64, "Pass --yes")
    assert "t/s: locked by pipeline 42, until about" in out and "(sbrules-lock.3, lease 600s)" in out
    assert "If a holder above is still running" in out
    code, out, _ = run_cli("unlock", "t/s", "--yes")
    assert code == 0 and "removed t/s sbrules-lock.3" in out
    code, out, _ = run_cli("unlock", "--all", "--yes")
    assert code == 0 and "No locks in 1 subscription(s)." in out
    journal = tmp_path / "journal.jsonl"
    code, out, err = run_cli("apply", rules, "--auto-approve", "--lock-timeout", "0", "--journal", str(journal),
                             "--lock-holder", "https://deployer:hunter2@ci.example/runs/7?token=abc123")
    assert code == 0 and "Apply complete" in out, out + err
    holders = {json.loads(line).get("holder") for line in journal.read_text().splitlines()} - {None}
    assert holders == {"https://<redacted>@ci.example/runs/7?token=<redacted>"}
    assert {r.name for r in locked.namespace.rules("t", "s")} == {"a"}


def test_unlock_names_what_it_needs(run_cli, check):
    with Emulator(LIVE) as emu:
        code, out, err = run_cli("unlock", "--connection-string", emu.connection_string)
        check.one_error(code, out, err, 64, "TOPIC/SUBSCRIPTION")
        code, out, err = run_cli("unlock", "t/nope", "--yes", "--connection-string", emu.connection_string)
        check.one_error(code, out, err, 1, "t/nope")


def test_a_waiting_apply_says_once_who_holds_the_lock_and_how_long_it_waits(locked, run_cli, tmp_path):
    code, out, err = run_cli("apply", _rules(tmp_path, "a"), "--auto-approve", "--lock-timeout", "1")
    assert code == 1
    waiting = [line for line in err.splitlines() if "waiting up to" in line]
    assert waiting == ["t/s: locked by pipeline 42 (sbrules-lock.3); waiting up to 1s, taken over if it stays unchanged "
                       "for 750s more; `sbrules unlock t/s` removes it if its run is gone"], err


def test_rules_that_only_look_like_locks_crash_nothing(run_cli, tmp_path, monkeypatch):
    """A hand-made `sbrules-lock.²` and a delivering `sbrules-lock.1`: ordinary rules everywhere."""
    live = DesiredState((Topic("t", (Subscription("s", (A, Rule("sbrules-lock.²", TrueFilter()),
                                                          Rule("sbrules-lock.1", TrueFilter()))),)),))
    with Emulator(live) as emu:
        monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", emu.connection_string)
        rules = _rules(tmp_path, "a")
        code, out, err = run_cli("plan", rules, "--detailed-exitcode")
        assert code == 2 and "sbrules-lock.²" in out and "sbrules-lock.1" in out, out + err
        assert "looks like an sbrules lock but is not one" in out, out
        code, out, err = run_cli("drift", rules, "--format", "json")
        assert code == 2 and {d["rule"] for d in json.loads(out)["drift"]} == {"sbrules-lock.²", "sbrules-lock.1"}
        code, out, err = run_cli("export", "--topic", "t")
        assert code == 0 and "sbrules-lock.²" in out and "sbrules-lock.1" in out and "looks like an sbrules lock" in err
        code, out, err = run_cli("unlock", "--all", "--yes")
        assert code == 0 and "No locks in 1 subscription(s)." in out, out + err
        code, out, err = run_cli("apply", rules, "--auto-approve", "--lock-timeout", "0")
        assert code == 0 and "Traceback" not in err, out + err
        assert {r.name for r in emu.namespace.rules("t", "s")} == {"a"}
