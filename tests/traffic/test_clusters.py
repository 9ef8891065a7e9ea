"""The traffic report on a standalone cluster and over Spark Connect equals the local one.

Module fixtures start, from the installed pyspark and on loopback, a standalone master with one
worker and a Spark Connect server; each is stopped by its process group at teardown. Their Python
workers run an interpreter that has PySpark, numpy and pyarrow but not sbrules, so the report's
executor code (the Python fallback, the fold of outcome groups) only runs if sbrules ships itself.
``sbrules impact PLAN.json --traffic --format json`` runs as a subprocess against each; the
reference is the same command on the local session.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from reconciler.model import DesiredState, Message, Rule, SqlFilter, Subscription, Topic, TypedValue
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset
from tests import processes

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SPARK_HOME = Path(__import__("pyspark").__file__).parent
START_TIMEOUT = 300
RUN_TIMEOUT = 900

# -- the rules and the traffic --------------------------------------------------------------------

OR_100 = " OR ".join(f"q={i}" for i in range(100))
DEEP = " + ".join(["q"] * 10) + " > 100"  # nested by hand deeper than a Spark Connect plan carries (42 > 39)
DEEPEST = " + ".join(["q"] * 30) + " > 100"  # deeper than Spark's analyzer resolves in any session


def _declared() -> dict[str, list[dict]]:
    """Subscription → rules: 66 comparisons, a 100-term OR, a Python fallback rule, a deep filter."""
    return {
        "low": [{"name": f"eq{i}", "sql": f"q = {i}"} for i in range(33)],
        "high": [{"name": f"gt{i}", "sql": f"q > {i * 3} AND s <> 'v{i}'"} for i in range(33)],
        "hundred": [{"name": "or100", "sql": OR_100}],
        "dynamic": [{"name": "self-like", "sql": "'v1' LIKE s"}, {"name": "deep", "sql": DEEP},
                    {"name": "deepest", "sql": DEEPEST}],
    }


def _current() -> DesiredState:
    """What the namespace has today: some rules differ, so there are gains and losses."""
    subs = {
        "low": [Rule(f"eq{i}", SqlFilter(f"q = {i}")) for i in range(30)] + [Rule("big", SqlFilter("q > 90"))],
        "high": [Rule("old", SqlFilter("q > 50"))],
        "hundred": [Rule("or100", SqlFilter("q < 50"))],
        "dynamic": [Rule("self-like", SqlFilter("'v1' LIKE s"))],
    }
    return DesiredState((Topic("orders", tuple(Subscription(name, tuple(rules)) for name, rules in subs.items())),))


def _messages() -> list[Message]:
    rng = random.Random(11)
    out = []
    for i in range(60):
        user = {"s": TypedValue("string", rng.choice(["v1", "v2", "a_b", "x"]))}
        roll = rng.random()
        if roll < 0.8:
            user["q"] = TypedValue("long", rng.randint(0, 120))
        elif roll < 0.9:
            user["q"] = TypedValue("string", "n/a")  # a type mismatch: errors to count
        out.append(Message(sys={"MessageId": TypedValue("string", f"m{i:02d}")}, user=user))
    return out


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, Path]:
    """Rule files, a traffic sample and a plan (its 'before' side is the current rules)."""
    from reconciler.cli import main
    from reconciler.emulator import Emulator

    root = tmp_path_factory.mktemp("clusters")
    rules = root / "rules"
    rules.mkdir()
    doc = {"topic": "orders", "subscriptions": {name: {"rules": rs} for name, rs in _declared().items()}}
    (rules / "orders.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    store = Dataset(root / "sample", batch_rows=25)
    for message in _messages():
        store.add(message_to_row(message, topic="orders", subscription="all"))
    store.flush()
    with Emulator(_current()) as emulator:
        with pytest.raises(SystemExit) as done:
            main(["plan", str(rules), "--connection-string", emulator.connection_string, "--out", str(root / "plan.json")])
        assert done.value.code == 0
    return {"root": root, "rules": rules, "sample": root / "sample", "plan": root / "plan.json"}


# -- processes ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A Spark process in its own process group, its output copied to a log file; ``ready`` is
    set when a line matches the pattern that says it serves (or when its output ends)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, ready: str):
        self.log = log
        self.ready = threading.Event()
        # Run outside the repository: Python workers put their working directory on sys.path.
        self.proc = processes.spawn(args, env=env, cwd=log.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._copy, args=(re.compile(ready),), daemon=True).start()

    def _copy(self, ready: re.Pattern) -> None:
        with open(self.log, "wb") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                if ready.search(line.decode(errors="replace")):
                    self.ready.set()
        self.ready.set()

    def wait_ready(self) -> None:
        if not self.ready.wait(START_TIMEOUT) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"{self.proc.args[0]} did not start:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        processes.end(self.proc, timeout=60)


def _spark_env(python: str) -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": python}


@pytest.fixture(scope="module")
def executor_python(python_without) -> str:
    return python_without("lark")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory, executor_python) -> Iterator[str]:
    """A standalone master and one worker on loopback; yields the master URL."""
    logs = tmp_path_factory.mktemp("standalone")
    env = _spark_env(executor_python)
    port = _free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master = Daemon(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
        env, logs / "master.log", r"New state: ALIVE",
    )
    daemons = [master]
    try:
        master.wait_ready()
        url = f"spark://127.0.0.1:{port}"
        worker = Daemon(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port", "0",
             "--cores", "2", "--memory", "2g", "--work-dir", str(logs / "work"), url],
            env, logs / "worker.log", r"Successfully registered with master",
        )
        daemons.append(worker)
        worker.wait_ready()
        yield url
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory, executor_python) -> Iterator[str]:
    """A Spark Connect server (local[2] inside) on loopback; yields its sc:// URL."""
    logs = tmp_path_factory.mktemp("connect")
    port = _free_port()
    server = Daemon(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", f"spark.connect.grpc.binding.port={port}"],
        _spark_env(executor_python), logs / "server.log", r"Spark Connect server started",
    )
    try:
        server.wait_ready()
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stop()


