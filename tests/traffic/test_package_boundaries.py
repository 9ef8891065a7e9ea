"""The language package stands on its own: the Spark translation depends on it, never the reverse."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import reconciler.sql


def test_the_sql_package_imports_neither_traffic_nor_pyspark():
    modules = sorted(f"reconciler.sql.{m.name}" for m in pkgutil.iter_modules(reconciler.sql.__path__))
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark' or m.startswith('reconciler.traffic'))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "reconciler.sql.parser" in modules  # the walk found the package's modules
