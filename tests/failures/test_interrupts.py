"""Ctrl-C (SIGINT to a real `sbrules` process): apply finishes what is in flight and reports, or
stops at once on a second Ctrl-C; sample keeps what it peeked; exit 130 and no traceback."""

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

import pyarrow.parquet as pq
import pytest

from reconciler.emulator import Emulator
from reconciler.model import Message, TypedValue
from reconciler.plan import TEMP_SUFFIX
from reconciler.rulefiles import load_paths
from tests import processes

#: The declared rules: every subscription gets a changed rule, so the plan replaces one in each.
DESIRED = """\
topic: orders
subscriptions:
{subscriptions}
"""
#: What the namespace has before: the same names with other filters.
LIVE = """\
topic: orders
subscriptions:
{subscriptions}
"""
SUBSCRIPTIONS = [f"sub-{i}" for i in range(4)]
WAIT = 120.0  # the longest any step may take on a loaded machine before the test gives up


def rule_file(path: Path, template: str, sql: str) -> Path:
    subscriptions = "\n".join(
        f"  {name}:\n    rules:\n      - {{name: main, sql: \"{sql.format(i=i)}\"}}\n      - {{name: extra, sql: \"n > {i}\"}}"
        for i, name in enumerate(SUBSCRIPTIONS)
    )
    path.write_text(template.format(subscriptions=subscriptions))
    return path


def interruptible() -> None:
    """In the child before it runs: Ctrl-C as a terminal delivers it. A test runner started in the
    background (``nohup … &``) ignores SIGINT, its children inherit that, and Python keeps it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sbrules(*args: object) -> subprocess.Popen:
    """A real `sbrules` process whose Ctrl-C the test sends."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return processes.spawn(
        [sys.executable, "-m", "reconciler", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=interruptible,
    )


def wait_until(condition: Callable[[], bool], process: subprocess.Popen, what: str) -> None:
    """Wait for what the process signals (a journal line, a request the emulator sees)."""
    deadline = time.monotonic() + WAIT
    while not condition():
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"sbrules exited ({process.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no {what} within {WAIT:g}s")
        time.sleep(0.01)


def read_line_with(stream, needle: str) -> str:
    """The first line of ``stream`` that holds ``needle`` (blocks until the process prints it)."""
    seen = []
    for line in stream:
        seen.append(line)
        if needle in line:
            return line
    pytest.fail(f"{needle!r} never printed; stderr was:\n{''.join(seen)}")


def assert_no_traceback(out: str, err: str) -> None:
    assert "Traceback" not in out + err, err


@pytest.fixture
def namespace(tmp_path, run_cli):
    """An emulator whose rules differ from the declared ones, a saved plan to converge it, and a
    journal path; responses are slowed so that Ctrl-C lands while requests are in flight."""
    live = rule_file(tmp_path / "live.yaml", LIVE, "n = {i}")
    desired = rule_file(tmp_path / "rules.yaml", DESIRED, "n = {i} OR legacy = {i}")
    with Emulator(load_paths([live])) as emu:
        code, out, err = run_cli("plan", desired, "--out", tmp_path / "plan.json", "--connection-string", emu.connection_string)
        assert code == 0, err
        emu.faults.update(latency=1.0)
        yield emu, desired, tmp_path / "plan.json", tmp_path / "journal.jsonl"


def journal_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def start_apply(emu, plan: Path, journal: Path) -> subprocess.Popen:
    return sbrules("apply", plan, "--parallel", "1", "--journal", journal, "--connection-string", emu.connection_string)


def first_request_answered(journal: Path) -> Callable[[], bool]:
    """A first add-rule of a change answered (not the add of the subscription's lock)."""
    return lambda: any(e.get("op") == "add-rule" and not e.get("step", "").startswith("lock:")
                       for e in journal_lines(journal))


