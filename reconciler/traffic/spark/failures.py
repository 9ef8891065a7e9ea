"""Why the traffic report could not run on Spark, in one line that names the cause.

Spark reports a failure as a Java exception hundreds of lines long, after a JVM start of several
seconds, and sometimes after a minute of silent retries. A person needs the cause: which file is
not Parquet, which column a sample lacks, which Java is missing, which master does not answer,
what to install where. This module is the one home of that mapping, in two halves:

* before any JVM starts: a local sample is checked through its Parquet footers (pyarrow reads
  only the footers: milliseconds) by :func:`check_sample`, and :func:`check_spark` looks for Java
  and tries a standalone master's or Spark Connect server's port for a bounded time.
* :func:`translated`, around the Spark work: an exception from PySpark or Py4J becomes a
  :class:`SparkFailure` (or :class:`SampleFailure` for a bad sample) whose message names the cause;
  the original stays chained to it, so ``sbrules -v`` shows it.

The JVM's own console output (log4j lines, JVM warnings, executor stack traces, Python worker
tracebacks, which the JVM relays) goes to a log file unless ``-v`` asks to see it
(:func:`jvm_output`); the log's last lines explain a JVM that exits while starting.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from reconciler.errors import ErrorCode, InputError, SbrulesError
from reconciler.traffic.sample.location import is_url
from reconciler.traffic.sample.rows import SCHEMA

#: The oldest Java that Spark 4 (the ``spark`` extra's PySpark) runs on.
NEEDED_JAVA = 17
#: How long a master's port may take to accept a connection before the report gives up on it.
MASTER_WAIT = 10.0
#: The Spark Connect server's port when the URL names none.
CONNECT_PORT = 15002
#: Standalone master's port when the URL names none.
STANDALONE_PORT = 7077
#: PySpark loggers that print a failed query's context as JSON on stderr as the exception is made.
_CONTEXT_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")

_ERROR_CLASS = re.compile(r"\[(?P<cls>[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")
_READ_FILE = re.compile(r"while reading file (?P<file>\S+?)\.?(?:\s|$)")
_MISSING_MODULE = re.compile(r"No module named '(?P<module>[\w.]+)'")
_JAVA_TOO_OLD = re.compile(r"UnsupportedClassVersionError|class file version|Unsupported major\.minor")
#: pip's name for a module, where they differ.
_PIP_NAMES = {"reconciler": "sbrules", "yaml": "pyyaml"}


class SparkFailure(SbrulesError):
    """Spark could not run the report: no Java, no master, or executors that cannot run it."""

    code = ErrorCode.SPARK


class SampleFailure(InputError):
    """The traffic sample cannot be read as an sbrules sample."""

    code = ErrorCode.INPUT


# ------------------------------------------------------------------------------------------------
# Before the JVM starts
# ------------------------------------------------------------------------------------------------


def check_spark(master: str) -> None:
    """What can be known wrong about the Spark to start or reach, before it starts."""
    if master.startswith("sc://"):
        check_reachable(master, CONNECT_PORT)
        return
    check_java()
    if master.startswith("spark://"):
        check_reachable(master, STANDALONE_PORT)


def check_sample(dataset: str) -> int | None:
    """A local sample exists, every Parquet file's footer reads, has the sample's columns, and the
    files hold messages; how many. A sample given as a URL is checked by Spark as it reads it (None)."""
    if is_url(dataset):
        return None
    path = Path(dataset)
    make = f"create one with `sbrules sample --out {dataset}`"
    if path.is_file():
        files = [path]
    elif path.is_dir():
        # As Spark lists a directory: partition subdirectories too, hidden and ``_`` files not.
        files = sorted(
            p for p in path.rglob("*.parquet") if not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts)
        )
    else:
        raise SampleFailure(f"{dataset}: no such traffic sample ({make})")
    if not files:
        raise SampleFailure(f"{dataset} holds no Parquet files: it is not a traffic sample ({make})")
    messages = 0
    for file in files:
        messages += _check_file(file)
    if not messages:
        raise SampleFailure(f"{dataset} holds no messages: its {len(files)} Parquet files are empty ({make})")
    return messages


def _check_file(file: Path) -> int:
    """The messages in one sample file, after checking that it reads and has the sample's columns."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(file)
        schema = metadata.schema.to_arrow_schema()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise unreadable_parquet(str(file), str(exc)) from None
    present = set(schema.names)
    missing = [name for name in SCHEMA.names if name not in present]
    if missing:
        raise not_a_sample(str(file), missing)
    return metadata.num_rows


