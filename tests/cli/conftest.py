"""CLI fixtures: the shipped rules, and an emulator whose namespace has drifted from them."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
SCHEMAS_DIR = REPO / "schemas"


@pytest.fixture(scope="module")
def drifted():
    """An emulator seeded as the demo seeds it (the shipped rules, drifted), with a random key."""
    from reconciler.demo import drifted_namespace
    from reconciler.emulator import Emulator
    from reconciler.rulefiles import load_paths

    live, _ = drifted_namespace(load_paths([RULES]))
    with Emulator(live, key="test-" + secrets.token_urlsafe(24)) as emu:
        yield emu
