"""Shared test fixtures. Area-specific fixtures live in each tests/<area>/conftest.py."""

import os
import sys
import time

import pytest

from reconciler.cli import main

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture
def run_cli(capsys):
    """run_cli(*args) -> (exit code, stdout, stderr) of `sbrules` run in this process."""

    def _run(*args: str) -> tuple[int, str, str]:
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


class ManualClock:
    """Unix time that stands still until the test moves it (it starts at the real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    """A clock to inject where the code reads the time (``Emulator(token_clock=clock)``)."""
    return ManualClock()
