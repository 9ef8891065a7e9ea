"""The data the package reads at run time ships inside it, identical to the files users see.

``schemas/`` and ``rules/`` at the top of the repository are what people read and edit; the package
carries copies (``reconciler/schemas/``, ``reconciler/demo/rules/``) so that an installed wheel finds
them with importlib.resources. These tests keep the copies exact.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

COPIES = [
    ("schemas", "reconciler", "schemas"),
    ("rules", "reconciler.demo", "rules"),
]


def _files(directory) -> dict[str, bytes]:
    return {entry.name: entry.read_bytes() for entry in directory.iterdir() if entry.is_file()}


@pytest.mark.parametrize(("top", "package", "folder"), COPIES, ids=[c[0] for c in COPIES])
def test_packaged_copy_is_identical_to_the_repository_files(top: str, package: str, folder: str) -> None:
    source = _files(REPO / top)
    packaged_dir = resources.files(package).joinpath(folder)
    packaged = _files(packaged_dir)
    fix = f"the top-level {top}/ is the source: copy it with  cp {top}/* {package.replace('.', '/')}/{folder}/"
    assert source, f"{top}/ is empty"
    assert sorted(packaged) == sorted(source), f"{top}/ and its packaged copy list different files; {fix}"
    differ = sorted(name for name in source if source[name] != packaged[name])
    assert not differ, f"{top}/ and its packaged copy differ in {', '.join(differ)}; {fix}"


def test_the_packaged_rule_files_load_with_the_packaged_schema() -> None:
    from reconciler.demo import demo_rules
    from reconciler.rulefiles import load

    with demo_rules() as rules:
        result = load([rules])
    assert result.ok, result.diagnostics
    assert result.files == len([name for name in _files(REPO / "rules") if not name.endswith(".test.yaml")])
    assert {t.name for t in result.state.topics} == {"orders", "payments"}
