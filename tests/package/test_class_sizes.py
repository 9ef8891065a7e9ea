"""No class in the package over 300 lines: a class that grows past that holds more than one concern
and splits along its seams (as the AMQP engine, the emulator's server handler, the broker and the
management client did)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import reconciler

MAX_CLASS_LINES = 300
PACKAGE = Path(reconciler.__file__).parent


def class_sizes(root: Path) -> list[tuple[str, int]]:
    """("path:line Class", lines from ``class`` to its last line) for every class under ``root``."""
    sizes = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                where = f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"
                sizes.append((where, node.end_lineno - node.lineno + 1))
    return sizes


@pytest.mark.unit
def test_the_measure_counts_a_class_from_its_line_to_its_last():
    tree = "class A:\n    x = 1\n\n    def f(self):\n        return 2\n"
    node = ast.parse(tree).body[0]
    assert node.end_lineno - node.lineno + 1 == 5


@pytest.mark.slow
def test_no_class_in_the_package_is_over_300_lines():
    sizes = class_sizes(PACKAGE)
    assert len(sizes) > 100  # the walk found the package's classes
    too_big = [f"{where}: {lines} lines" for where, lines in sizes if lines > MAX_CLASS_LINES]
    assert not too_big, "split these along their seams:\n" + "\n".join(too_big)
