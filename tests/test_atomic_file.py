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


def test_a_new_file_respects_the_umask_and_a_replaced_one_keeps_its_mode(tmp_path):
    import os
    import stat

    new = tmp_path / "plan.json"
    write_atomically(new, "{}")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    kept = tmp_path / "shared.yaml"
    kept.write_text("old")
    kept.chmod(0o640)
    write_atomically(kept, "new")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640
