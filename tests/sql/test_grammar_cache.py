"""The grammar's parse tables are kept in the user's cache directory between runs, and a stale or
broken cache file is rebuilt rather than trusted."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

#: A fresh interpreter: where the tables went, and whether a filter still parses.
_PARSE = """
import reconciler.sql.parser as parser
print(parser._table_cache())
from reconciler.sql import canonical_filter
print(canonical_filter("color = 'blue'  AND (quantity>10)"))
"""


def _run(env_overrides: dict[str, str], tmp_path) -> list[str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "SBRULES_NO_CACHE")}
    env.update(env_overrides)
    done = subprocess.run([sys.executable, "-c", _PARSE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout.splitlines()


def test_the_tables_are_written_once_and_read_back(tmp_path):
    cache = tmp_path / "cache"
    first = _run({"XDG_CACHE_HOME": str(cache)}, tmp_path)
    (written,) = (cache / "sbrules").iterdir()
    assert first[0] == str(written)
    stamp = written.stat().st_mtime_ns
    assert _run({"XDG_CACHE_HOME": str(cache)}, tmp_path) == first
    assert written.stat().st_mtime_ns == stamp


def test_a_corrupt_cache_file_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    path = _run({"XDG_CACHE_HOME": str(cache)}, tmp_path)[0]
    with open(path, "wb") as f:
        f.write(b"not a pickle\n")
    lines = _run({"XDG_CACHE_HOME": str(cache)}, tmp_path)
    assert lines[1] == "color = 'blue' AND quantity > 10"


def test_no_cache_when_told_or_when_the_home_cannot_be_written(tmp_path):
    assert _run({"SBRULES_NO_CACHE": "1"}, tmp_path)[0] == "False"
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert _run({"XDG_CACHE_HOME": str(blocked)}, tmp_path)[0] == "False"
