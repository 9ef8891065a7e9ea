"""Two, three and five `sbrules apply` processes at once on the same subscriptions, watched from
outside; and the attacks on the lock's lease: a writer whose wall clock is off by ±150 s or ±1 h,
a holder suspended (SIGSTOP) for longer than its lease, a holder whose renewals fail.

Each scenario starts the emulator, writes rule files (disjoint, identical or conflicting rule sets
per run), and runs the applies as real processes at ``--max-rate 20``, from the rule files or
from plans all saved before any apply began. Two observers watch every subscription meanwhile:
one inside the emulator, called under its lock after every change (exact), and one polling
enumerate-rules over its own AMQP connection (independent of sbrules' code paths). Neither may
ever see a subscription with no rules that deliver (by their own rule, not sbrules': a false
filter delivers nothing, whatever its name), every declared rule must be there at the end, and
each run's report must say what its journal shows it did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from reconciler.amqp.client import ManagementClient
from reconciler.apply import ApplyOptions, apply_plan, render_report
from reconciler.emulator import Emulator
from reconciler.limits import is_lock_rule_name, is_temp_rule_name
from reconciler.lock import Holder
from reconciler.model import CorrelationFilter, DesiredState, FalseFilter, Rule, SqlFilter, Subscription, Topic, TrueFilter
from reconciler.namespace.errors import QuotaExceededError
from reconciler.observe import observe
from reconciler.plan import compute_plan
from reconciler.rulefiles.loader import load_paths

pytestmark = pytest.mark.slow

TOPIC = "orders"
SUBS = [f"s{i}" for i in range(6)]
ROOT = Path(__file__).resolve().parents[2]


def _delivering(rules) -> list[Rule]:
    """The rules that can deliver a message: any but a false filter (``1=0``)."""
    return [r for r in rules if not isinstance(r.filter, FalseFilter)
            and not (isinstance(r.filter, SqlFilter) and r.filter.expression.replace(" ", "") == "1=0")]


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


#: Runs sbrules with its wall clock (time.time, and so every time it writes) off by argv[1] seconds,
#: but for its SAS tokens: the service judges their expiry by its own clock, so a machine an hour
#: behind could not authenticate at all (docs/locking.md).
_SKEWED = ("import sys, time; import reconciler.namespace.credentials; skew = float(sys.argv.pop(1)); "
           "wall = time.time; time.time = lambda: wall() + skew; from reconciler.cli import main; main(sys.argv[1:])")


def _sbrules(*args: str, env: dict[str, str], skew: float = 0.0) -> subprocess.Popen:
    command = [sys.executable, "-c", _SKEWED, str(skew)] if skew else [sys.executable, "-m", "reconciler"]
    return subprocess.Popen([*command, *args], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _journal(path: Path) -> list[dict]:
    """A run's journal; none when it found nothing to change (another run had converged the namespace first)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _rule_writes(entries: list[dict], sub: str) -> list[dict]:
    """The add/remove requests a run made to a subscription's delivering rules that took effect."""
    return [e for e in entries if e.get("subscription") == sub and e.get("op") in ("add-rule", "remove-rule")
            and not is_lock_rule_name(e.get("target", "")) and e.get("outcome") == "ok"]


def _sources(tmp_path: Path, kind: str, runs: int, mode: str, env: dict[str, str]) -> list[str]:
    folders = [_rule_file(tmp_path / f"run{k}", _declared(kind, k, runs)) for k in range(runs)]
    sources = [str(f) for f in folders]
    if mode == "saved-plans":  # every plan made before any apply: all but one will be stale
        for k, folder in enumerate(folders):
            out = tmp_path / f"plan{k}.json"
            assert _sbrules("plan", str(folder), "--out", str(out), env=env).wait(60) == 0
            sources[k] = str(out)
    return sources


def _apply(source: str, journal: Path, env: dict[str, str], *extra: str, skew: float = 0.0) -> subprocess.Popen:
    return _sbrules("apply", source, "--auto-approve", "--max-rate", "20", "--journal", str(journal), *extra,
                    env=env, skew=skew)


