"""The SparkSession sbrules evaluates traffic on: local by default, a cluster when asked.

``--spark-master URL`` (or ``$SPARK_REMOTE`` for Spark Connect) selects the cluster. Settings that
change results are pinned here: the translation never relies on ``spark.sql.ansi.enabled`` (it
uses ``try_*`` functions and explicit guards), but the value is set explicitly so that a run does
not depend on a cluster default; timestamps are read and shown in UTC. What is known wrong before
Spark starts, and the JVM's console, are :mod:`reconciler.traffic.failures`' business. Generated methods too big
for the JIT are avoided (``spark.sql.codegen.hugeMethodLimit``), and so is PySpark's recording of
the Python call site of every Column operation (translation builds thousands of them).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from reconciler.traffic import failures

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
#: HotSpot's HugeMethodLimit: larger generated methods are never JIT-compiled.
HUGE_METHOD_LIMIT = 8000
#: PySpark records the Python call site of every Column operation for error messages: several
#: JVM round trips and a Python stack walk each, which would be most of the cost of translating filters.
NO_CALL_SITES = "spark.python.sql.dataFrameDebugging.enabled"


def spark_session(
    master: str | None = None, *, app_name: str = "sbrules", ansi: bool = True
) -> "SparkSession":
    """Get (or create) the session; ``master`` beats ``$SPARK_REMOTE`` beats ``local[*]``."""
    # A local driver binds to loopback and runs workers on this interpreter, unless told otherwise.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    target = master or os.environ.get("SPARK_REMOTE")
    failures.check_spark(target or DEFAULT_MASTER)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    connect = bool(target) and target.startswith("sc://")
    if connect:
        builder = builder.remote(target)
    else:
        builder = (
            builder.master(target or DEFAULT_MASTER)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config(NO_CALL_SITES, "false")  # a Connect client records call sites without round trips
        )
    flag = str(ansi).lower()
    with failures.jvm_output():
        session = (
            builder.config("spark.sql.ansi.enabled", flag)
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
    session.conf.set("spark.sql.ansi.enabled", flag)
    session.conf.set("spark.sql.session.timeZone", "UTC")
    # A report's whole-stage code for fifty filters compiles to one method of ~55 KB of bytecode,
    # which HotSpot never JIT-compiles (its limit is 8,000 bytes) and so runs interpreted, slower
    # than Spark's per-operator code, which splits into methods the JIT does compile.
    session.conf.set("spark.sql.codegen.hugeMethodLimit", str(HUGE_METHOD_LIMIT))
    if not connect:
        session.sparkContext.setLogLevel("ERROR")
    return session


def is_connect(session: "SparkSession") -> bool:
    """Whether ``session`` is a Spark Connect client: its plans travel as nested protobuf."""
    return type(session).__module__.startswith("pyspark.sql.connect")
