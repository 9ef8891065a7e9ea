"""Traffic fixtures: one SparkSession for the whole run (JVM start-up is the expensive part)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from reconciler.model import (
    CorrelationFilter,
    Message,
    TypedValue,
    ValueType,
    correlation_from_doc,
    system_property_name,
)
from reconciler.traffic.sample.rows import message_to_row, rows_to_table


@pytest.fixture(scope="session")
def spark():
    from reconciler.traffic.spark.session import spark_session

    session = spark_session("local[2]", app_name="sbrules-tests")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def python_without(tmp_path_factory):
    """python_without(*packages) -> an interpreter script like this one whose imports lack
    ``packages`` and sbrules (as a cluster's executors do, unless sbrules ships itself)."""
    purelib = Path(__import__("pyspark").__file__).parents[1]

    def make(*packages: str) -> str:
        directory = tmp_path_factory.mktemp("python-without")
        site = directory / "site"
        site.mkdir()
        excluded = ("reconciler", "sbrules", "__editable__", *packages)
        for entry in purelib.iterdir():
            if not entry.name.startswith(excluded) and not entry.name.endswith(".pth"):
                (site / entry.name).symlink_to(entry)
        script = directory / "python"
        script.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec {sys.executable} -S -P "$@"\n')
        script.chmod(0o755)
        probe = subprocess.run([str(script), "-c", "import pyspark, reconciler"], capture_output=True, text=True, cwd=Path(__file__).parents[2])
        assert "No module named 'reconciler'" in probe.stderr, probe.stderr
        return str(script)

    return make


@pytest.fixture
def interpreted(spark):
    """Evaluate without code generation: the differential tests run hundreds of filter columns
    over a few hundred rows, where compiling Java for them costs far more than interpreting."""
    keys = ("spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode")
    saved = {k: spark.conf.get(k, None) for k in keys}
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    spark.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    yield spark
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


@pytest.fixture
def frame_of(spark, tmp_path):
    """Messages → a Spark DataFrame through the real Parquet layout (column ``idx`` = position)."""

    def build(messages: Iterable[Message], topic: str = "t") -> "object":
        rows = []
        for i, message in enumerate(messages):
            row = message_to_row(message, topic=topic, subscription="s")
            row["message_id"] = row["message_id"] or f"m{i}"
            rows.append(row)
        path = Path(tmp_path) / f"frame-{len(list(tmp_path.iterdir()))}.parquet"
        table = rows_to_table(rows)
        table = table.append_column("idx", pa.array(range(len(rows)), pa.int64()))
        pq.write_table(table, path)
        return spark.read.parquet(str(path))

    return build


# -- the SQL vectors (tests/data/sql_vectors.yaml) --------------------------------------------

VECTORS = Path(__file__).resolve().parents[1] / "data" / "sql_vectors.yaml"


def typed(raw: Any) -> TypedValue:
    """A vector value: plain YAML scalar, or ``{type: int32, value: N}``."""
    if isinstance(raw, dict) and "type" in raw:
        vtype = {"int32": "int", "int64": "long"}.get(raw["type"], raw["type"])
        return TypedValue(vtype, raw["value"])
    return TypedValue.infer(raw)


def message(vector: dict[str, Any]) -> Message:
    sys_props = {}
    for key, raw in (vector.get("sys") or {}).items():
        name = system_property_name(key)
        value = typed(raw)
        if value.type is ValueType.NULL:
            continue
        sys_props[name] = value
    user = {str(k): typed(v) for k, v in (vector.get("props") or {}).items()}
    return Message(sys=sys_props, user=user)


@dataclass(frozen=True)
class FilterVector:
    id: str
    expr: str
    params: dict[str, TypedValue]
    message: Message
    expect: Any


def filter_vectors() -> list[FilterVector]:
    """Every filter vector the engine accepts at creation time (``error:parse`` ones excluded)."""
    doc = yaml.safe_load(VECTORS.read_text())
    out = []
    for v in doc["filter_vectors"]:
        if v["expect"] == "error:parse":
            continue
        params = {k: typed(x) for k, x in (v.get("params") or {}).items()}
        out.append(FilterVector(v["id"], v["expr"], params, message(v), v["expect"]))
    return out


def correlation_vectors() -> list[tuple[str, CorrelationFilter, Message, Any]]:
    doc = yaml.safe_load(VECTORS.read_text())
    out = []
    for v in doc["correlation_vectors"]:
        flt = dict(v["filter"])
        props = flt.pop("properties", None)
        fields = {k[0].lower() + "".join("_" + c.lower() if c.isupper() else c for c in k[1:]): x for k, x in flt.items()}
        fields = {("subject" if k == "label" else k): x for k, x in fields.items()}
        if props:
            fields["properties"] = {k: typed(x).to_typed_form() for k, x in props.items()}
        out.append((v["id"], correlation_from_doc(fields), message(v), v["expect"]))
    return out


@pytest.fixture(scope="session")
def sql_filter_vectors() -> list[FilterVector]:
    return filter_vectors()


@pytest.fixture(scope="session")
def sql_correlation_vectors():
    return correlation_vectors()


# -- impact reports without Spark ---------------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """One subscription's sampled messages: delivered before and after (kept), only after (gained),
    only before (lost), and failing its declared filter (errors, delivered neither before nor after)."""

    kept: int = 0
    gained: int = 0
    lost: int = 0
    errors: int = 0


def build_report(traffic: Sequence[Traffic], topic: str = "orders", unrouted: int = 0) -> Any:
    """The impact report :func:`impact.shape` makes of grouped outcomes shaped like ``traffic``
    (subscription ``i`` declares filter ``n = i`` where it had ``n = i OR legacy``), its examples
    resolved as a Spark run resolves them: the report every format renders, made without a JVM."""
    from dataclasses import replace

    from reconciler.model import Rule, SqlFilter
    from reconciler.traffic.analysis.impact import ExampleIds, Scope, questions, shape
    from reconciler.traffic.spark.tally import BITS, Answers, Tally

    scopes, filters = [], {}
    for i, _ in enumerate(traffic):
        desired = Rule("main", SqlFilter(f"n = {i}"))
        current = Rule("main", SqlFilter(f"n = {i} OR legacy = {i}"))
        filters[desired.filter], filters[current.filter] = 2 * i, 2 * i + 1
        scopes.append(Scope(topic, f"sub-{i:03d}", (desired,), (current,), "live"))
    words = (2 * len(traffic) + BITS - 1) // BITS
    groups: list[tuple[set[int], set[int], int]] = []  # (matched bits, error bits, count)
    for i, t in enumerate(traffic):
        groups += [({2 * i, 2 * i + 1}, set(), t.kept), ({2 * i}, set(), t.gained), ({2 * i + 1}, set(), t.lost)]
        groups.append((set(), {2 * i}, t.errors))
    groups.append((set(), set(), unrouted))
    groups = [g for g in groups if g[2]]

    def masks(bits_of) -> np.ndarray:
        out = np.zeros((len(groups), words), dtype=np.int64)
        for row, group in enumerate(groups):
            for bit in bits_of(group):
                out[row, bit // BITS] |= np.int64(1) << np.int64(bit % BITS)
        return out

    n = len(groups)
    start = int(np.datetime64("2024-05-01T10:00:00", "us").astype(np.int64))
    minute = 60_000_000
    counts = Tally(
        topic=np.array([topic.lower()] * n, dtype=object),
        matched=masks(lambda g: g[0]),
        errors=masks(lambda g: g[1]),
        count=np.array([g[2] for g in groups], dtype=np.int64),
        hashes=np.arange(3 * n, dtype=np.int64).reshape(n, 3),
        first=start + np.arange(n, dtype=np.int64) * minute,
        last=start + np.arange(n, dtype=np.int64) * minute + 90 * minute,
    )
    asked = questions(scopes, filters)
    answers = Answers.of(asked, counts)
    found = {}
    for h in sorted(set().union(*(answers.examples(q) for q in asked if q.examples))):
        message = Message(
            sys={"MessageId": TypedValue.infer(f"msg-{h:05d}"), "Label": TypedValue.infer("order.placed")},
            user={"n": TypedValue("int", h % 7), "Region": TypedValue.infer("eu")},
        )
        found[h] = (f"msg-{h:05d}", message_to_row(message, topic=topic, subscription="all", body_size=42))
    examples = ExampleIds(answers, found)
    report = shape(answers, scopes, filters, {}, examples)
    return replace(report, example_messages=examples.messages(), dataset="samples/orders", against="live")


def routing_health(doc: dict[str, Any]) -> Any:
    """The routing-health section of an ``sbrules analyze`` JSON document (a golden file) as the
    report model holds it, for renderers to show without a Spark run."""
    from reconciler.traffic.report.routing import RoutingHealth

    return RoutingHealth.from_json(doc)