def _check(emu: Emulator, observers: Observers, kind: str, runs: int, journals: list[Path], results: list) -> None:
    """Never a subscription without a delivering rule; each ends as one run declared it; no lock or
    temporary rule left; each report says "applied" exactly where its journal shows writes."""
    assert observers.polls > 0
    for sub in SUBS:
        assert observers.exact[sub] >= 1, f"{sub} had no delivering rule at some moment"
        assert observers.polled[sub] >= 1, f"{sub} was seen with no delivering rule"
        names = {r.name for r in emu.namespace.rules(TOPIC, sub)}
        assert not any(is_lock_rule_name(n) for n in names), (sub, names, results)
    declared = [_declared(kind, k, runs) for k in range(runs)]
    finals = {s: {r.name: getattr(r.filter, "subject", None) for r in _delivering(emu.namespace.rules(TOPIC, s))}
              for s in SUBS}
    for sub in SUBS:  # no declared rule lost: the end state is exactly one run's declaration ...
        lines = [x for _, out, _ in results for x in out.splitlines() if x.startswith(f"{TOPIC}/{sub}: ")]
        if any("LOCK LOST" in x or "FAILED" in x for x in lines):
            continue  # ... unless a run stopped half-way and said so (the next apply finishes it)
        assert not any(is_temp_rule_name(r.name) for r in emu.namespace.rules(TOPIC, sub)), sub
        wanted = [d[sub] for d in declared if sub in d]
        assert not wanted or finals[sub] in wanted, (sub, finals[sub], wanted)
    for k, (_code, out, err) in enumerate(results):
        assert "Traceback" not in err, err
        entries = _journal(journals[k])
        for sub in declared[k]:
            writes = _rule_writes(entries, sub)
            line = next((x for x in out.splitlines() if x.startswith(f"{TOPIC}/{sub}:")), "")
            if ": applied" in line:
                assert writes, (line, sub)
            elif "already in the planned state" in line or "REFUSED" in line or "nothing was changed" in line:
                assert not writes, (line, writes)  # it wrote nothing


@pytest.mark.parametrize("mode", ["rule-files", "saved-plans"])
@pytest.mark.parametrize(("kind", "runs"), [("disjoint", 2), ("identical", 3), ("conflicting", 3), ("conflicting", 2),
                                            ("conflicting", 5)])
def test_concurrent_applies_never_empty_a_subscription_and_tell_the_truth(tmp_path, mode, kind, runs):
    with Emulator(_initial()) as emu:
        env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": emu.connection_string, "PYTHONPATH": str(ROOT)}
        sources = _sources(tmp_path, kind, runs, mode, env)
        journals = [tmp_path / f"journal{k}.jsonl" for k in range(runs)]
        with Observers(emu) as observers:
            procs = [_apply(source, journal, env) for source, journal in zip(sources, journals)]
            results = [(p.wait(300), *p.communicate()) for p in procs]
        _check(emu, observers, kind, runs, journals, results)

    for code, out, err in results:
        if mode == "rule-files" or kind != "conflicting":
            assert code == 0, out + err  # under the lock, a run plans again what another changed
        else:
            assert code in (0, 1), out + err
            if code == 1:
                assert "REFUSED" in out and "stale plan" in out, out
    if mode == "saved-plans":  # plans made from one state: the first run to lock a subscription applies it
        declared = [_declared(kind, k, runs) for k in range(runs)]
        for sub in SUBS:
            reported = [next((x for x in out.splitlines() if x.startswith(f"{TOPIC}/{sub}:")), "")
                        for _, out, _ in results]
            assert sum(": applied" in line for line in reported) == (1 if any(sub in d for d in declared) else 0), reported


def _first_write(journal: Path, alive: Callable[[], bool]) -> None:
    """Wait until a run has written a delivering rule (its journal says so), while it is ``alive``."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and alive():
        if journal.exists() and any(_rule_writes(_journal_lines(journal), sub) for sub in SUBS):
            return
        time.sleep(0.02)  # polling a file the other process appends to; no guess at how long it takes
    raise AssertionError("the first apply never wrote a rule")


def _journal_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.parametrize("skew", [150.0, -150.0, 3600.0, -3600.0])
def test_a_writer_whose_wall_clock_is_off_never_takes_a_live_lock(tmp_path, skew):
    """The second run's wall clock is ``skew`` seconds off while the first holds the locks."""
    kind, runs = "conflicting", 2
    with Emulator(_initial()) as emu:
        env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": emu.connection_string, "PYTHONPATH": str(ROOT)}
        sources = _sources(tmp_path, kind, runs, "rule-files", env)
        journals = [tmp_path / f"journal{k}.jsonl" for k in range(runs)]
        with Observers(emu) as observers:
            first = _apply(sources[0], journals[0], env, "--max-rate", "10")
            _first_write(journals[0], lambda: first.poll() is None)
            second = _apply(sources[1], journals[1], env, skew=skew)
            results = [(p.wait(300), *p.communicate()) for p in (first, second)]
        _check(emu, observers, kind, runs, journals, results)
    assert [code for code, _, _ in results] == [0, 0], results
    taken_over = [e for e in _journal(journals[1]) if e.get("step") == "lock:clear"]
    assert taken_over == []  # it waited for every lock to be released, never judged one expired