# -- runs -----------------------------------------------------------------------------------------


def _impact(workspace: dict[str, Path], master: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``sbrules impact PLAN.json --traffic --format json`` in a fresh process (its process group is
    killed if it outlives the timeout)."""
    args = [sys.executable, "-m", "reconciler", "impact", str(workspace["plan"]), str(workspace["rules"]),
            "--traffic", str(workspace["sample"]), "--format", "json", "--spark-master", master]
    proc = processes.spawn(args, env=env or dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        processes.end(proc, signal.SIGKILL)
    return proc.returncode, out, err


def _traffic(stdout: str) -> dict:
    """The traffic report in the command's JSON output (the documents it prints, one after another)."""
    decoder, docs, text = json.JSONDecoder(), [], stdout.strip()
    while text:
        doc, end = decoder.raw_decode(text)
        docs.append(doc)
        text = text[end:].lstrip()
    (report,) = [d.get("traffic", d) for d in docs if "traffic" in d or "subscriptions" in d]
    return report


@pytest.fixture(scope="module")
def local_report(workspace) -> dict:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    code, out, err = _impact(workspace, "local[2]", env)
    assert code == 0, err[-3000:]
    report = _traffic(out)
    # What the report must show for the comparison to mean something.
    assert report["messages"] == 60 and report["unrouted"] > 0
    assert sum(len(s["rules"]) for s in report["subscriptions"]) == 70
    assert {r["rule"] for r in report["python_fallback_rules"]} == {"self-like", "deepest"}
    assert any(s["gained"] for s in report["subscriptions"]) and any(s["lost"] for s in report["subscriptions"])
    assert any(s["errors"] for s in report["subscriptions"])
    return report


def test_standalone_cluster_report_equals_the_local_one(workspace, standalone, executor_python, local_report):
    """$SPARK_REMOTE names a Connect server that does not exist: ``--spark-master`` wins."""
    env = {**os.environ, "PYSPARK_PYTHON": executor_python, "SPARK_REMOTE": f"sc://127.0.0.1:{_free_port()}"}
    code, out, err = _impact(workspace, standalone, env)
    assert code == 0, err[-3000:]
    assert _traffic(out) == local_report


def test_spark_connect_report_equals_the_local_one(workspace, connect_server, local_report):
    """Over Spark Connect the filter nested by hand is evaluated by the Python UDF; every count
    is the local one."""
    code, out, err = _impact(workspace, connect_server)
    assert code == 0, err[-3000:]
    report = _traffic(out)
    (deep,) = [r for r in report["python_fallback_rules"] if r["rule"] == "deep"]
    assert "Spark Connect" in deep["reason"]
    expected = json.loads(json.dumps(local_report))
    (dynamic,) = [s for s in expected["subscriptions"] if s["subscription"] == "dynamic"]
    (rule,) = [r for r in dynamic["rules"] if r["name"] == "deep"]
    rule["evaluation"] = "python"
    fallbacks = expected["python_fallback_rules"]
    fallbacks.insert([r["rule"] for r in fallbacks].index("deepest"), deep)  # the report lists rules in file order
    assert report == expected
