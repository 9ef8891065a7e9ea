"""The session sbrules creates behaves the same whatever the cluster's defaults, and runs fast code.

Each test shows what a pinned setting makes Spark do, not the setting's value (the tests taking
the ``spark`` fixture run Spark; the environment test does not).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest


@pytest.fixture
def cluster_defaults(spark):
    """Set ``spark.conf`` values for one test (as a cluster's defaults would), then restore them."""
    saved: dict[str, str | None] = {}

    def set_default(key: str, value: str) -> None:
        saved.setdefault(key, spark.conf.get(key, None))
        spark.conf.set(key, value)

    yield set_default
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def test_times_show_in_utc_and_bad_casts_fail_whatever_the_cluster_default(spark, cluster_defaults):
    from pyspark.errors import NumberFormatException

    from reconciler.traffic.spark.session import spark_session

    cluster_defaults("spark.sql.session.timeZone", "America/New_York")
    cluster_defaults("spark.sql.ansi.enabled", "false")
    session = spark_session()
    shown = session.sql("SELECT CAST(TIMESTAMP '2024-03-01 12:00:00+02:00' AS STRING) AS t").first().t
    assert shown == "2024-03-01 10:00:00"
    with pytest.raises(NumberFormatException, match="CAST_INVALID_INPUT"):
        session.sql("SELECT CAST('x' AS INT)").collect()


def test_column_operations_record_no_python_call_site(spark):
    from pyspark.errors import ArithmeticException
    from pyspark.sql import functions as F

    with pytest.raises(ArithmeticException) as info:
        spark.range(1).select(F.col("id") / F.lit(0)).collect()
    assert "DIVIDE_BY_ZERO" in str(info.value)
    assert Path(__file__).name not in str(info.value)  # recording it costs JVM round trips per Column


def _stage_runs(spark, frame) -> tuple[int, int]:
    """(largest generated method in bytes, whole-stage pipeline time in ms) of ``frame``'s only stage."""
    execution = frame._jdf.queryExecution()
    execution.toRdd().count()  # run the stage on the JVM, nothing brought back
    plan = execution.executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.executedPlan()
    assert plan.nodeName().startswith("WholeStageCodegen"), plan.nodeName()
    debug = spark._jvm.org.apache.spark.sql.execution.debug.package
    ((_, _, stats),) = [(t._1(), t._2(), t._3()) for t in _scala_list(debug.codegenStringSeq(plan))]
    return stats.maxMethodCodeSize(), plan.metrics().apply("pipelineTime").value()


def _scala_list(seq) -> list:
    out, it = [], seq.iterator()
    while it.hasNext():
        out.append(it.next())
    return out


def test_a_stage_too_big_for_the_jit_runs_as_per_operator_code(spark):
    from pyspark.sql import functions as F

    rows = spark.range(0, 200_000).withColumn("a", F.col("id") % 97)
    small = rows.select((F.col("a") + 1).alias("x"))
    wide = rows.select(
        *[
            F.when(F.col("a") == i, F.col("id") * i).when(F.col("a") > i, F.col("id") - i).otherwise(i).alias(f"c{i}")
            for i in range(60)
        ]
    )
    small_method, small_time = _stage_runs(spark, small)
    wide_method, wide_time = _stage_runs(spark, wide)
    assert small_method < 8000 and small_time > 0  # whole-stage code ran
    assert wide_method > 8000  # HotSpot never JIT-compiles a method this large ...
    assert wide_time == 0  # ... so Spark ran the operators' own code instead of it


@pytest.mark.unit
@pytest.mark.parametrize(
    "master, kind",
    [("local", "local"), ("local[2]", "local"), ("local-cluster[2,1,1024]", "local"), ("spark://host:7077", "cluster"),
     ("yarn", "cluster"), ("k8s://https://api:6443", "cluster"), ("sc://host:15002", "connect")],
)
def test_loopback_and_this_interpreter_are_assumed_for_local_masters_only(monkeypatch, master, kind):
    """A cluster's executors must reach the driver at its own address and run their own Python; a
    master given explicitly wins over $SPARK_REMOTE (pyspark refuses the two together)."""
    from reconciler.traffic.spark.session import master_kind, prepare_environment

    for name in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:15002")
    prepare_environment(master_kind(master))
    local = kind == "local"
    assert os.environ.get("SPARK_LOCAL_IP") == ("127.0.0.1" if local else None)
    assert os.environ.get("PYSPARK_PYTHON") == (sys.executable if local else None)
    assert ("SPARK_REMOTE" in os.environ) == (kind == "connect")


#: Run in a fresh process: which options the driver JVM that spark_session starts was given.
_JVM_OPTIONS = """
import sys
from reconciler.traffic.spark.session import spark_session
evaluations = None if sys.argv[1] == "unknown" else int(sys.argv[1])
session = spark_session("local[1]", evaluations=evaluations)
print(" ".join(session._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))
session.stop()
"""


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("evaluations, client_jit", [(100_000 * 50, True), (100_000 * 2_000, False), ("unknown", False)])
def test_a_short_local_run_starts_a_driver_jvm_with_the_client_jit_only(evaluations, client_jit):
    """A short run (messages × filters) gets the client JIT; every local driver gets a heap sized for large plans."""
    import subprocess

    from reconciler.traffic.spark.session import local_driver_memory

    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_DRIVER_MEMORY", "PYSPARK_SUBMIT_ARGS")}
    done = subprocess.run([sys.executable, "-c", _JVM_OPTIONS, str(evaluations)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("-XX:TieredStopAtLevel=1" in done.stdout) == client_jit, done.stdout
    assert f"-Xmx{local_driver_memory()}" in done.stdout.split(), done.stdout


@pytest.mark.unit
def test_a_local_driver_gets_half_the_memory_unless_the_user_chose(monkeypatch):
    from reconciler.traffic.spark.session import MAX_LOCAL_DRIVER_GB, local_driver_memory

    monkeypatch.delenv("SPARK_DRIVER_MEMORY", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    total_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    assert local_driver_memory() == f"{min(MAX_LOCAL_DRIVER_GB, max(1, int(total_gb // 2)))}g"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 3g pyspark-shell")
    assert local_driver_memory() is None
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    monkeypatch.setenv("SPARK_DRIVER_MEMORY", "2g")
    assert local_driver_memory() is None
