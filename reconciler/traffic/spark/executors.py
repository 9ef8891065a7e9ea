"""What a report needs on the executors, and how it gets there.

Python runs on the executors for the rules evaluated by the Python UDF fallback and for the fold of
outcome groups (:mod:`reconciler.traffic.spark.tally`). Both unpickle sbrules code, which imports
``lark`` (the SQL grammar) besides numpy and pyarrow (which PySpark's Arrow support needs there
anyway). A local session's workers run this interpreter. For a cluster or a Spark Connect server,
sbrules ships itself: a zip of the ``reconciler`` and ``lark`` packages as installed here, added
to the session (``addPyFile``, or ``addArtifacts(pyfile=True)`` over Spark Connect), so executors
need only PySpark, numpy and pyarrow. Compiled packages cannot travel that way: an executor whose
Python lacks one fails the report with one line saying what to install where.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import threading
import weakref
import zipfile
from pathlib import Path
from typing import Any, Iterator

from reconciler import __version__
from reconciler.errors import SbrulesError
from reconciler.traffic.spark.failures import run_directory

#: Pure-Python packages the executors' code imports, shipped with it.
SHIPPED = ("reconciler", "lark")
#: pip's name for a module, where they differ.
_PIP_NAMES = {"reconciler": "sbrules", "yaml": "pyyaml"}
_MISSING = re.compile(
    r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'"
    r"|(?P<package>\w+) >= [\w.]+ must be installed; however, it was not found"
)

log = logging.getLogger(__name__)

_shipped: "weakref.WeakSet[Any]" = weakref.WeakSet()
_archive_path: Path | None = None


class ExecutorError(SbrulesError):
    """The executors cannot run the report's Python code."""


def is_connect(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect client: its plans travel as nested protobuf, and
    sbrules reaches its executors as an artifact."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def ship(session: Any) -> None:
    """Make sbrules importable on ``session``'s executors (once per session)."""
    if session in _shipped:
        return
    archive = str(_archive())
    if is_connect(session):
        session.addArtifacts(archive, pyfile=True)
    else:
        session.sparkContext.addPyFile(archive)
    _shipped.add(session)


def _archive() -> Path:
    """A zip of :data:`SHIPPED` as installed here, kept for this process's lifetime (Spark serves
    it to executors on demand)."""
    global _archive_path
    if _archive_path is None:
        path = run_directory() / f"sbrules-{__version__}.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in SHIPPED:
                package = Path(importlib.import_module(name).__path__[0])
                for file in sorted(package.rglob("*")):
                    if file.is_file() and "__pycache__" not in file.parts:
                        archive.write(file, file.relative_to(package.parent).as_posix())
        _archive_path = path
    return _archive_path


@contextlib.contextmanager
def executor_imports() -> Iterator[None]:
    """Turn a Spark job's failure to import a module on the executors into one line."""
    try:
        yield
    except Exception as exc:
        from pyspark.errors import PySparkException

        match = _MISSING.search(str(exc)) if isinstance(exc, PySparkException) else None
        if match is None:
            raise
        module = (match["module"] or match["package"]).split(".")[0]
        package = _PIP_NAMES.get(module, module.lower())
        raise ExecutorError(
            f"the executors' Python cannot import {module}: install it where the executors run "
            f"(pip install {package} into the Python they use, PYSPARK_PYTHON or python3 on every worker)"
        ) from exc


def start_local_workers(session: Any) -> None:
    """Start a local session's Python workers on a background thread while the driver plans.

    The fold of outcome groups runs Python on the executors. On a freshly started JVM the first
    stage that does so waits seconds (measured: 4–5 s of an 8 s stage) for workers to start and
    import pyarrow and sbrules. A job of one empty batch per core pays that while the driver reads
    the footers and translates the filters, and the report's fold then finds the workers started:
    PySpark reuses them. Local sessions only: a cluster's executors come and go on their own terms.
    """
    if is_connect(session) or not session.sparkContext.master.startswith("local"):
        return
    from reconciler.traffic.spark.tally import start_worker

    cores = session.sparkContext.defaultParallelism

    def run() -> None:
        try:
            session.range(cores, numPartitions=cores).mapInArrow(start_worker, "id long").collect()
        except Exception as exc:  # the report's own job meets and reports whatever is wrong
            log.debug("starting the Python workers ahead of the report failed: %s", exc)

    threading.Thread(target=run, name="sbrules-start-workers", daemon=True).start()