def test_first_ctrl_c_finishes_in_flight_changes_and_reports(namespace, run_cli):
    emu, desired, plan, journal = namespace
    process = start_apply(emu, plan, journal)
    wait_until(first_request_answered(journal), process, "a first add-rule answered")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=WAIT)
    assert process.returncode == 130, (out, err)
    assert_no_traceback(out, err)
    assert "finishing the requests in flight" in err
    # The usual report: what was applied, and what was not, per subscription.
    assert "applied 1 change(s)" in out or "INTERRUPTED after 1 change(s)" in out, out
    assert "NOT applied" in out and "Apply interrupted" in out, out
    # The change in flight ran to its end: no temporary rule is left anywhere.
    live = {name: [r.name for r in emu.namespace.rules("orders", name)] for name in SUBSCRIPTIONS}
    assert not any(rule.endswith(TEMP_SUFFIX) for rules in live.values() for rule in rules), live
    # What was not applied is still to do: the next apply converges.
    emu.faults.update(latency=0.0)
    code, out, err = run_cli("apply", desired, "--auto-approve", "--connection-string", emu.connection_string)
    assert code == 0, err
    code, out, err = run_cli("plan", desired, "--detailed-exitcode", "--connection-string", emu.connection_string)
    assert code == 0, out


def test_second_ctrl_c_stops_at_once_and_says_the_next_run_cleans_up(namespace, run_cli):
    emu, desired, plan, journal = namespace
    # The change in flight at the first Ctrl-C has three requests to go: seconds, for the second to land in.
    emu.faults.update(latency=1.5)
    process = start_apply(emu, plan, journal)
    wait_until(first_request_answered(journal), process, "a first add-rule answered")
    process.send_signal(signal.SIGINT)
    read_line_with(process.stderr, "finishing the requests in flight")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=WAIT)
    assert process.returncode == 130, (out, err)
    assert_no_traceback(out, err)
    assert "stopped at once" in err and "the next `sbrules plan` or `sbrules apply` removes it" in err, (out, err)
    assert "stay locked until another apply takes their locks over, or `sbrules unlock --all`" in err, err
    assert "Apply" not in out  # no report: it stopped before finishing
    emu.faults.update(latency=0.0)
    code, out, err = run_cli("unlock", "--all", "--yes", "--connection-string", emu.connection_string)
    assert code == 0, err  # like a killed run, it may have left the lock of the subscription it was writing
    code, out, err = run_cli("apply", desired, "--auto-approve", "--connection-string", emu.connection_string)
    assert code == 0, err
    live = [r.name for name in SUBSCRIPTIONS for r in emu.namespace.rules("orders", name)]
    assert not any(name.endswith(TEMP_SUFFIX) for name in live), live


def test_ctrl_c_during_sample_keeps_what_was_peeked(tmp_path, run_cli):
    live = rule_file(tmp_path / "live.yaml", LIVE, "1 = 1")
    with Emulator(load_paths([live])) as emu:
        emu.publish("orders", [Message(sys={"MessageId": TypedValue.infer(f"m{i}")}, user={"n": TypedValue.infer(i)})
                               for i in range(400)])
        peeks = threading.Semaphore(0)
        serve = emu.broker.peek

        def counted(*args, **kwargs):
            peeks.release()
            return serve(*args, **kwargs)

        emu.broker.peek = counted  # the emulator tells the test each peek it serves
        emu.faults.update(latency=0.2)
        dataset = tmp_path / "sample"
        args = ("sample", "--topic", "orders", "--subscription", "sub-0", "--out", dataset, "--page-size", "20",
                "--format", "json", "--connection-string", emu.connection_string)
        process = sbrules(*args)
        for _ in range(4):  # a few pages in, mid-run
            assert peeks.acquire(timeout=WAIT)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=WAIT)
        assert process.returncode == 130, (out, err)
        assert_no_traceback(out, err)
        stats = json.loads(out)
        assert stats["interrupted"] is True and 0 < stats["written"] < 400, stats
        assert "interrupted" in err and "stored" in err
        # The state file agrees with the Parquet files: every message up to the recorded position is stored.
        rows = pq.read_table(dataset, columns=["sequence_number"]).column("sequence_number").to_pylist()
        position = json.loads((dataset / "_sbrules_state.json").read_text())["positions"]["orders/sub-0"]["0"]
        assert len(rows) == stats["written"] and set(range(min(rows), position + 1)) <= set(rows) and position <= max(rows)
        # A re-run continues from there and ends with every message stored once.
        emu.faults.update(latency=0.0)
        code, out, err = run_cli(*args)
        assert code == 0, err
        rows = pq.read_table(dataset, columns=["sequence_number"]).column("sequence_number").to_pylist()
        assert sorted(rows) == sorted(set(rows)) and len(rows) == 400
