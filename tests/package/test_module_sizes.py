"""No module in the package over 600 lines: a module that grows past that holds more than one room
and splits along its seams (as the static proofs, the SQL values and the typed values did)."""

from __future__ import annotations

from pathlib import Path

import pytest

import reconciler

pytestmark = pytest.mark.unit

MAX_MODULE_LINES = 600
PACKAGE = Path(reconciler.__file__).parent


def test_no_module_in_the_package_is_over_600_lines():
    sizes = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in sorted(PACKAGE.rglob("*.py"))}
    assert len(sizes) > 100  # the walk found the package's modules
    too_big = [f"{path.relative_to(PACKAGE.parent)}: {lines} lines" for path, lines in sizes.items() if lines > MAX_MODULE_LINES]
    assert not too_big, "split these along their seams:\n" + "\n".join(too_big)
