"""apply and sample against a throttled (Standard) namespace: the work completes, nothing is lost or
repeated, and the journal shows the throttling and the waits.

The namespace here has fewer credits than sbrules is allowed to spend, so the service, not the
budget, is the limit and throttling is certain; its wait hint is short so the tests stay quick.
Nothing here is timed: the outcome is asserted, whatever this machine's speed.
"""

from __future__ import annotations

import json
import logging
import os
import pty
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from reconciler import model
from reconciler.emulator import Emulator, Faults

CREDITS = 300
WAIT = 0.2


def namespace(subscriptions: int) -> model.DesiredState:
    subs = tuple(model.Subscription(f"s{i:02d}", (model.Rule("keep", model.TrueFilter()),)) for i in range(subscriptions))
    return model.DesiredState((model.Topic("orders", (*subs, model.Subscription("audit"))),))


@pytest.fixture
def standard():
    faults = Faults(credits_per_second=CREDITS, throttled_wait_seconds=WAIT)
    with Emulator(namespace(8), faults=faults) as emu:
        yield emu


def test_apply_of_many_changes_under_throttling_fails_none_and_journals_the_waits(standard, run_cli, tmp_path):
    rules = {
        "topic": "orders",
        "subscriptions": {
            f"s{i:02d}": {"rules": [{"name": "keep", "sql": "1=1"}] + [
                {"name": f"r{j}", "sql": f"n = {j}"} for j in range(8)
            ]}
            for i in range(8)
        },
    }
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "orders.yaml").write_text(yaml.safe_dump(rules))
    journal = tmp_path / "journal.jsonl"
    code, out, err = run_cli(
        "apply", tmp_path / "rules", "--auto-approve", "--journal", journal, "--max-credits", 10 * CREDITS,
        "--connection-string", standard.connection_string,
    )
    assert code == 0, out + err
    assert "Apply complete: 64 change(s) applied." in out
    assert all(len(standard.namespace.rules("orders", f"s{i:02d}")) == 9 for i in range(8))

    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    throttled = [e for e in entries if "op" in e and e.get("throttled")]
    assert throttled and all(e["outcome"] == "retry" and e["wait_hint_s"] == WAIT for e in throttled)
    assert all(e["retry_in_s"] >= WAIT for e in throttled)
    assert not [e for e in entries if e.get("outcome") == "error"]
    pacing = entries[-1]
    assert pacing["event"] == "pacing" and pacing["throttled"] >= len(throttled) and pacing["held_s"] > 0
    assert standard.credits.stats().throttled == pacing["throttled"]  # planning's reads included: one pacer


def test_sample_under_throttling_loses_and_repeats_nothing(standard, run_cli, tmp_path):
    messages = [model.Message(sys={"MessageId": model.TypedValue(model.ValueType.STRING, f"m{i}")}, body=b"x")
                for i in range(1200)]
    standard.publish("orders", messages)
    out = tmp_path / "sample"
    code, stdout, err = run_cli(
        "sample", "--topic", "orders", "--subscription", "audit", "--out", out, "--format", "json",
        "--max-credits", 10 * CREDITS, "--connection-string", standard.connection_string,
    )
    assert code == 0, err
    stats = json.loads(stdout)["subscriptions"][0]
    assert (stats["peeked"], stats["written"], stats["duplicates"]) == (1200, 1200, 0)
    ids = [r["message_id"] for r in pq.read_table(out).to_pylist()]
    assert sorted(ids) == sorted(f"m{i}" for i in range(1200))
    assert standard.credits.stats().throttled > 0


def _tiers(caplog: pytest.LogCaptureFixture) -> list[str]:
    tiers = [r.getMessage() for r in caplog.records if r.name == "reconciler.app" and "tier" in r.getMessage()]
    caplog.clear()
    return tiers


def test_the_default_budget_holds_on_standard_and_is_dropped_on_premium(standard, run_cli, tmp_path, caplog):
    # The tier is read on a thread of its own; the command waits for it before it returns, so its
    # verdict is logged within every run, and no probe outlives its command.
    caplog.set_level(logging.DEBUG, logger="reconciler.app")
    args = ("sample", "--topic", "orders", "--subscription", "audit", "--format", "json")
    code, _, err = run_cli(*args, "--out", tmp_path / "standard", "--connection-string", standard.connection_string)
    assert code == 0, err
    assert _tiers(caplog) == ["the namespace's tier is Standard"]
    with Emulator(namespace(1)) as premium:  # no credit throttling: the emulator is a Premium namespace
        code, _, err = run_cli(*args, "--out", tmp_path / "premium", "--connection-string", premium.connection_string)
    assert code == 0, err
    assert _tiers(caplog) == ["the namespace's tier is Premium"]
    code, _, err = run_cli(
        *args, "--out", tmp_path / "given", "--max-credits", "100", "--connection-string", standard.connection_string
    )
    assert code == 0, err
    assert _tiers(caplog) == []  # an explicit budget holds whatever the tier: nothing to ask


def _sample_in_a_process(emu: Emulator, out, *, terminal: bool) -> tuple[int, str, str]:
    """``sbrules sample`` in a process of its own, its stderr a terminal (a pseudo-terminal) or a pipe;
    with ``-X importtime``, so that stderr also tells which modules it imported."""
    args = [sys.executable, "-X", "importtime", "-m", "reconciler", "sample", "--topic", "orders",
            "--subscription", "audit", "--out", str(out), "--format", "json", "--max-credits", str(10 * CREDITS),
            "--connection-string", emu.connection_string]
    if not terminal:
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr
    controller, terminal_fd = pty.openpty()
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=terminal_fd, text=True) as child:
        os.close(terminal_fd)
        seen = bytearray()
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        stdout = child.stdout.read() if child.stdout else ""
        code = child.wait(timeout=120)
    os.close(controller)
    return code, stdout, seen.decode(errors="replace")


@pytest.mark.slow
def test_the_progress_bar_shows_the_effective_rate_on_a_terminal_and_nothing_elsewhere(standard, tmp_path):
    standard.publish("orders", [model.Message(sys={}, body=b"x") for _ in range(900)])
    code, out, err = _sample_in_a_process(standard, tmp_path / "on-a-terminal", terminal=True)
    assert code == 0, err
    assert json.loads(out)["written"] == 900
    assert "orders/audit" in err and f"credits/s of {10 * CREDITS:,}" in err

    code, out, err = _sample_in_a_process(standard, tmp_path / "in-a-pipeline", terminal=False)
    assert code == 0, err
    assert "credits/s" not in err
    imported = [line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")]
    assert "reconciler.traffic.sample.sampler" in imported
    assert not [m for m in imported if m.split(".")[0] == "rich"]  # a pipeline's start-up does not pay for rich