@pytest.mark.parametrize("mode", ["rule-files", "saved-plans"])
def test_a_holder_suspended_past_its_lease_writes_nothing_more_after_it_resumes(tmp_path, mode):
    """SIGSTOP the first apply mid-way for longer than its 4 s lease; the second takes its locks
    over after 5 s unchanged and finishes; then SIGCONT: the first must notice and stop."""
    kind, runs = "conflicting", 2
    with Emulator(_initial()) as emu:
        env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": emu.connection_string, "PYTHONPATH": str(ROOT),
               "SBRULES_LOCK_LEASE": "4"}
        sources = _sources(tmp_path, kind, runs, mode, env)
        journals = [tmp_path / f"journal{k}.jsonl" for k in range(runs)]
        with Observers(emu) as observers:
            first = _apply(sources[0], journals[0], env, "--max-rate", "5")
            _first_write(journals[0], lambda: first.poll() is None)
            first.send_signal(signal.SIGSTOP)
            try:
                second = _apply(sources[1], journals[1], env)
                second_result = (second.wait(300), *second.communicate())
            finally:
                first.send_signal(signal.SIGCONT)
            results = [(first.wait(300), *first.communicate()), second_result]
        _check(emu, observers, kind, runs, journals, results)
    code, out, _ = results[1]
    assert code == 0 or (mode == "saved-plans" and code == 1 and "stale plan" in out), results[1]
    assert any(e.get("step") == "lock:clear" for e in _journal(journals[1]))  # it did take a lock over
    out = results[0][1]
    assert "LOCK LOST" in out or "planned again" in out or "took its lock again" in out, out
    after = [e for e in _journal(journals[0]) if e.get("outcome") == "lock-lost"]
    assert after, "the resumed run never noticed that its lease had lapsed"


def test_a_holder_whose_renewals_fail_stops_before_it_can_be_taken_over(tmp_path):
    """The first apply (in this process, a 4 s lease, paced so that a subscription takes longer than
    that) has every renewal refused; the second waits, takes over after 5 s unchanged and finishes."""
    kind, runs = "conflicting", 2
    with Emulator(_initial()) as emu:
        env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": emu.connection_string, "PYTHONPATH": str(ROOT),
               "SBRULES_LOCK_LEASE": "4"}
        sources = _sources(tmp_path, kind, runs, "rule-files", env)
        journals = [tmp_path / f"journal{k}.jsonl" for k in range(runs)]
        with Observers(emu) as observers:
            with ManagementClient(emu.connection_string, max_rate=6) as client:
                writer = RenewalsRefused(client)
                holder = threading.Thread(target=writer.apply, args=(sources[0], journals[0]))
                holder.start()
                try:
                    _first_write(journals[0], holder.is_alive)
                    second = _apply(sources[1], journals[1], env)
                    second_result = (second.wait(300), *second.communicate())
                finally:
                    holder.join(300)
            results = [(int(not writer.report.ok), writer.text, ""), second_result]
        _check(emu, observers, kind, runs, journals, results)
        again = _apply(sources[1], tmp_path / "again.jsonl", env)  # what the first left half-way is finished
        assert again.wait(300) == 0, again.communicate()
        for sub in SUBS:
            assert {r.name: r.filter.subject for r in emu.namespace.rules(TOPIC, sub)} == _declared(kind, 1, runs)[sub]
    assert writer.refused and results[1][0] == 0, results
    notes = [n for r in writer.report.results for n in r.notes]
    assert any("could not be renewed" in n for n in notes), writer.text
    assert any(e.get("outcome") == "lock-problem" for e in _journal(journals[0]))


class RenewalsRefused:
    """Apply in this process through a client that refuses every lock add but the first per subscription."""

    def __init__(self, client: ManagementClient) -> None:
        self.client, self.refused, self.report, self.text = client, 0, None, ""
        self._taken: set[str] = set()

    def list_rules(self, topic, sub, *, on_attempt=None):
        return self.client.list_rules(topic, sub, on_attempt=on_attempt)

    def remove_rule(self, topic, sub, name, *, on_attempt=None):
        return self.client.remove_rule(topic, sub, name, on_attempt=on_attempt)

    def add_rule(self, topic, sub, rule, *, on_attempt=None):
        if is_lock_rule_name(rule.name) and sub in self._taken:
            self.refused += 1
            raise QuotaExceededError(f"{topic}/{sub}: refused (renewals fail in this test)", status=403)
        if is_lock_rule_name(rule.name):
            self._taken.add(sub)
        return self.client.add_rule(topic, sub, rule, on_attempt=on_attempt)

    def apply(self, source: str, journal: Path) -> None:
        state = load_paths([source])
        plan = compute_plan(state, observe(self.client, state))
        with journal.open("a") as stream:
            options = ApplyOptions(journal=stream, lock_lease=4.0, desired=state, holder=Holder.this_run("renewals fail"),
                                   parallel=2)  # 3 requests/s per subscription: a first write, then a lapse
            self.report = apply_plan(self, plan, options)
        self.text = render_report(self.report)
