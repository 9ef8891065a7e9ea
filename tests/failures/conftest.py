"""Fixtures for the failure tests: how a command's one-line error is checked."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest


def one_error(code: int, out: str, err: str, expected_code: int, cause: str) -> str:
    """Assert the command failed as a user should see it: ``expected_code``, no traceback anywhere,
    exactly one ``error:`` line, and that line matches ``cause`` (a regex naming the cause)."""
    assert code == expected_code, (code, out, err)
    assert "Traceback" not in out + err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert re.search(cause, errors[0]), errors[0]
    return errors[0]


@pytest.fixture
def check() -> SimpleNamespace:
    return SimpleNamespace(one_error=one_error)
