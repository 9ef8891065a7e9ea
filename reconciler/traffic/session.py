"""The SparkSession sbrules evaluates traffic on: local by default, a cluster or Spark Connect when asked.

``--spark-master URL`` (or ``$SPARK_REMOTE``) selects it; the flag wins. Defaults differ by kind
of master:

- ``local[…]``: the driver binds to loopback and its Python workers run this interpreter
  (``SPARK_LOCAL_IP``, ``PYSPARK_PYTHON``, unless already set); for a small sample the JVM it
  starts compiles with the client JIT only (:data:`SHORT_RUN_MESSAGES`);
- a cluster (``spark://``, ``yarn``, ``k8s://``…): nothing of this machine's network or Python is
  assumed; executors run their own ``python3`` (or ``PYSPARK_PYTHON``), and sbrules ships its
  own code to them (:mod:`reconciler.traffic.executors`);
- Spark Connect (``sc://host:port``): the same shipping, as session artifacts.

Settings that change results are pinned here: the translation never relies on
``spark.sql.ansi.enabled`` (it uses ``try_*`` functions and explicit guards), but the value is set
explicitly so that a run does not depend on a cluster default; timestamps are read and shown in
UTC. What is known wrong before Spark starts, and the JVM's console, are
:mod:`reconciler.traffic.failures`' business. Generated methods too big for the JIT are avoided
(``spark.sql.codegen.hugeMethodLimit``), and so is PySpark's recording of the Python call site of
every Column operation (translation builds thousands of them).
"""

from __future__ import annotations

import enum
import os
import sys
from typing import TYPE_CHECKING

from reconciler.traffic import failures

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
#: HotSpot's HugeMethodLimit: larger generated methods are never JIT-compiled.
HUGE_METHOD_LIMIT = 8000
#: Below this many messages a local report is a short run: its driver JVM compiles with the client
#: JIT only (C1, ``-XX:TieredStopAtLevel=1``). On two cores, 100k messages × 50 rules: a fresh
#: process finishes 15 % sooner (about 5 s), as C2's compiler threads no longer compete with the
#: job; a warm run is 1.7 s slower per 100k messages, so past about 300k the full JIT wins.
SHORT_RUN_MESSAGES = 200_000
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


def spark_session(
    master: str | None = None, *, app_name: str = "sbrules", ansi: bool = True, messages: int | None = None
) -> "SparkSession":
    """Get (or create) the session; ``master`` beats ``$SPARK_REMOTE`` beats ``local[*]``.

    ``messages``, the sample's size when known, tunes a local driver JVM this call starts
    (:data:`SHORT_RUN_MESSAGES`)."""
    target = master or os.environ.get("SPARK_REMOTE") or DEFAULT_MASTER
    kind = master_kind(target)
    prepare_environment(kind)
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
        if kind is MasterKind.LOCAL and starts_jvm and messages is not None and messages < SHORT_RUN_MESSAGES:
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
        from reconciler.traffic.executors import ship

        ship(session)
    return session


def is_connect(session: "SparkSession") -> bool:
    """Whether ``session`` is a Spark Connect client: its plans travel as nested protobuf."""
    return type(session).__module__.startswith("pyspark.sql.connect")
