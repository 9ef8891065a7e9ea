"""``sbrules emulator`` as a process: connection string first, serves, stops cleanly, keeps state."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.amqp.client import ManagementClient
from reconciler.cli import cli
from reconciler.model import Rule, SqlFilter
from reconciler.namespace.errors import NotFoundError
from reconciler.rulefiles import load_paths
from tests import processes

RULES = Path(__file__).resolve().parents[2] / "rules"


def _start(*args: str) -> tuple[subprocess.Popen, str]:
    proc = processes.spawn(
        [sys.executable, "-m", "reconciler", "emulator", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().strip()
    return proc, line


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=20)
    finally:
        processes.end(proc)
    return proc.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serves_seeded_rules_and_keeps_state_across_restart(tmp_path, sig):
    state = tmp_path / "namespace.json"
    desired = load_paths([RULES])
    topic, sub = next(iter(desired.subscriptions()))
    proc, conn = _start("--rules", str(RULES), "--state", str(state))
    try:
        assert re.fullmatch(
            r"Endpoint=sb://127\.0\.0\.1:\d+;SharedAccessKeyName=RootManageSharedAccessKey;"
            r"SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true",
            conn,
        )
        with ManagementClient(conn, timeout=10) as mgmt:
            assert mgmt.list_rules(topic.name, sub.name) == list(sub.rules)
            mgmt.add_rule(topic.name, sub.name, Rule("added-live", SqlFilter("x = 1")))
    finally:
        code, err = _stop(proc, sig)
    assert code == 0, err
    assert "state saved" in err
    proc, conn = _start("--state", str(state))
    try:
        with ManagementClient(conn, timeout=10) as mgmt:
            names = [r.name for r in mgmt.list_rules(topic.name, sub.name)]
        assert names == [r.name for r in sub.rules] + ["added-live"]
    finally:
        assert _stop(proc)[0] == 0


def test_custom_key_is_used_and_never_logged(tmp_path):
    proc, conn = _start("--key-name", "dev", "--key", "not-the-default-key")
    try:
        assert "SharedAccessKeyName=dev;SharedAccessKey=not-the-default-key" in conn
        with ManagementClient(conn, timeout=10, retries=0) as mgmt:
            with pytest.raises(NotFoundError):
                mgmt.list_rules("no-such-topic", "sub")
    finally:
        code, err = _stop(proc)
    assert code == 0 and "not-the-default-key" not in err


def test_non_loopback_host_needs_allow_remote():
    result = CliRunner().invoke(cli, ["emulator", "--host", "0.0.0.0", "--port", "0"], standalone_mode=False)
    assert "refusing to listen on non-loopback host" in str(result.exception)


def test_bad_faults_file_is_reported(tmp_path):
    faults = tmp_path / "faults.yaml"
    faults.write_text("busy_fraction: 3\n")
    result = CliRunner().invoke(cli, ["emulator", "--port", "0", "--faults", str(faults)], standalone_mode=False)
    assert "busy_fraction must be between 0 and 1" in str(result.exception)


def test_rules_given_with_an_existing_state_file_are_not_ignored_silently(tmp_path):
    from reconciler.emulator import Emulator

    state = tmp_path / "namespace.json"
    with Emulator(load_paths([RULES]), state_file=state):
        pass
    proc, conn = _start("--rules", str(RULES), "--state", str(state))
    assert conn.startswith("Endpoint=")
    code, err = _stop(proc)
    assert code == 0 and "Traceback" not in err
    [warning] = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "--rules" in warning and str(state) in warning
    proc, _ = _start("--rules", str(RULES), "--state", str(tmp_path / "fresh.json"))
    code, err = _stop(proc)
    assert code == 0 and "warning:" not in err