def unreadable_parquet(file: str, reason: str = "") -> SampleFailure:
    reason = reason.strip().splitlines()[0] if reason.strip() else ""
    return SampleFailure(
        f"{file} is not a readable Parquet file{f' ({reason})' if reason else ''}: "
        "it is corrupt or was cut short; remove it from the sample or sample again"
    )


def not_a_sample(where: str, missing: list[str]) -> SampleFailure:
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return SampleFailure(
        f"{where} is not an sbrules traffic sample: it has no column {missing[0]!r}{more}; "
        "samples are written by `sbrules sample`"
    )


def java_home_of() -> str | None:
    """The java a local Spark driver will run: $JAVA_HOME's, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home, "bin", "java")
        return str(java) if java.is_file() else None
    return shutil.which("java")


def check_java() -> None:
    """Java exists where Spark's launcher looks for it (whether it is new enough shows when it starts)."""
    if java_home_of() is not None:
        return
    home = os.environ.get("JAVA_HOME")
    where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH and JAVA_HOME is not set"
    raise SparkFailure(
        f"Spark needs Java {NEEDED_JAVA} or newer and found none ({where}): install a Java runtime "
        f"(e.g. apt install openjdk-{NEEDED_JAVA}-jre-headless) or point JAVA_HOME at one"
    )


def check_reachable(master: str, default_port: int, wait: float = MASTER_WAIT) -> None:
    """One of the master URL's host:port pairs accepts a TCP connection within ``wait`` seconds.

    Spark's own client retries an unreachable standalone master for about a minute in silence;
    a refused or unanswered port is known here at once or after ``wait``.
    """
    scheme, _, rest = master.partition("://")
    rest = rest.split("/", 1)[0].split(";", 1)[0]
    addresses = []
    for part in rest.split(","):
        parsed = urlsplit(f"//{part}")
        addresses.append((parsed.hostname or "localhost", parsed.port or default_port))
    deadline = time.monotonic() + wait
    reasons = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic())):
                return
        except socket.gaierror as exc:
            reasons.append(f"cannot resolve {host} ({exc.strerror})")
        except TimeoutError:
            reasons.append(f"{host}:{port} did not answer within {wait:g}s")
        except OSError as exc:
            reasons.append(f"{host}:{port} {(exc.strerror or str(exc)).lower()}")
    kind = "Spark Connect server" if scheme == "sc" else "Spark master"
    raise SparkFailure(
        f"the {kind} {master} cannot be reached: {'; '.join(reasons)} (check --spark-master / $SPARK_REMOTE)"
    )


# ------------------------------------------------------------------------------------------------
# The JVM's console
# ------------------------------------------------------------------------------------------------

_jvm_log: Path | None = None
_run_directory: Path | None = None


def run_directory() -> Path:
    """This run's temporary directory for Spark (the JVM's console log, the code shipped to
    executors): one per process, removed when it exits, interrupted or not."""
    global _run_directory
    if _run_directory is None:
        _run_directory = Path(tempfile.mkdtemp(prefix="sbrules-run-"))
        atexit.register(shutil.rmtree, _run_directory, True)
    return _run_directory


@contextlib.contextmanager
def jvm_output() -> Iterator[None]:
    """Start the JVM (in the ``with`` body) with its stderr in a log file, unless sbrules logs
    (``-v``: its logging is enabled for debug).

    The JVM inherits the process's stderr when it is launched; pointing file descriptor 2 at the
    log for that moment gives the JVM (and the Python workers it starts) the log for good, while
    sbrules' own stderr is restored at once.
    """
    global _jvm_log
    if logging.getLogger(__name__).isEnabledFor(logging.DEBUG):
        yield
        return
    from pyspark.logger import PySparkLogger

    for name in _CONTEXT_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)
    if _jvm_log is None:
        _jvm_log = run_directory() / "spark.log"
    saved = os.dup(2)
    try:
        with open(_jvm_log, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _jvm_log_tail(lines: int = 40) -> list[str]:
    if _jvm_log is None or not _jvm_log.exists():
        return []
    return [line for line in _jvm_log.read_text(errors="replace").splitlines()[-lines:] if line.strip()]


# ------------------------------------------------------------------------------------------------
# After: Spark's exceptions
# ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def translated(dataset: str) -> Iterator[None]:
    """Turn an exception from PySpark or Py4J in the body into one line that names its cause.

    Ctrl-C makes PySpark cancel the running jobs, and the call waiting on a job then ends in that
    cancellation rather than in KeyboardInterrupt: it is the interrupt, and reported as one. So is
    an error raised while a KeyboardInterrupt was being handled: Py4J, interrupted in a call, shuts
    the call's socket down through the gateway, and fails when the JVM (in the same process group,
    so also sent the Ctrl-C) has gone first.
    """
    try:
        yield
    except SbrulesError:
        raise
    except Exception as exc:
        if not _from_spark(exc):
            raise
        if condition(exc) == "SPARK_JOB_CANCELLED" or _while_interrupted(exc):
            raise KeyboardInterrupt() from exc
        raise translate(exc, dataset) from exc


def _while_interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a KeyboardInterrupt was being handled."""
    seen: BaseException | None = exc.__context__
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__context__
    return False


def _from_spark(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("pyspark", "py4j")


def condition(exc: BaseException) -> str:
    """Spark's error class (``FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER``), or ''.

    PySpark's own exceptions carry it; a Py4J error (a Java exception PySpark does not convert,
    such as the one from reading a Parquet footer when a read starts) has it in the Java text.
    """
    getter = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        found = getter() if getter else None
    except Exception:  # the JVM may be gone
        found = None
    if found:
        return str(found)
    match = _ERROR_CLASS.search(str(exc))
    return match["cls"] if match else ""


def summary(exc: BaseException) -> str:
    """The first line of what Spark says, without the Py4J wrapper ("An error occurred while calling …")."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:  # the JVM may be gone
            text = str(exc)
        return _first_line(text.split("org.apache.spark.", 1)[-1] if text.startswith("org.apache.spark.") else text)
    return _first_line(str(exc))


