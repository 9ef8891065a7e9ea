"""atomic_file: a file is replaced whole or not at all, and no temporary file is left behind."""

from __future__ import annotations

import pytest

from reconciler.atomic_file import replacing, write_atomically


def test_write_replaces_the_whole_file_and_creates_its_directory(tmp_path):
    target = tmp_path / "deep" / "state.json"
    write_atomically(target, "first")
    write_atomically(target, b"second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "part.parquet"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with replacing(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["part.parquet"]
