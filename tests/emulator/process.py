"""``sbrules emulator`` as a process of its own, for tests that kill it, restart it or crowd it."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.processes import end, spawn


@dataclass
class EmulatorProcess:
    proc: subprocess.Popen
    connection_string: str
    log: Path

    @property
    def port(self) -> int:
        return int(self.connection_string.split(";")[0].rsplit(":", 1)[1])

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would: nothing gets to run."""
        end(self.proc, signal.SIGKILL)

    def stop(self) -> int:
        """SIGTERM and wait (SIGKILL if it does not end); its exit code."""
        return end(self.proc, timeout=20)


def start(log: Path, *args: str) -> EmulatorProcess:
    """Start ``sbrules emulator --port 0 ARGS`` (its stderr appended to ``log``) in a group of its own."""
    with log.open("ab") as err:
        proc = spawn([sys.executable, "-m", "reconciler", "emulator", "--port", "0", *args],
                     stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("Endpoint="), log.read_text()
    except BaseException:
        end(proc, signal.SIGKILL)
        raise
    return EmulatorProcess(proc, line, log)


@contextlib.contextmanager
def running(log: Path, *args: str) -> Iterator[EmulatorProcess]:
    """An emulator process for the block, ended on every exit path."""
    emu = start(log, *args)
    try:
        yield emu
    finally:
        emu.stop()