def translate(exc: BaseException, dataset: str) -> SbrulesError:
    """The one-line failure for a Spark exception."""
    cls = condition(exc)
    text = str(exc)
    if cls == "JAVA_GATEWAY_EXITED":
        return _gateway_exited()
    if cls.startswith("FAILED_READ_FILE"):
        found = _READ_FILE.search(text)
        return unreadable_parquet(found["file"] if found else dataset, "Spark could not read it")
    if cls.startswith("UNRESOLVED_COLUMN"):
        column = _parameters(exc).get("objectName", "")
        if not column:
            named = re.search(r"with name (`[^`]+`)", text)
            column = named.group(1) if named else "?"
        return not_a_sample(dataset, [column.strip("`")])
    if "java.lang.OutOfMemoryError" in text:
        return SparkFailure(
            "Spark ran out of memory (java.lang.OutOfMemoryError): give the driver more, with SPARK_DRIVER_MEMORY "
            "(for example 8g) for a local master, or spark.driver.memory on a cluster or the Connect server"
        )
    module = _MISSING_MODULE.search(text)
    if module is not None:
        return executors_cannot_import(module["module"])
    if cls == "PYTHON_VERSION_MISMATCH":
        return SparkFailure(
            f"the executors run another Python version than this driver ({summary(exc)}): set "
            "PYSPARK_PYTHON to a Python of the same minor version on every worker"
        )
    line = summary(exc)
    prefix = f"[{cls}] " if cls and f"[{cls}]" not in line else ""
    return SparkFailure(f"Spark failed: {prefix}{line} (run with -v for Spark's own output)")


def executors_cannot_import(module: str) -> SparkFailure:
    """Python code run on the executors (the UDF fallback, the fold of outcome groups) needs what
    the driver's does; the executors' Python is $PYSPARK_PYTHON (else python3) on each worker."""
    top = module.split(".")[0]
    package = _PIP_NAMES.get(top, top.lower())
    python = os.environ.get("PYSPARK_PYTHON") or "python3"
    return SparkFailure(
        f"the executors' Python ({python}) cannot import {top}: install it there (`{python} -m pip install "
        f"{package}` on this machine for a local master, on every worker of a cluster), or set PYSPARK_PYTHON "
        "to a Python that has it"
    )


def _gateway_exited() -> SparkFailure:
    tail = _jvm_log_tail()
    text = "\n".join(tail)
    java = java_home_of() or "java"
    if _JAVA_TOO_OLD.search(text):
        return SparkFailure(
            f"the Java at {java} is too old for Spark: it needs Java {NEEDED_JAVA} or newer "
            "(install one and point JAVA_HOME at it)"
        )
    if "JAVA_HOME is not set" in text or "java: not found" in text.lower():
        return SparkFailure(f"Spark needs Java {NEEDED_JAVA} or newer and found none (set JAVA_HOME)")
    last = tail[-1].strip() if tail else "no output"
    return SparkFailure(f"the Spark driver (JVM, {java}) exited while starting: {last}")


def _parameters(exc: BaseException) -> dict[str, str]:
    getter = getattr(exc, "getMessageParameters", None)
    try:
        return dict(getter() or {}) if getter else {}
    except Exception:
        return {}


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text
