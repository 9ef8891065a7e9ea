"""``sbrules emulator --state`` keeps every write it acknowledged: SIGKILL it while an apply runs
against it, restart it on the same state file, and every rule write apply's journal records as
answered ok (rules, temporary rules and locks, added or removed) is as that answer said."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from reconciler.amqp.client import ManagementClient
from tests.processes import end, spawn

from .process import EmulatorProcess, start

TOPIC = "durable"
SUBSCRIPTIONS = 6
RULES = 12
WAIT = 60.0


def rule_set(directory: Path, version: int) -> Path:
    """Rules that differ from the other version by additions, removals and replacements."""
    subs = {}
    for s in range(SUBSCRIPTIONS):
        rules = [{"name": f"v{version}-{r}", "sql": f"n = {r}"} for r in range(RULES)]
        rules += [{"name": f"shared-{r}", "sql": f"n > {r + version * 100}"} for r in range(RULES // 2)]
        subs[f"s{s}"] = {"rules": rules}
    path = directory / f"rules-{version}.yaml"
    path.write_text(yaml.safe_dump({"topic": TOPIC, "subscriptions": subs}))
    return path


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {WAIT:g}s")
        time.sleep(0.005)


def acknowledged(journal: Path) -> dict[tuple[str, str], bool]:
    """(subscription, rule) → present, per the last write of it that was answered ok; a rule with a
    later attempt that was not (it may or may not have taken effect) is left out."""
    expected: dict[tuple[str, str], bool | None] = {}
    for line in journal.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("op") not in ("add-rule", "remove-rule") or "target" not in entry:
            continue
        key = (entry["subscription"], entry["target"])
        expected[key] = (entry["op"] == "add-rule") if entry["outcome"] == "ok" else None
    return {key: present for key, present in expected.items() if present is not None}


def ok_writes(journal: Path) -> int:
    if not journal.exists():
        return 0
    return sum('"outcome": "ok"' in line and '-rule"' in line for line in journal.read_text().splitlines())


@pytest.mark.slow
def test_sigkill_mid_apply_never_loses_an_acknowledged_write(tmp_path):
    state, log = tmp_path / "state.json", tmp_path / "emulator.log"
    versions = [rule_set(tmp_path, 0), rule_set(tmp_path, 1)]
    emu: EmulatorProcess = start(log, "--state", str(state), "--rules", str(versions[0]))
    checked = 0
    try:
        for round_ in range(1, 5):
            journal = tmp_path / f"journal-{round_}.jsonl"
            apply = spawn(
                [sys.executable, "-m", "reconciler", "apply", str(versions[round_ % 2]), "--auto-approve",
                 "--journal", str(journal), "--parallel", "3", "--timeout", "3",
                 "--connection-string", emu.connection_string],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            try:
                wanted = 7 * round_
                wait_until(lambda j=journal, a=apply, n=wanted: ok_writes(j) >= n or a.poll() is not None,
                           f"rule writes in round {round_}")
                emu.kill()
                apply.wait(WAIT)
            finally:
                end(apply, signal.SIGKILL)
            emu = start(log, "--state", str(state))
            expected = acknowledged(journal)
            with ManagementClient(emu.connection_string, timeout=10) as client:
                for s in range(SUBSCRIPTIONS):
                    names = {r.name for r in client.list_rules(TOPIC, f"s{s}")}
                    for (sub, rule), present in expected.items():
                        if sub == f"s{s}":
                            assert (rule in names) == present, (round_, sub, rule, present, sorted(names))
                            checked += 1
            unlock = [sys.executable, "-m", "reconciler", "unlock", "--all", "--yes",
                      "--connection-string", emu.connection_string]
            subprocess.run(unlock, check=True, capture_output=True, timeout=WAIT)  # the killed run's locks
    finally:
        emu.stop()
    # 70 acknowledged writes at least were journalled (7, 14, 21, 28); a rule written twice (a
    # temporary rule added and removed) is checked once, so fewer rules than writes
    assert checked >= 20, checked
