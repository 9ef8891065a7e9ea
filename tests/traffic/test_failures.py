"""Traffic report failures (`sbrules impact`) are one line naming the cause: a broken or foreign sample, no Java,
an unreachable master, executors that cannot run the report's Python; Spark's own output stays out
of the way unless -v asks for it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reconciler.model import Message, TypedValue
from reconciler.traffic.sample.rows import message_to_row, rows_to_table
from reconciler.traffic.sample.sampler import Dataset
from tests import processes

RULES = """\
topic: orders
subscriptions:
  eu:
    rules:
      - {name: eu, sql: "region = 'eu'"}
"""
PLAN = '{"format_version": 2, "summary": {"create": 0, "replace": 0, "delete": 0, "unchanged": 0}, "changes": [], "subscriptions": []}'


@pytest.fixture
def project(tmp_path):
    """The rule file and a plan file a traffic report compares it with."""
    (tmp_path / "orders.yaml").write_text(RULES)
    (tmp_path / "plan.json").write_text(PLAN)
    return tmp_path


@pytest.fixture
def impact(project, run_cli):
    def run(dataset, *args: str):
        return run_cli(
            *args[:1] if args[:1] == ("-v",) else (),
            "impact", project / "plan.json", project / "orders.yaml", "--traffic", dataset,
            *(a for a in args if a != "-v"),
        )

    return run


def write_sample(directory: Path, count: int = 4) -> Path:
    store = Dataset(directory)
    for i in range(count):
        message = Message(sys={"MessageId": TypedValue.infer(f"m{i}")}, user={"region": TypedValue.infer("eu")})
        store.add(message_to_row(message, topic="orders", subscription="all"))
    store.flush()
    return directory


def corrupt_sample(directory: Path) -> Path:
    """A sample whose one file was cut short (as a copy interrupted halfway leaves it)."""
    write_sample(directory)
    (part,) = directory.glob("*.parquet")
    part.write_bytes(part.read_bytes()[:200])
    return part


def foreign_sample(directory: Path) -> Path:
    """Parquet that is not an sbrules sample: another schema."""
    directory.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "body": ["a", "b"]}), directory / "export.parquet")
    return directory


@pytest.fixture
def no_java_needed(monkeypatch, tmp_path):
    """Make starting Spark fail: a failure that names the sample was found before Spark started."""
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk-here"))


# -- before the JVM starts ----------------------------------------------------------------------


def test_a_corrupt_parquet_file_is_named(impact, tmp_path, no_java_needed, check):
    part = corrupt_sample(tmp_path / "sample")
    code, out, err = impact(tmp_path / "sample")
    check.one_error(code, out, err, 1, rf"{part.name} is not a readable Parquet file")


def test_a_parquet_file_of_another_schema_names_the_missing_column(impact, tmp_path, no_java_needed, check):
    code, out, err = impact(foreign_sample(tmp_path / "other"))
    check.one_error(code, out, err, 1, r"export\.parquet is not an sbrules traffic sample: it has no column 'topic'")


def test_an_empty_sample_is_refused_before_spark_starts(impact, tmp_path, no_java_needed, check):
    (tmp_path / "empty").mkdir()
    code, out, err = impact(tmp_path / "empty")
    check.one_error(code, out, err, 1, r"empty holds no Parquet files")
    (tmp_path / "no-rows").mkdir()
    pq.write_table(rows_to_table([]), tmp_path / "no-rows" / "part-0.parquet")
    code, out, err = impact(tmp_path / "no-rows")
    check.one_error(code, out, err, 1, r"no-rows holds no messages")


def test_no_java_says_which_version_is_needed(impact, tmp_path, monkeypatch, check):
    sample = write_sample(tmp_path / "sample")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, err = impact(sample)
    check.one_error(code, out, err, 1, r"Spark needs Java 17 or newer and found none \(no java on PATH")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    code, out, err = impact(sample)
    check.one_error(code, out, err, 1, r"JAVA_HOME=.*jdk has no bin/java")


def test_a_java_too_old_for_spark_says_which_version_is_needed(project, tmp_path, check):
    import subprocess

    # What an old JVM answers Spark's launcher (its classes are compiled for a newer Java).
    java = tmp_path / "jdk8" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(
        "#!/bin/sh\necho 'Error: A JNI error has occurred, please check your installation and try again' >&2\n"
        "echo 'Exception in thread \"main\" java.lang.UnsupportedClassVersionError: org/apache/spark/launcher/Main "
        "has been compiled by a more recent version of the Java Runtime (class file version 61.0)' >&2\nexit 1\n"
    )
    java.chmod(0o755)
    result = subprocess.run(
        [sys.executable, "-m", "reconciler", "impact", project / "plan.json", project / "orders.yaml", "--traffic",
         write_sample(tmp_path / "s")],
        capture_output=True, text=True, env={**os.environ, "JAVA_HOME": str(java.parents[1])}, timeout=300,
    )
    check.one_error(result.returncode, result.stdout, result.stderr, 1, r"the Java at .*jdk8/bin/java is too old for Spark: it needs Java 17")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("scheme", ["spark", "sc"])
def test_an_unreachable_master_is_named(impact, tmp_path, scheme, check):
    master = f"{scheme}://127.0.0.1:{free_port()}"
    code, out, err = impact(write_sample(tmp_path / "sample"), "--spark-master", master)
    check.one_error(code, out, err, 1, rf"{master} cannot be reached: .*connection refused")


def test_an_unresolvable_master_is_named(impact, tmp_path, check):
    code, out, err = impact(write_sample(tmp_path / "sample"), "--spark-master", "spark://no-such-master.invalid:7077")
    check.one_error(code, out, err, 1, r"spark://no-such-master\.invalid:7077 cannot be reached: cannot resolve no-such-master")


# -- from Spark ---------------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_reading_a_corrupt_file_names_it(spark, impact, tmp_path, check):
    part = corrupt_sample(tmp_path / "sample")
    # A URL is read by Spark alone (cloud storage is not checked before it starts).
    code, out, err = impact(f"file://{tmp_path / 'sample'}")
    check.one_error(code, out, err, 1, rf"{part.name} is not a readable Parquet file")


@pytest.mark.spark
def test_spark_reading_another_schema_names_the_missing_column(spark, impact, tmp_path, check):
    code, out, err = impact(f"file://{foreign_sample(tmp_path / 'other')}")
    check.one_error(code, out, err, 1, r"is not an sbrules traffic sample: it has no column 'topic'")


@pytest.mark.spark
def test_verbose_shows_the_exception_behind_the_line(spark, impact, tmp_path):
    corrupt_sample(tmp_path / "sample")
    code, out, err = impact(f"file://{tmp_path / 'sample'}", "-v")
    assert code == 1
    assert "Traceback" in err and "FAILED_READ_FILE" in err
    assert err.rstrip().splitlines()[-1].startswith("error: ")


@pytest.mark.spark
def test_executors_that_cannot_import_a_module_say_what_to_install_where(spark):
    from pyspark.sql import functions as F

    from reconciler.traffic.spark.failures import SparkFailure, translated

    def needs_a_module(value):  # runs on the executors' Python
        import sbrules_no_such_module  # noqa: F401

        return value

    with pytest.raises(SparkFailure, match=r"executors' Python \(.+\) cannot import sbrules_no_such_module: install it") as caught:
        with translated("sample"):
            spark.range(1).select(F.udf(needs_a_module)("id")).collect()
    assert "\n" not in str(caught.value)


@pytest.mark.spark
def test_any_other_spark_failure_is_one_line_with_its_error_class(spark):
    from reconciler.traffic.spark.failures import SparkFailure, translated

    with pytest.raises(SparkFailure, match=r"^Spark failed: \[DIVIDE_BY_ZERO\]") as caught:
        with translated("sample"):
            spark.sql("SELECT 1 / 0").collect()
    assert "\n" not in str(caught.value)


def test_a_py4j_error_raised_while_handling_ctrl_c_is_the_interrupt():
    # Py4J, interrupted in a call, shuts its socket down through a gateway the JVM (sent the same
    # Ctrl-C) may have closed: its error then stands in front of the KeyboardInterrupt.
    from py4j.protocol import Py4JError

    from reconciler.traffic.spark.failures import translated

    with pytest.raises(KeyboardInterrupt):
        with translated("sample"):
            try:
                raise KeyboardInterrupt()
            except KeyboardInterrupt:
                raise Py4JError("Gateway must be connected to send cancel cmd.") from None


#: Run in a fresh process with a small driver heap: a job whose result does not fit in it.
_OUT_OF_MEMORY = """
from reconciler.traffic.spark.failures import SparkFailure, translated
from reconciler.traffic.spark.session import spark_session
spark = spark_session("local[1]")
try:
    with translated("sample"):
        spark.range(0, 20_000_000).selectExpr("repeat('x', 64) AS s").collect()
