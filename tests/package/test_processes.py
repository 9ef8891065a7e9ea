"""Processes the tests start end with the run: when pytest is killed, and when it is told to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for init to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_for(condition, what: str, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            out = process.stdout.read().decode(errors="replace") if process.stdout else ""
            raise AssertionError(f"{what}: the process exited ({process.returncode})\n{out}")
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_spawned_process_dies_with_the_process_that_spawned_it_even_when_that_is_killed(tmp_path):
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import threading
            from tests import processes
            child = processes.spawn(["sleep", "120"])
            open({str(pid_file)!r}, "w").write(str(child.pid))
            threading.Event().wait(120)  # until the test kills this process
        """)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        _wait_for(lambda: pid_file.exists() and pid_file.read_text(), "the child never started", parent)
        child = int(pid_file.read_text())
        assert os.getpgid(child) == child  # a process group of its own
        parent.kill()  # SIGKILL: no handler, no atexit
        parent.wait(10)
        deadline = time.monotonic() + 30
        while not _gone(child):
            assert time.monotonic() < deadline, "the child outlived its killed parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait(10)


def test_sigterm_to_pytest_runs_the_teardown_that_ends_a_fixtures_process(tmp_path):
    pid_file, ended = tmp_path / "child.pid", tmp_path / "ended"
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent(f"""
        import threading
        import pytest
        from tests import processes

        @pytest.fixture
        def daemon():
            child = processes.spawn(["sleep", "120"])
            open({str(pid_file)!r}, "w").write(str(child.pid))
            yield child
            processes.end(child)
            open({str(ended)!r}, "w").write("teardown ran")

        def test_waits(daemon):
            threading.Event().wait(120)  # until the test stops pytest
    """))
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-o", "addopts=", str(tmp_path / "test_hangs.py")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        _wait_for(lambda: pid_file.exists() and pid_file.read_text(), "the fixture never started its process", run)
        child = int(pid_file.read_text())
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=30)
        assert ended.read_text() == "teardown ran", output.decode(errors="replace")
        assert _gone(child)
    finally:
        run.kill()
        run.wait(10)
