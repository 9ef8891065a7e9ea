"""The commands as a user runs them: exit codes, formats, export round trip, demo, no secrets anywhere."""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path

import pytest

from reconciler.demo import drifted_namespace
from reconciler.emulator import Emulator
from reconciler.rulefiles import load_paths

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.fixture
def drifted():
    live, _ = drifted_namespace(load_paths([RULES]))
    with Emulator(live, key="test-" + secrets.token_urlsafe(24)) as emu:
        yield emu


def secret_of(connection_string: str) -> str:
    return re.search(r"SharedAccessKey=([^;]+)", connection_string).group(1)


def test_plan_apply_drift_exit_codes(drifted, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    rules = str(RULES)
    code, out, _ = run_cli("plan", rules)
    assert code == 0 and "Plan:" in out
    code, _, _ = run_cli("plan", rules, "--detailed-exitcode")
    assert code == 2
    code, out, _ = run_cli("drift", rules)
    assert code == 2 and "added out of band" in out
    code, out, _ = run_cli("drift", rules, "--format", "json")
    assert code == 2 and json.loads(out)["in_sync"] is False

    code, _, err = run_cli("apply", rules)  # stdin is not a terminal under pytest
    assert code == 64 and "--auto-approve" in err

    plan_file = tmp_path / "plan.json"
    code, out, _ = run_cli("plan", rules, "--out", str(plan_file), "--format", "markdown")
    assert code == 0 and out.startswith("### sbrules plan") and plan_file.exists()
    journal = tmp_path / "journal.jsonl"
    code, out, _ = run_cli("apply", str(plan_file), "--journal", str(journal), "--parallel", "2")
    assert code == 0, out
    assert "Apply complete" in out
    *entries, totals = [json.loads(line) for line in journal.read_text().splitlines()]
    assert entries and all("outcome" in e for e in entries)
    assert totals["event"] == "pacing" and totals["requests"] > 0  # the pacer's totals end it

    code, out, _ = run_cli("drift", rules)
    assert code == 0 and "In sync" in out
    code, out, _ = run_cli("plan", rules, "--detailed-exitcode")
    assert code == 0 and "No changes." in out
    code, out, _ = run_cli("apply", rules)  # nothing to do: no confirmation needed
    assert code == 0


def test_max_rate_paces_apply(drifted, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    journal = tmp_path / "j.jsonl"
    started = time.monotonic()
    code, out, _ = run_cli("apply", str(RULES), "--auto-approve", "--max-rate", "20", "--journal", str(journal))
    elapsed = time.monotonic() - started
    assert code == 0, out
    requests = sum(1 for line in journal.read_text().splitlines() if "op" in json.loads(line))
    assert requests >= 10
    assert elapsed >= (requests - 1) / 20


def test_export_then_plan_is_empty(drifted, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    subs = ["--subscription", "billing", "--subscription", "shipping"]
    code, _, err = run_cli("export", "--topic", "orders", *subs, "--out", str(tmp_path))
    assert code == 0 and "orders.yaml" in err
    text = (tmp_path / "orders.yaml").read_text()
    assert "long: 1" in text  # typed values explicit
    code, out, _ = run_cli("validate", str(tmp_path))
    assert code == 0, out
    code, out, _ = run_cli("plan", str(tmp_path), "--detailed-exitcode")
    assert code == 0 and "No changes." in out, out
    code, out, _ = run_cli("export", "--topic", "orders")  # every subscription, found over REST
    assert code == 0 and "  billing:" in out and "  shipping:" in out, out


def test_errors_exit_1_and_name_the_problem(run_cli, tmp_path):
    declared = load_paths([RULES])
    with Emulator() as empty:
        code, _, err = run_cli("plan", str(RULES), "--connection-string", empty.connection_string)
        assert code == 1 and "topic 'orders' does not exist" in err and "orders.yaml:" in err
        assert secret_of(empty.connection_string) not in err
        wrong = empty.connection_string.replace(secret_of(empty.connection_string), "wrong-key-" + secrets.token_hex(8))
        code, _, err = run_cli("drift", str(RULES), "--connection-string", wrong)
        assert code == 1 and err.strip()
        assert secret_of(wrong) not in err and "SharedAccessKey=" not in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format_version": 7}')
    with Emulator(declared) as emu:
        code, _, err = run_cli("apply", str(bad), "--connection-string", emu.connection_string)
        assert code == 1 and "format_version" in err


def test_no_secret_in_any_output(drifted, run_cli, tmp_path, monkeypatch):
    secret = secret_of(drifted.connection_string)
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    outputs = []
    for fmt in ("text", "json", "markdown"):
        outputs.append(run_cli("plan", str(RULES), "--format", fmt, "--out", str(tmp_path / "p.json")))
    outputs.append(run_cli("drift", str(RULES), "--format", "json"))
    journal = tmp_path / "j.jsonl"
    outputs.append(run_cli("apply", str(tmp_path / "p.json"), "--journal", str(journal)))
    outputs.append(run_cli("export", "--topic", "orders", "--subscription", "nope"))
    assert outputs[-1][0] == 1 and "orders/nope" in outputs[-1][2]
    everything = "\n".join(o + e for _, o, e in outputs) + (tmp_path / "p.json").read_text() + journal.read_text()
    assert secret not in everything
    assert "SharedAccessKey" not in everything


def test_demo_closes_the_loop(run_cli):
    code, text, _ = run_cli("demo", "--no-traffic")
    assert code == 0, text
    assert "0. sbrules test" in text and "7 passed, 0 failed, 0 skipped" in text
    assert "1. sbrules plan" in text and "Apply complete" in text and "In sync" in text
    assert "rightly leaves it alone" in text


def test_demo_with_an_environment_gives_its_routing_tests_the_environments_variables(run_cli, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "sbrules.yaml").write_text("environments:\n  dev:\n    vars: {region: eu-west-dev}\n")
    (rules / "orders.yaml").write_text(
        "topic: orders\nsubscriptions:\n  warehouse-${region}:\n    rules:\n      - {name: here, sql: 'region = ${region}'}\n"
    )
    (rules / "orders.test.yaml").write_text(
        "topic: orders\ncases:\n  - name: a local order reaches the local warehouse\n"
        "    given: {user: {region: '${region}'}}\n    expect: {only: ['warehouse-${region}']}\n"
    )
    code, text, _ = run_cli("demo", "--rules", rules, "--env", "dev", "--no-traffic")
    assert code == 0, text
    assert "1 passed, 0 failed" in text and "The loop is closed" in text


def test_journal_records_every_attempt_under_503s(drifted, run_cli, tmp_path, monkeypatch):
    """With a fifth of requests answered 503 (server busy), the journal has the retried attempts too."""
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    drifted.faults.update(busy_fraction=0.2, seed=5)
    journal = tmp_path / "j.jsonl"
    code, out, err = run_cli("apply", str(RULES), "--auto-approve", "--journal", str(journal))
    assert code == 0, out + err
    attempts = [e for e in map(json.loads, journal.read_text().splitlines()) if "attempt" in e]
    retried = [e for e in attempts if e["outcome"] == "retry"]
    assert retried and all(e["status"] == 503 for e in retried)
    for entry in retried:  # each retried request is journalled again with its next attempt
        later = [e for e in attempts if e["op"] == entry["op"] and e.get("target") == entry.get("target")
                 and e["subscription"] == entry["subscription"] and e["attempt"] == entry["attempt"] + 1]
        assert later, entry


@pytest.mark.parametrize("strategy, shown", [("gapless", 1), ("direct", 0)])
def test_the_action_replacement_warning_is_said_once_and_only_when_it_applies(run_cli, tmp_path, strategy, shown):
    from reconciler import model

    live = model.DesiredState((model.Topic("orders", (model.Subscription("billing", (
        model.Rule("tag", model.SqlFilter("a = 1"), model.SqlRuleAction("SET b = 1")),)),)),))
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(
        "topic: orders\nsubscriptions:\n  billing:\n    rules:\n      - {name: tag, sql: a = 2, action: SET b = 1}\n")
    with Emulator(live) as emu:
        for source in ("files", "saved"):
            args = [rules] if source == "files" else [tmp_path / f"plan-{strategy}.json"]
            if source == "saved":
                assert run_cli("plan", rules, "--out", args[0], "--connection-string", emu.connection_string)[0] == 0
            code, out, err = run_cli("apply", *args, "--auto-approve", "--replace-strategy", strategy,
                                     "--connection-string", emu.connection_string)
            assert code == 0, out + err
            assert (out + err).count("delivered twice") == shown, (source, out + err)
            emu.namespace.remove_rule("orders", "billing", "tag")
            emu.namespace.add_rule("orders", "billing", live.topics[0].subscriptions[0].rules[0])


def test_an_out_path_that_cannot_be_written_is_one_usage_line(drifted, run_cli, tmp_path, monkeypatch, check):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    (tmp_path / "a-file").write_text("not a directory")
    code, out, err = run_cli("plan", str(RULES), "--out", str(tmp_path / "a-file" / "plan.json"))
    check.one_error(code, out, err, 64, r"cannot write the plan to .*plan\.json: (Not a directory|File exists)")


def test_apply_refuses_a_saved_plan_and_rule_paths_together(drifted, run_cli, tmp_path, monkeypatch, check):
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", drifted.connection_string)
    plan_file = tmp_path / "plan.json"
    assert run_cli("plan", str(RULES), "--out", str(plan_file))[0] == 0
    code, out, err = run_cli("apply", str(RULES), str(plan_file), "--auto-approve")
    check.one_error(code, out, err, 64, r"give either a saved plan .*plan\.json.* or rule paths to plan from, not both")
    assert "unknown key" not in out + err
