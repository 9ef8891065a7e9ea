"""The SparkSession sbrules evaluates traffic on: local by default, a cluster or Spark Connect when asked.

``--spark-master URL`` (or ``$SPARK_REMOTE``) selects it; the flag wins. Defaults differ by kind
of master:

- ``local[…]``: the driver binds to loopback and its Python workers run this interpreter
  (``SPARK_LOCAL_IP``, ``PYSPARK_PYTHON``, unless already set); the JVM it starts gets half the
  machine's memory, up to 8 GB, unless told otherwise (:func:`local_driver_memory`), and compiles
  with the client JIT only for a short run (:data:`SHORT_RUN_EVALUATIONS`);
- a cluster (``spark://``, ``yarn``, ``k8s://``…): nothing of this machine's network or Python is
  assumed; executors run their own ``python3`` (or ``PYSPARK_PYTHON``), and sbrules ships its
  own code to them (:mod:`reconciler.traffic.spark.executors`);
- Spark Connect (``sc://host:port``): the same shipping, as session artifacts.

Settings that change results are pinned here: the translation never relies on
``spark.sql.ansi.enabled`` (it uses ``try_*`` functions and explicit guards), but the value is set
explicitly so that a run does not depend on a cluster default; timestamps are read and shown in
UTC. What is known wrong before Spark starts, and the JVM's console, are
:mod:`reconciler.traffic.spark.failures`' business. Generated methods too big for the JIT are avoided
(``spark.sql.codegen.hugeMethodLimit``), and so is PySpark's recording of the Python call site of
every Column operation (translation builds thousands of them).
"""

from __future__ import annotations

import enum
import os
import re
import sys
from typing import TYPE_CHECKING

from reconciler import progress
from reconciler.traffic.spark import failures

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
#: HotSpot's HugeMethodLimit: larger generated methods are never JIT-compiled.
HUGE_METHOD_LIMIT = 8000
#: Up to this many filter evaluations (messages × distinct filters) a local report is a short run:
#: its driver JVM compiles with the client JIT only (C1, ``-XX:TieredStopAtLevel=1``). Measured on
#: two cores, in a fresh process: 100k messages × 50 filters (5 M) finish 15 % sooner (about 5 s),
#: as C2's compiler threads no longer compete with the job; 100k × 2,000 filters (200 M) take 14 %
#: longer (152 s against 133 s), as do warm runs (1.7 s more per 100k messages at 50 filters).
SHORT_RUN_EVALUATIONS = 10_000_000
#: The most heap :func:`local_driver_memory` gives a local driver by default.
MAX_LOCAL_DRIVER_GB = 8
#: PySpark records the Python call site of every Column operation for error messages: several
#: JVM round trips and a Python stack walk each, which would be most of the cost of translating filters.
NO_CALL_SITES = "spark.python.sql.dataFrameDebugging.enabled"


class MasterKind(enum.Enum):
    LOCAL = "local"
    CLUSTER = "cluster"
    CONNECT = "connect"


def master_kind(master: str) -> MasterKind:
    """What kind of Spark a master URL names."""
    if master.startswith("sc://"):
        return MasterKind.CONNECT
    if master == "local" or master.startswith(("local[", "local-cluster[")):
        return MasterKind.LOCAL
    return MasterKind.CLUSTER


def prepare_environment(kind: MasterKind) -> None:
    """The process environment pyspark reads when it starts a driver of this kind."""
    if kind is not MasterKind.CONNECT:
        # pyspark refuses a master while $SPARK_REMOTE is set; the explicit master wins.
        os.environ.pop("SPARK_REMOTE", None)
    if kind is MasterKind.LOCAL:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def local_driver_memory() -> str | None:
    """The heap for a local driver JVM (executors included): half this machine's memory, between
    1 and 8 GB; None when the user chose (``SPARK_DRIVER_MEMORY``, ``--driver-memory`` in
    ``PYSPARK_SUBMIT_ARGS``) or the machine's memory is unknown.

    Spark's default of 1 GB runs out analysing a report of 2,000 filters (measured: heap
    exhausted after 3 minutes on 100,000 messages); the plan, not the sample, needs the room."""
    if os.environ.get("SPARK_DRIVER_MEMORY") or "--driver-memory" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        return None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    gigabytes = min(MAX_LOCAL_DRIVER_GB, max(1, total // 2**31))
    return f"{gigabytes}g"


def spark_session(
    master: str | None = None, *, app_name: str = "sbrules", ansi: bool = True, evaluations: int | None = None
) -> "SparkSession":
    """Get (or create) the session; ``master`` beats ``$SPARK_REMOTE`` beats ``local[*]``.

    ``evaluations`` (messages × filters), when known, tunes a local driver JVM this call starts
    (:data:`SHORT_RUN_EVALUATIONS`)."""
    target = master or os.environ.get("SPARK_REMOTE") or DEFAULT_MASTER
    kind = master_kind(target)
    prepare_environment(kind)
    progress.phase(_starting(kind, target))
    failures.check_spark(target)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if kind is MasterKind.CONNECT:
        builder = builder.remote(target)
    else:
        builder = (
            builder.master(target)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config(NO_CALL_SITES, "false")  # a Connect client records call sites without round trips
        )
        from pyspark import SparkContext

        starts_jvm = SparkContext._active_spark_context is None
        if kind is MasterKind.LOCAL and starts_jvm:
            memory = local_driver_memory()
            if memory:
                builder = builder.config("spark.driver.memory", memory)
            if evaluations is not None and evaluations <= SHORT_RUN_EVALUATIONS:
                builder = builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
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
    if kind is not MasterKind.CONNECT:
        session.sparkContext.setLogLevel("ERROR")
    if kind is not MasterKind.LOCAL:
        from reconciler.traffic.spark.executors import ship

        ship(session)
    return session


def _starting(kind: MasterKind, target: str) -> str:
    """The progress phase of getting a session: connecting to a server, starting a driver, or using the running one."""
    if kind is MasterKind.CONNECT:
        return f"connecting to Spark ({shown_master(target)})"
    from pyspark import SparkContext

    return f"{'starting' if SparkContext._active_spark_context is None else 'using'} Spark ({shown_master(target)})"


def shown_master(master: str) -> str:
    """A master URL as progress shows it: without user information, and a Spark Connect URL without
    its parameters (a token among them)."""
    shown = re.sub(r"(?<=://)[^/@]*@", "", master)
    if master_kind(shown) is MasterKind.CONNECT:
        shown = "sc://" + shown.removeprefix("sc://").split("/", 1)[0]
    return shown

