"""Two and three `sbrules apply` processes at once on the same subscriptions, watched from outside.

Each scenario starts the emulator, writes rule files (disjoint, identical or conflicting rule sets
per run), and runs the applies as real processes at ``--max-rate 20``, from the rule files or
from plans all saved before any apply began. Two observers watch every subscription meanwhile:
one inside the emulator, called under its lock after every change (exact), and one polling
enumerate-rules over its own AMQP connection (independent of sbrules' code paths). Neither may
ever see a subscription with no rules that deliver (lock rules deliver nothing), every declared
rule must be there at the end, and each run's report must say what its journal shows it did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from reconciler.amqp.client import ManagementClient
from reconciler.emulator import Emulator
from reconciler.limits import is_lock_rule_name, is_temp_rule_name
from reconciler.model import CorrelationFilter, DesiredState, Rule, Subscription, Topic, TrueFilter

pytestmark = pytest.mark.slow

TOPIC = "orders"
SUBS = [f"s{i}" for i in range(6)]
ROOT = Path(__file__).resolve().parents[2]


def _delivering(rules) -> list[Rule]:
    return [r for r in rules if not is_lock_rule_name(r.name)]


def _initial() -> DesiredState:
    """Every subscription: $Default and an old version of rule r (so each apply creates, replaces, deletes)."""
    old = (Rule("$Default", TrueFilter()), Rule("r", CorrelationFilter(subject="old")))
    return DesiredState((Topic(TOPIC, tuple(Subscription(s, old) for s in SUBS)),))


def _rule_file(folder: Path, rules_by_sub: dict[str, dict[str, str]]) -> Path:
    """One rule file: subscription → {rule name: correlation subject}."""
    folder.mkdir(parents=True)
    lines = [f"topic: {TOPIC}", "subscriptions:"]
    for sub, rules in rules_by_sub.items():
        lines += [f"  {sub}:", "    rules:"]
        lines += [f"      - name: {name}\n        correlation: {{subject: {subject}}}" for name, subject in rules.items()]
    (folder / f"{TOPIC}.yaml").write_text("\n".join(lines) + "\n")
    return folder


def _declared(kind: str, run: int, runs: int) -> dict[str, dict[str, str]]:
    if kind == "identical":
        return {s: {"r": "new", "a": "A"} for s in SUBS}
    if kind == "conflicting":  # the same names with other filters, and a rule of each run's own
        return {s: {"r": f"run{run}", f"own{run}": f"O{run}"} for s in SUBS}
    return {s: {"r": f"run{run}", "a": "A"} for s in SUBS[run::runs]}  # disjoint subscriptions


class Observers:
    """The fewest delivering rules each subscription had: exactly (inside the emulator's lock, at
    every change) and as polled over AMQP by a client of its own."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.exact = {s: len(_delivering(emu.namespace.rules(TOPIC, s))) for s in SUBS}
        self.polled = dict(self.exact)
        self.polls = 0
        self._stop = threading.Event()
        emu.namespace.on_change(self._on_change)
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _on_change(self) -> None:
        for sub in SUBS:
            self.exact[sub] = min(self.exact[sub], len(_delivering(self.emu.namespace.rules(TOPIC, sub))))

    def _poll(self) -> None:
        with ManagementClient(self.emu.connection_string) as client:
            while not self._stop.is_set():
                for sub, result in zip(SUBS, client.list_rules_many([(TOPIC, s) for s in SUBS])):
                    assert not isinstance(result, Exception), result
                    self.polled[sub] = min(self.polled[sub], len(_delivering(result)))
                self.polls += 1

    def __enter__(self) -> "Observers":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _sbrules(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "reconciler", *args], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rule_writes(entries: list[dict], sub: str) -> list[dict]:
    """The add/remove requests a run made to a subscription's delivering rules that took effect."""
    return [e for e in entries if e.get("subscription") == sub and e.get("op") in ("add-rule", "remove-rule")
            and not is_lock_rule_name(e.get("target", "")) and e.get("outcome") == "ok"]


@pytest.mark.parametrize("mode", ["rule-files", "saved-plans"])
@pytest.mark.parametrize(("kind", "runs"), [("disjoint", 2), ("identical", 3), ("conflicting", 3), ("conflicting", 2)])
def test_concurrent_applies_never_empty_a_subscription_and_tell_the_truth(tmp_path, mode, kind, runs):
    with Emulator(_initial()) as emu:
        env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": emu.connection_string, "PYTHONPATH": str(ROOT)}
        folders = [_rule_file(tmp_path / f"run{k}", _declared(kind, k, runs)) for k in range(runs)]
        sources = [str(f) for f in folders]
        if mode == "saved-plans":  # every plan made before any apply: all but one will be stale
            for k, folder in enumerate(folders):
                out = tmp_path / f"plan{k}.json"
                assert _sbrules("plan", str(folder), "--out", str(out), env=env).wait(60) == 0
                sources[k] = str(out)
        journals = [tmp_path / f"journal{k}.jsonl" for k in range(runs)]
        with Observers(emu) as observers:
            procs = [
                _sbrules("apply", source, "--auto-approve", "--max-rate", "20", "--journal", str(journal), env=env)
                for source, journal in zip(sources, journals)
            ]
            results = [(p.wait(120), *p.communicate()) for p in procs]
        assert observers.polls > 0
        final = {s: _delivering(emu.namespace.rules(TOPIC, s)) for s in SUBS}

    for sub in SUBS:
        assert observers.exact[sub] >= 1, f"{sub} had no delivering rule at some moment"
        assert observers.polled[sub] >= 1, f"{sub} was seen with no delivering rule"
        names = {r.name for r in emu.namespace.rules(TOPIC, sub)}
        assert not any(is_lock_rule_name(n) or is_temp_rule_name(n) for n in names), names
    declared = [_declared(kind, k, runs) for k in range(runs)]
    finals = {s: {r.name: r.filter.subject for r in final[s]} for s in SUBS}
    for sub in SUBS:  # no declared rule lost: the end state is exactly one run's declaration
        wanted = [d[sub] for d in declared if sub in d]
        assert not wanted or finals[sub] in wanted, (sub, finals[sub], wanted)

    for k, (code, out, err) in enumerate(results):
        assert "Traceback" not in err, err
        entries = _journal(journals[k])
        for sub in declared[k]:
            writes = _rule_writes(entries, sub)
            line = next((x for x in out.splitlines() if x.startswith(f"{TOPIC}/{sub}:")), "")
            if "applied" in line and "already" not in line:
                assert writes, (line, sub)
            else:  # already in the planned state, or refused as stale: it wrote nothing
                assert not writes, (line, writes)
        if mode == "rule-files" or kind != "conflicting":
            assert code == 0, out + err  # under the lock, a run plans again what another changed
        else:
            assert code in (0, 1), out + err
            if code == 1:
                assert "REFUSED" in out and "stale plan" in out, out
    if mode == "saved-plans":  # plans made from one state: the first run to lock a subscription applies it
        for sub in SUBS:
            reported = [next((x for x in out.splitlines() if x.startswith(f"{TOPIC}/{sub}:")), "")
                        for _, out, _ in results]
            assert sum(": applied" in line for line in reported) == (1 if any(sub in d for d in declared) else 0), reported