except SparkFailure as exc:
    print(exc)
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_driver_out_of_memory_says_how_to_give_it_more():
    env = {**os.environ, "SPARK_DRIVER_MEMORY": "512m"}
    done = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    assert re.search(r"out of memory .*SPARK_DRIVER_MEMORY", line), line


# -- Ctrl-C -------------------------------------------------------------------------------------


def _descendants(pid: int) -> list[int]:
    """The processes started (directly or not) by ``pid``, from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _runs_python_workers(pid: int) -> bool:
    for child in _descendants(pid):
        try:
            if b"pyspark.daemon" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


@pytest.mark.spark
def test_ctrl_c_during_the_spark_job_stops_quietly(project, tmp_path):
    import signal
    import subprocess
    import time

    # A rule only Python evaluates: the job runs Python workers, which the test sees start.
    (project / "orders.yaml").write_text(RULES.replace("region = 'eu'", "region LIKE region"))
    write_sample(tmp_path / "sample", count=20_000)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = processes.spawn(
        [sys.executable, "-m", "reconciler", "impact", project / "plan.json", project / "orders.yaml", "--traffic",
         tmp_path / "sample"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(temporary)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even under a runner that ignores it
    )
    deadline = time.monotonic() + 300
    while not _runs_python_workers(process.pid):  # the Spark job is running
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the Spark job never started Python workers"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    try:
        out, err = process.communicate(timeout=300)
    finally:
        processes.end(process)
    assert process.returncode == 130, (out, err)
    assert "Traceback" not in err and "Exception" not in err, err
    assert err.strip().splitlines()[-1] == "interrupted", err
    assert not [p.name for p in temporary.iterdir() if p.name.startswith("sbrules-")]  # the run's Spark log is gone
